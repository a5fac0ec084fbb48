package httpcheck_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/tollgate-dev/tollgate/internal/testio"

	"github.com/tollgate-dev/tollgate/enforcer/gate"
	"github.com/tollgate-dev/tollgate/enforcer/internal/enforcertest"
	"github.com/tollgate-dev/tollgate/pkg/credential"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// TestCaddyForwardAuth runs the shipped deploy/caddy/Caddyfile with a real Caddy in front
// of a small OpenAI-compatible upstream, the enforcer deciding through /check: a client
// is admitted until its spend passes the hard limit, then gets the 429 with its headers.
// The upstream reports each response's usage to /settle, as a gateway without ext_proc
// must. The upstream never sees the member's Tollgate key, and sees the provider's
// credential from Caddy's environment when it is set.
func TestCaddyForwardAuth(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		// the header the client presents its key in: x-api-key when empty, a bearer
		// Authorization, x-goog-api-key (Google's Gen AI SDK) or api-key (Azure OpenAI
		// clients)
		via string
		// what the upstream must see
		authorization, apiKey string
	}{
		{name: "x-api-key, provider Authorization configured", env: []string{"TOLLGATE_UPSTREAM_AUTHORIZATION=Bearer sk-provider-openai"},
			authorization: "Bearer sk-provider-openai"},
		{name: "bearer key, provider x-api-key configured (Anthropic)", env: []string{"TOLLGATE_UPSTREAM_API_KEY=sk-ant-provider"}, via: "Authorization",
			apiKey: "sk-ant-provider"},
		{name: "bearer key, nothing configured", via: "Authorization"},
		{name: "x-goog-api-key (Google's Gen AI SDK), nothing configured", via: "X-Goog-Api-Key"},
		{name: "api-key (Azure OpenAI clients), nothing configured", via: "Api-Key"},
		{name: "api-key (Azure OpenAI clients), provider Authorization configured", env: []string{"TOLLGATE_UPSTREAM_AUTHORIZATION=Bearer sk-provider-openai"},
			via: "Api-Key", authorization: "Bearer sk-provider-openai"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			caddyForwardAuth(t, tc.env, tc.via, tc.authorization, tc.apiKey)
		})
	}
}

