package e2e_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

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

// TestAllowedWebSocketPassesThroughEnvoy: with TOLLGATE_DEFERRED_BILLING_ALLOW naming
// realtime_sessions, a Realtime WebSocket through deploy/envoy/envoy.yaml opens and its
// messages pass both ways: the upgrade's route reads the handshake's headers alone (a
// per-route ext_proc override), so the request-body filter does not wait for a body the
// upgrade never ends. The check still answers the handshake (401 without a key, 429 to a
// blocked member), and the provider gets the route's credential, never the member's key.
// The enforcer does not read the session's messages behind Envoy: the session is settled
// when it ends, at 0, incomplete (docs/enforcer.md, "WebSockets"). Before, the
// request-body filter's BUFFERED mode held the handshake until stream_idle_timeout (10
// minutes; 408 "stream timeout"), and the session never opened.
func TestAllowedWebSocketPassesThroughEnvoy(t *testing.T) {
	t.Parallel()
	type handshake struct{ auth, path string }
	got := make(chan handshake, 4)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- handshake{r.Header.Get("Authorization"), r.URL.RequestURI()}
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		ctx := r.Context()
		_ = c.Write(ctx, websocket.MessageText, []byte(`{"type":"session.created","session":{"model":"gpt-realtime"}}`))
		// Each client event is answered by a response, its usage reported.
		for {
			_, msg, err := c.Read(ctx)
			if err != nil {
				return
			}
			_ = c.Write(ctx, websocket.MessageText, []byte(`{"type":"response.created","response":{"id":"resp_1"}}`))
			_ = c.Write(ctx, websocket.MessageText, []byte(`{"type":"response.output_text.delta","response_id":"resp_1","delta":"echo `+string(msg)+`"}`))
			_ = c.Write(ctx, websocket.MessageText, []byte(`{"type":"response.done","response":{"id":"resp_1","usage":{"input_tokens":1000,"output_tokens":200}}}`))
		}
	}))
	t.Cleanup(up.Close)
	env := gatewayEnv(up.URL)
	env["TOLLGATE_DEFERRED_BILLING_ALLOW"] = "realtime_sessions"
	env["TOLLGATE_UPSTREAM_AUTHORIZATION"] = providerAuthorization // set on every admitted request
	s := startStack(t, env)
	o := s.setUpOrg(t)
	proxy, front := s.deployedEnvoy(t, up.URL)
	ws := "ws" + strings.TrimPrefix(front, "http") + "/v1/realtime?model=gpt-realtime"

	dial := func(key string) (*websocket.Conn, *http.Response, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h := http.Header{}
		if key != "" {
			h.Set("Authorization", "Bearer "+key)
		}
		return websocket.Dial(ctx, ws, &websocket.DialOptions{HTTPHeader: h})
	}

	if _, res, err := dial(""); err == nil || res == nil || res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without a key: %v %v, want the check's 401", res, err)
	}
	c, res, err := dial(o.key)
	if err != nil {
		t.Fatalf("the allowed session did not open: %v (%v); problems: %v", err, res, proxy.Problems())
	}
	defer c.CloseNow()
	if h := <-got; h.auth != providerAuthorization || h.path != "/v1/realtime?model=gpt-realtime" {
		t.Errorf("the provider got the handshake %+v, want the route's credential", h)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	read := func() string {
		t.Helper()
		_, msg, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("reading the session: %v; problems: %v", err, proxy.Problems())
		}
		return string(msg)
	}
	if m := read(); !strings.Contains(m, "session.created") {
		t.Fatalf("first event %q", m)
	}
	for _, say := range []string{"hello", "again"} {
		if err := c.Write(ctx, websocket.MessageText, []byte(say)); err != nil {
			t.Fatal(err)
		}
		var events []string
		for len(events) < 3 {
			events = append(events, read())
		}
		if !strings.Contains(events[1], "echo "+say) || !strings.Contains(events[2], "response.done") {
			t.Fatalf("the session's events after %q: %q", say, events)
		}
	}
	// Open, the session holds its request: one pending.
	if st := s.status(t, o); st.Coverage.PendingRequests == nil || *st.Coverage.PendingRequests != 1 {
		t.Errorf("while the session is open: coverage %+v, want its request pending", st.Coverage)
	}
	if err := c.Close(websocket.StatusNormalClosure, ""); err != nil {
		t.Fatalf("closing: %v", err)
	}
	var st status
	waitFor(t, 10*time.Second, "the session settled", func() bool {
		st = s.status(t, o)
		return st.Coverage.PendingRequests != nil && *st.Coverage.PendingRequests == 0
	})
	if st.Coverage.IncompleteRequests != 1 || st.Windows[0].UsedMicroUsd != 0 {
		t.Errorf("the session settled as %+v, used %d: want 0, one incomplete request", st.Coverage, st.Windows[0].UsedMicroUsd)
	}
	for _, p := range proxy.Problems() {
		t.Errorf("envoyemu: %s", p)
	}

	// A blocked member's handshake: the check's 429, on the upgrade's route too.
	s.guardPolicy(t, o, "0", nil)
	s.waitBlocked(t, o)
	if _, res, err := dial(o.key); err == nil || res == nil || res.StatusCode != http.StatusTooManyRequests ||
		res.Header.Get("X-Service-Error-Code") != "service_gateway_usage_limit_exceeded" {
		t.Fatalf("a blocked member's handshake: %v %v, want the check's 429", res, err)
	}
}
