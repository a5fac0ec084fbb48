package gateway_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/gateway"
)

// The gateway is the upstream's client: it calls with the route's credential, and an
// upstream that trusts it as a proxy (a self-hosted server behind it reading the
// client's address from X-Forwarded-For, X-Real-IP or Forwarded, for an allowlist or a
// rate limit) took what the member wrote in those headers as what the gateway vouched
// for: a member chose the address the upstream saw, and the host and scheme it builds
// links from. They never go upstream (as net/http/httputil's ReverseProxy drops them
// before its Rewrite); the member's address is not told to a provider either. Other
// headers pass as they came.
func TestClientForwardingHeadersNeverReachTheUpstream(t *testing.T) {
	var got http.Header
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
	}))
	defer up.Close()
	e := newEnv(t, up.URL, gateway.Config{})
	res := send(t, "GET", e.front.URL+"/v1/models", "", strings.NewReader(""),
		"X-Api-Key", "tgk_good", "X-Forwarded-For", "10.0.0.1", "X-Forwarded-Host", "evil.example", "X-Forwarded-Proto", "http",
		"X-Forwarded-Port", "80", "X-Real-Ip", "10.0.0.1", "Forwarded", "for=10.0.0.1;host=evil.example", "X-Custom", "kept")
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || got == nil {
		t.Fatalf("status %d", res.StatusCode)
	}
	for _, h := range []string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Forwarded-Port", "X-Real-Ip", "Forwarded"} {
		if v := got.Values(h); len(v) != 0 {
			t.Errorf("upstream got %s: %q", h, v)
		}
	}
	if got.Get("X-Custom") != "kept" {
		t.Errorf("X-Custom %q, want kept", got.Get("X-Custom"))
	}
}