func caddyForwardAuth(t *testing.T, env []string, via string, wantAuthorization, wantAPIKey string) {
	caddy := testio.LookTool(t, "caddy", "apt-get install caddy")
	e := enforcertest.New(t, enforcertest.Options{})
	e.CP.SetPrice("gpt-4o-mini", 2_000, 8_000)
	w := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
	enforcerAddr := strings.TrimPrefix(e.HTTPURL, "http://")

	var mu sync.Mutex
	var seenIDs []string
	upstream := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Service-Request-Id")
		mu.Lock()
		seenIDs = append(seenIDs, id)
		mu.Unlock()
		// Credentials stay home: nothing of the member's key, the provider's as set.
		for name, vs := range r.Header {
			for _, v := range vs {
				if strings.Contains(v, w.Key) {
					http.Error(rw, "the member's key reached the upstream in "+name, 400)
					return
				}
			}
		}
		// Nor the member's choice of the operator's organization or project, nor cookies.
		for _, h := range append(slices.Clone(credential.BillingScopeHeaders), "Cookie") {
			if v := r.Header.Values(h); len(v) != 0 {
				http.Error(rw, fmt.Sprintf("the client's %s reached the upstream: %q", h, v), 400)
				return
			}
		}
		if got := r.Header.Get("Authorization"); got != wantAuthorization {
			http.Error(rw, fmt.Sprintf("Authorization %q, want %q", got, wantAuthorization), 400)
			return
		}
		if got := r.Header.Get("X-Api-Key"); got != wantAPIKey {
			http.Error(rw, fmt.Sprintf("X-Api-Key %q, want %q", got, wantAPIKey), 400)
			return
		}
		// 100 input + 5 output tokens: 240,000 micro-USD at the prices above.
		report, _ := json.Marshal(map[string]any{"requestId": id, "model": "gpt-4o-mini", "inputTokens": 100, "outputTokens": 5})
		res, err := http.Post(e.HTTPURL+"/settle", "application/json", bytes.NewReader(report))
		if err != nil || res.StatusCode != 200 {
			http.Error(rw, fmt.Sprintf("settle failed: %v %v", err, res), 500)
			return
		}
		res.Body.Close()
		rw.Header().Set("Content-Type", "application/json")
		io.WriteString(rw, `{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":100,"completion_tokens":5,"total_tokens":105}}`)
	}))
	defer upstream.Close()

	caddyAddr, caddyLog := startCaddyForwardAuth(t, caddy, enforcerAddr, strings.TrimPrefix(upstream.URL, "http://"), env)

	path := "/v1/chat/completions"
	call := func(extra ...string) (*http.Response, string) {
		query := ""
		if len(extra)%2 == 1 {
			query, extra = extra[0], extra[1:]
		}
		req, _ := http.NewRequest("POST", "http://"+caddyAddr+path+query, strings.NewReader(`{"model":"gpt-4o-mini","messages":[]}`))
		req.Header.Set("Content-Type", "application/json")
		switch via {
		case "Authorization":
			req.Header.Set("Authorization", "Bearer "+w.Key)
		case "":
			req.Header.Set("X-Api-Key", w.Key)
		default:
			req.Header.Set(via, w.Key)
		}
		req.Header.Set("X-Service-Request-Id", "req_chosenbytheclient") // must not reach the upstream
		// Nor these (credential.BillingScopeHeaders), nor the cookies.
		req.Header.Set("OpenAI-Organization", "org-members-own")
		req.Header.Set("OpenAI-Project", "proj_members_pick")
		req.Header.Set("X-Goog-User-Project", "members-project")
		req.Header.Set("Cookie", "console_session=secret")
		for i := 0; i+1 < len(extra); i += 2 {
			req.Header.Set(extra[i], extra[i+1])
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}
	// Each call names in its Connection header the headers Caddy sets or /check reads:
	// a proxy drops the headers its client lists there, and Caddy dropped them after
	// forward_auth and request_header had set them (the request id the reporter settles
	// by, X-Forwarded-Uri that /check judges the query by), so the Caddyfile drops the
	// client's Connection header first.
	const listed = "X-Service-Request-Id, X-Forwarded-Method, X-Forwarded-Uri, X-Service-Usage-State"
	// A batch is billed later, out of the enforcer's sight: refused as the gateway refuses
	// it (TOLLGATE_DEFERRED_BILLING=refuse), never sent upstream.
	path = "/v1/batches"
	if res, body := call(); res.StatusCode != 403 || res.Header.Get("X-Service-Error-Code") != "service_gateway_billing_deferred" {
		t.Fatalf("a batch through Caddy: %d %s", res.StatusCode, body)
	}
	path = "/v1/chat/completions"
	// So is a WebSocket: once upgraded, a Realtime session's messages pass Caddy unread.
	wsHeader := http.Header{}
	switch via {
	case "Authorization":
		wsHeader.Set("Authorization", "Bearer "+w.Key)
	case "":
		wsHeader.Set("X-Api-Key", w.Key)
	default:
		wsHeader.Set(via, w.Key)
	}
	wsCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if c, res, err := websocket.Dial(wsCtx, "ws://"+caddyAddr+"/v1/realtime?model=gpt-realtime", &websocket.DialOptions{HTTPHeader: wsHeader}); err == nil {
		c.CloseNow()
		t.Fatal("a Realtime WebSocket through Caddy was admitted")
	} else if res == nil || res.StatusCode != 403 || res.Header.Get("X-Service-Error-Code") != "service_gateway_billing_deferred" {
		t.Fatalf("a Realtime WebSocket through Caddy: %v %v", res, err)
	}
	admitted := 0
	for {
		res, body := call("Connection", listed)
		if res.StatusCode == 200 {
			admitted++
			if res.Header.Get("X-Service-Usage-State") != "within_limit" {
				t.Fatalf("admitted response usage state %q", res.Header.Get("X-Service-Usage-State"))
			}
			if admitted > 10 {
				t.Fatal("never blocked")
			}
			continue
		}
		if res.StatusCode != 429 {
			t.Fatalf("status %d: %s\n%s", res.StatusCode, body, caddyLog)
		}
		if res.Header.Get("X-Service-Error-Code") != "service_gateway_usage_limit_exceeded" || res.Header.Get("X-Service-Usage-State") != "blocked" ||
			res.Header.Get("Retry-After") != "61200" || res.Header.Get("X-Should-Retry") != "false" || !strings.Contains(body, `"type":"usage_limit_reached"`) {
			t.Fatalf("429 through Caddy: %v %s", res.Header, body)
		}
		break
	}
	// What Caddy cannot take out of the request, /check refuses (forward_auth sends it
	// the query in X-Forwarded-Uri, and the client's headers), before the check.
	if res, body := call("?k%65y=" + w.Key); res.StatusCode != 401 || !strings.Contains(body, "Send it in a header") {
		t.Fatalf("a key in the query through Caddy: %d %s", res.StatusCode, body)
	}
	if res, body := call("?alt=proto"); res.StatusCode != 400 || res.Header.Get("X-Service-Error-Code") != "service_gateway_response_format_unsupported" {
		t.Fatalf("alt=proto through Caddy: %d %s", res.StatusCode, body)
	}
	if res, body := call("X-HTTP-Method-Override", "GET"); res.StatusCode != 400 || res.Header.Get("X-Service-Error-Code") != "service_gateway_method_override_unsupported" {
		t.Fatalf("a method override through Caddy: %d %s", res.StatusCode, body)
	}
	if res, body := call("?alt=proto", "Connection", listed); res.StatusCode != 400 || res.Header.Get("X-Service-Error-Code") != "service_gateway_response_format_unsupported" {
		t.Fatalf("alt=proto through Caddy, X-Forwarded-Uri listed in Connection: %d %s", res.StatusCode, body)
	}
	if admitted != 5 || e.CP.Spend(w.ID, window.Day) != 5*240_000 {
		t.Fatalf("admitted %d, spend %d", admitted, e.CP.Spend(w.ID, window.Day))
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range seenIDs {
		if !strings.HasPrefix(id, "req_") || id == "req_chosenbytheclient" {
			t.Fatalf("upstream saw request id %q", id)
		}
	}
}

// startCaddyForwardAuth runs the shipped deploy/caddy/Caddyfile with a real Caddy (its
// path caddy) in front of upstream (host:port), asking the enforcer at enforcerAddr,
// with the environment env added; it returns the address Caddy listens on and its log.
func startCaddyForwardAuth(t *testing.T, caddy, enforcerAddr, upstream string, env []string) (string, *testio.SyncBuffer) {
	t.Helper()
	caddyAddr := testio.FreeAddr(t)
	caddyfile, err := filepath.Abs("../../deploy/caddy/Caddyfile")
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	caddyLog := &testio.SyncBuffer{}
	cmd := exec.Command(caddy, "run", "--config", caddyfile, "--adapter", "caddyfile")
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_DATA_HOME="+home, "XDG_CONFIG_HOME="+home,
		"TOLLGATE_CADDY_ADDR="+caddyAddr, "TOLLGATE_ENFORCER_HTTP_ADDR="+enforcerAddr,
		"TOLLGATE_UPSTREAM="+upstream, "TOLLGATE_UPSTREAM_AUTHORIZATION=", "TOLLGATE_UPSTREAM_API_KEY=")
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = caddyLog, caddyLog
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", caddyAddr, 100*time.Millisecond)
		if err == nil {
			c.Close()
			return caddyAddr, caddyLog
		}
		if time.Now().After(deadline) {
			t.Fatalf("caddy did not start:\n%s", caddyLog.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A browser app calls the Caddy forward-auth example from its own origin, as it calls
// the gateway (docs/gateway.md, "Browser apps (CORS)"): the real Chromium runs the page.
// The preflight (an OPTIONS without any key) is answered by Caddy, before /check, which
// would refuse it 401; the admitted call reads its answer and X-Service-Usage-State, the
// refused one its 429 and X-Service-Error-Code. The upstream's own CORS policy (for
// another origin) is replaced. Before 2026-12-03 both calls failed in the browser as
// "Failed to fetch".
func TestBrowserAppThroughCaddyForwardAuth(t *testing.T) {
	caddy := testio.LookTool(t, "caddy", "apt-get install caddy")
	e := enforcertest.New(t, enforcertest.Options{})
	e.CP.SetPrice("gpt-4o-mini", 2_000, 8_000)
	admitted := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
	blocked := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
	e.CP.SetSpend(blocked.ID, window.Day, 1*enforcertest.USD)
	var mu sync.Mutex
	var methods []string
	upstream := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		mu.Lock()
		methods = append(methods, r.Method)
		mu.Unlock()
		rw.Header().Set("Access-Control-Allow-Origin", "https://console.example")
		rw.Header().Set("Access-Control-Allow-Credentials", "true")
		rw.Header().Set("Content-Type", "application/json")
		io.WriteString(rw, `{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o-mini","choices":[{"message":{"content":"hello"}}]}`)
	}))
	defer upstream.Close()
	caddyAddr, caddyLog := startCaddyForwardAuth(t, caddy, strings.TrimPrefix(e.HTTPURL, "http://"), strings.TrimPrefix(upstream.URL, "http://"), nil)
	got := testio.BrowserCalls(t, "http://"+caddyAddr+"/v1/chat/completions", admitted.Key, blocked.Key)
	if want := "200 within_limit - answer|429 blocked service_gateway_usage_limit_exceeded refusal"; got != want {
		t.Fatalf("the browser app saw %q, want %q\n%s", got, want, caddyLog)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(methods) != 1 || methods[0] != "POST" {
		t.Fatalf("the upstream got %v: want the admitted call alone, no preflight", methods)
	}
}

// TestCaddyForwardAuthAnswersAnUnreachableEnforcerInJSON: the shipped Caddyfile, with a
// real Caddy, answers a request whose check the enforcer did not answer (nothing listens
// at its address) as deploy/envoy's Envoy does: 503, the enforcer's JSON error body
// (gate.BodyEnforcerUnavailable) and X-Service-Error-Code:
// service_gateway_enforcer_unavailable, which the OpenAI and Anthropic SDKs show (and a
// browser app may read). Before, Caddy answered its own 502 with an empty body, and an
// SDK said only "502 status code (no body)". Once the enforcer admitted the request, what
// the provider answers passes untouched: its own 502 and 503 with their bodies, and
// Caddy's 502 when the provider cannot be reached is not called the enforcer's.
func TestCaddyForwardAuthAnswersAnUnreachableEnforcerInJSON(t *testing.T) {
	caddy := testio.LookTool(t, "caddy", "apt-get install caddy")
	upstream := httptest.NewServer(http.HandlerFunc(testio.ProviderOwnErrors))
	defer upstream.Close()
	post := func(t *testing.T, url, key, origin string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", url, strings.NewReader(`{"model":"gpt-4o-mini","messages":[]}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Api-Key", key)
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}

	t.Run("enforcer unreachable", func(t *testing.T) {
		caddyAddr, caddyLog := startCaddyForwardAuth(t, caddy, testio.FreeAddr(t), strings.TrimPrefix(upstream.URL, "http://"), nil)
		for _, origin := range []string{"", "https://console.example"} {
			res, body := post(t, "http://"+caddyAddr+"/v1/chat/completions", "tgk_whatever", origin)
			if res.StatusCode != http.StatusServiceUnavailable || body != string(gate.BodyEnforcerUnavailable) ||
				res.Header.Get("Content-Type") != "application/json" || res.Header.Get("Cache-Control") != "no-store" ||
				res.Header.Get("X-Service-Error-Code") != gate.CodeEnforcerUnavailable {
				t.Fatalf("an unreachable enforcer through Caddy (Origin %q): %d %v %s\n%s", origin, res.StatusCode, res.Header, body, caddyLog)
			}
			if origin != "" && res.Header.Get("Access-Control-Allow-Origin") != "*" {
				t.Fatalf("a browser app cannot read the 503: %v", res.Header)
			}
		}
	})

	t.Run("the provider's answers", func(t *testing.T) {
		e := enforcertest.New(t, enforcertest.Options{})
		e.CP.SetPrice("gpt-4o-mini", 2_000, 8_000)
		w := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
		caddyAddr, caddyLog := startCaddyForwardAuth(t, caddy, strings.TrimPrefix(e.HTTPURL, "http://"), strings.TrimPrefix(upstream.URL, "http://"), nil)
		res, body := post(t, "http://"+caddyAddr+"/v1/502", w.Key, "")
		if res.StatusCode != http.StatusBadGateway || body != "<html>the provider's own 502</html>" || res.Header.Get("Content-Type") != "text/html" ||
			res.Header.Get("X-Service-Error-Code") != "" {
			t.Fatalf("the provider's 502 through Caddy: %d %v %s\n%s", res.StatusCode, res.Header, body, caddyLog)
		}
		res, body = post(t, "http://"+caddyAddr+"/v1/503", w.Key, "")
		if res.StatusCode != http.StatusServiceUnavailable || body != `{"error":{"type":"overloaded_error","message":"the provider's own 503"}}` ||
			res.Header.Get("Retry-After") != "7" || res.Header.Get("X-Service-Error-Code") != "" {
			t.Fatalf("the provider's 503 through Caddy: %d %v %s\n%s", res.StatusCode, res.Header, body, caddyLog)
		}

		// The provider unreachable: Caddy's own 502, not the enforcer's 503.
		caddyAddr, caddyLog = startCaddyForwardAuth(t, caddy, strings.TrimPrefix(e.HTTPURL, "http://"), testio.FreeAddr(t), nil)
		res, body = post(t, "http://"+caddyAddr+"/v1/chat/completions", w.Key, "")
		if res.StatusCode != http.StatusBadGateway || res.Header.Get("X-Service-Error-Code") != "" {
			t.Fatalf("an unreachable provider through Caddy: %d %v %s\n%s", res.StatusCode, res.Header, body, caddyLog)
		}
	})
}

