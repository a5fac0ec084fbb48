package e2e_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/testio"
)

// TestWebSocketThroughEnvoyGetsTheEnforcersAnswers: a WebSocket handshake (the Realtime
// API's, a Codex Responses WebSocket's) through deploy/envoy/envoy.yaml reaches the
// enforcer and gets its documented answers: without a key the check's 401, with one the
// request-body filter's 403 service_gateway_billing_deferred naming realtime_sessions
// (docs/enforcer.md: once upgraded its messages pass Envoy unread), JSON, and it never
// reaches the provider. Before, the file named no upgrade in upgrade_configs, and Envoy's
// connection manager refused every upgrade itself before any filter ran: 403
// upgrade_failed with an empty body and no X-Service-Error-Code, to a member without a
// key or a blocked one alike (never the 401 or the 429 with its Retry-After).
func TestWebSocketThroughEnvoyGetsTheEnforcersAnswers(t *testing.T) {
	t.Parallel()
	var reached atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		http.Error(w, "no", http.StatusBadRequest)
	}))
	t.Cleanup(up.Close)
	s := startStack(t, gatewayEnv(up.URL))
	o := s.setUpOrg(t)
	_, front := s.deployedEnvoy(t, up.URL)

	handshake := func(key string) (*http.Response, string) {
		h := map[string]string{"Connection": "Upgrade", "Upgrade": "websocket",
			"Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
		if key != "" {
			h["Authorization"] = "Bearer " + key
		}
		res, b := testio.Send(t, "GET", front+"/v1/realtime?model=gpt-realtime", h, "")
		return res, string(b)
	}

	res, body := handshake("")
	if res.StatusCode != http.StatusUnauthorized || !strings.Contains(body, `"code":"unauthorized"`) {
		t.Errorf("without a key: %d %q, want the check's 401", res.StatusCode, body)
	}
	res, body = handshake(o.key)
	if res.StatusCode != http.StatusForbidden || res.Header.Get("X-Service-Error-Code") != "service_gateway_billing_deferred" ||
		!strings.Contains(body, `"endpoint":"realtime_sessions"`) || !strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
		t.Errorf("admitted: %d %q %q %q, want 403 service_gateway_billing_deferred naming realtime_sessions",
			res.StatusCode, res.Header.Get("X-Service-Error-Code"), res.Header.Get("Content-Type"), body)
	}
	if n := reached.Load(); n != 0 {
		t.Errorf("the provider got %d handshakes", n)
	}
}
