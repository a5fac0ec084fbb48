package gateway_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/gateway"
)

// TRACE asks the upstream to echo the request it received (RFC 9110, 9.3.8; Apache's
// TraceEnable is on by default): proxied, that request carries the provider's
// credential, which the gateway set, and the member would read it in the echo. So TRACE
// and TRACK (IIS's) are refused 405 in any case, before the check, never sent upstream
// (before 2026-12-03 one was admitted and sent, and the echo came back with the
// operator's key).
func TestTraceNeverReachesTheUpstream(t *testing.T) {
	var reached []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached = append(reached, r.Method)
		d, _ := httputil.DumpRequest(r, false) // as a server honouring TRACE answers
		w.Header().Set("Content-Type", "message/http")
		_, _ = w.Write(d)
	}))
	defer up.Close()
	e := newEnv(t, up.URL, gateway.Config{})
	for _, method := range []string{"TRACE", "trace", "TRACK"} {
		res := send(t, method, e.front.URL+"/v1/chat/completions", "tgk_good", nil)
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if strings.Contains(string(b), "sk-provider") {
			t.Fatalf("%s: the member read the provider's credential: %s", method, b)
		}
		if res.StatusCode != http.StatusMethodNotAllowed || res.Header.Get("X-Service-Error-Code") != "service_gateway_method_unsupported" ||
			res.Header.Get("Allow") == "" || res.Header.Get("X-Service-Request-Id") != "" {
			t.Fatalf("%s: %d %v %s, want 405 service_gateway_method_unsupported with Allow", method, res.StatusCode, res.Header, b)
		}
	}
	if len(reached) != 0 {
		t.Fatalf("the upstream got %v", reached)
	}
	e.gate.mu.Lock()
	checked := len(e.gate.hints)
	e.gate.mu.Unlock()
	if checked != 0 {
		t.Fatalf("%d checks: a refused method is refused before the check", checked)
	}
}