// TestCaddyForwardAuthCopiesOnlyTheHeadersCheckSent: /check admits an unidentified request
// in fail-open mode without a request id (gate.go, an "unidentified" fail-open admission),
// and may admit without a usage state. Caddy 2.6's copy_headers then set the upstream's
// header to the placeholder's own text, "{http.reverse_proxy.header.X-Service-Request-Id}",
// which a reporter sent to /settle as an unknown request id. The upstream sees no header
// /check did not send (nor the client's own), and the ones it sent as they were.
func TestCaddyForwardAuthCopiesOnlyTheHeadersCheckSent(t *testing.T) {
	caddy := testio.LookTool(t, "caddy", "apt-get install caddy")
	check := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Test-Admit-With") == "id" {
			rw.Header().Set("X-Service-Request-Id", "req_01jd6xk0gbf7fv2t9m0yhx3w1e")
		}
		if r.Header.Get("X-Test-Admit-With") != "" {
			rw.Header().Set("X-Service-Usage-State", "unknown")
		}
		rw.WriteHeader(200)
	}))
	defer check.Close()
	upstream := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(rw).Encode(map[string][]string{
			"id": r.Header.Values("X-Service-Request-Id"), "state": r.Header.Values("X-Service-Usage-State")})
	}))
	defer upstream.Close()
	caddyAddr, caddyLog := startCaddyForwardAuth(t, caddy, strings.TrimPrefix(check.URL, "http://"), strings.TrimPrefix(upstream.URL, "http://"), nil)

	for _, tc := range []struct {
		admitWith      string
		wantID         []string
		wantState      []string
		wantStateToClt string
	}{
		{admitWith: "", wantID: nil, wantState: nil},
		{admitWith: "state", wantID: nil, wantState: []string{"unknown"}, wantStateToClt: "unknown"},
		{admitWith: "id", wantID: []string{"req_01jd6xk0gbf7fv2t9m0yhx3w1e"}, wantState: []string{"unknown"}, wantStateToClt: "unknown"},
	} {
		req, _ := http.NewRequest("POST", "http://"+caddyAddr+"/v1/chat/completions", strings.NewReader(`{"model":"gpt-4o-mini","messages":[]}`))
		req.Header.Set("X-Api-Key", "tgk_anything")
		req.Header.Set("X-Service-Request-Id", "req_chosenbytheclient")
		req.Header.Set("X-Service-Usage-State", "within_limit") // the client's, never the upstream's
		if tc.admitWith != "" {
			req.Header.Set("X-Test-Admit-With", tc.admitWith)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var seen struct{ ID, State []string }
		err = json.NewDecoder(res.Body).Decode(&seen)
		res.Body.Close()
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("admitted with %q: %d %v\n%s", tc.admitWith, res.StatusCode, err, caddyLog)
		}
		if fmt.Sprint(seen.ID) != fmt.Sprint(tc.wantID) || fmt.Sprint(seen.State) != fmt.Sprint(tc.wantState) {
			t.Errorf("admitted with %q: the upstream saw X-Service-Request-Id %q, X-Service-Usage-State %q; want %q, %q",
				tc.admitWith, seen.ID, seen.State, tc.wantID, tc.wantState)
		}
		if got := res.Header.Values("X-Service-Usage-State"); fmt.Sprint(got) != fmt.Sprint(strings.Fields(tc.wantStateToClt)) {
			t.Errorf("admitted with %q: the client got X-Service-Usage-State %q, want %q", tc.admitWith, got, tc.wantStateToClt)
		}
	}
}
