package httpcheck_test

import (
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/internal/enforcertest"
)

// A forward-auth proxy (the shipped Caddyfile, tollgate dev's proxy) sends the upstream
// the path as the client wrote it, dot segments and all, and /check judged the path as
// written: "/v1/batches/." or "/v1/batches/x/.." named no batch to it (admitted), where
// an upstream that resolves dot segments (RFC 3986, 5.2.4: nginx, Tomcat, CDNs) ran a
// batch, billed later and out of sight, the deferred-billing refusal notwithstanding.
// The gateway refuses such a path before anything is checked (its dotSegment); /check
// now refuses it the same way: 400 service_gateway_path_unsupported, nothing admitted.
// No SDK sends one (their URL libraries resolve dot segments).
func TestCheckRefusesDotSegments(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{})
	w := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
	for _, uri := range []string{"/v1/batches/.", "/v1/batches/x/..", "/v1/batches/x/%2e%2E", "/v1/batches/x/..%2F",
		"/v1/batches/x/..;", "/v1/batches/x\\..", "/v1/./chat/completions?stream=true"} {
		res, b := askCheck(t, e, "GET", "", map[string]string{"X-Api-Key": w.Key, "X-Forwarded-Method": "POST", "X-Forwarded-Uri": uri})
		if res.StatusCode != 400 || res.Header.Get("X-Service-Error-Code") != "service_gateway_path_unsupported" ||
			res.Header.Get("X-Service-Request-Id") != "" || !strings.Contains(b, `"code":"service_gateway_path_unsupported"`) {
			t.Errorf("%s: %d %v %s, want 400 service_gateway_path_unsupported", uri, res.StatusCode, res.Header, b)
		}
	}
	// The path after /check (Envoy's HTTP ext_authz) too.
	if res, b := askCheck(t, e, "POST", "/v1/batches/x/%2e%2e", map[string]string{"X-Api-Key": w.Key}); res.StatusCode != 400 {
		t.Errorf("the path after /check: %d %s", res.StatusCode, b)
	}
	// Dots within a segment are no dot segment.
	for _, uri := range []string{"/v1/chat/completions", "/v1/files/..abc", "/v1/files/a;.."} {
		if res, b := askCheck(t, e, "GET", "", map[string]string{"X-Api-Key": w.Key, "X-Forwarded-Method": "POST", "X-Forwarded-Uri": uri}); res.StatusCode != 200 {
			t.Errorf("%s: %d %s", uri, res.StatusCode, b)
		}
	}
}
