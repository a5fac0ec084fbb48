package demo

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/tollgate-dev/tollgate/enforcer/gate"
	"github.com/tollgate-dev/tollgate/internal/testio"
)

// The built-in proxy swaps credentials as the Caddyfile does: the member's Tollgate key
// reaches /check and never the upstream; the provider's, when configured, replaces it.
func TestProxySwapsCredentials(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		px                    Proxy
		client                map[string]string
		authorization, apiKey string
	}{
		{name: "x-api-key, nothing configured", client: map[string]string{"X-Api-Key": "tgk_k"}},
		{name: "a tollgate bearer, provider Authorization", client: map[string]string{"Authorization": "Bearer tgk_k"},
			px: Proxy{UpstreamAuthorization: "Bearer sk-provider"}, authorization: "Bearer sk-provider"},
		{name: "a session bearer, provider x-api-key", client: map[string]string{"Authorization": "Bearer tgs_s", "X-Api-Key": "tgk_k"},
			px: Proxy{UpstreamAPIKey: "sk-ant"}, apiKey: "sk-ant"},
		{name: "another Authorization is left alone", client: map[string]string{"Authorization": "Bearer sk-theirs", "X-Api-Key": "tgk_k"},
			authorization: "Bearer sk-theirs"},
		{name: "x-goog-api-key (Google's Gen AI SDK)", client: map[string]string{"X-Goog-Api-Key": "tgk_k"}},
		{name: "api-key (Azure OpenAI clients), provider Authorization", client: map[string]string{"Api-Key": "tgk_k"},
			px: Proxy{UpstreamAuthorization: "Bearer sk-provider"}, authorization: "Bearer sk-provider"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			enf := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for k, v := range tc.client {
					if r.Header.Get(k) != v {
						t.Errorf("/check did not get the client's credentials: %v", r.Header)
					}
				}
				w.Header().Set("X-Service-Request-Id", "req_1")
			}))
			defer enf.Close()
			var got http.Header
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = r.Header.Clone() }))
			defer up.Close()
			px := tc.px
			px.CheckURL, px.Client = enf.URL+"/check", http.DefaultClient
			px.Upstream, _ = url.Parse(up.URL)
			srv := httptest.NewServer(&px)
			defer srv.Close()
			req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions", nil)
			for k, v := range tc.client {
				req.Header.Set(k, v)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if got == nil || got.Get("X-Service-Request-Id") != "req_1" {
				t.Fatalf("upstream got %v", got)
			}
			if got.Get("Authorization") != tc.authorization || got.Get("X-Api-Key") != tc.apiKey {
				t.Fatalf("upstream got Authorization %q, X-Api-Key %q", got.Get("Authorization"), got.Get("X-Api-Key"))
			}
			for k, vs := range got {
				for _, v := range vs {
					if strings.Contains(v, "tgk_") || strings.Contains(v, "tgs_") {
						t.Fatalf("the member's credential reached the upstream in %s", k)
					}
				}
			}
		})
	}
}

// A proxy drops the headers its client names in Connection, and httputil.ReverseProxy
// drops them after the proxy set its own: "Connection: X-Service-Request-Id" took the
// request id away from the upstream (nobody could report the request's usage), and
// "Connection: Authorization" the provider's credential. The client's Connection header
// is dropped first, as the Caddyfile drops it; /check still gets X-Forwarded-Uri.
func TestProxyKeepsItsHeadersWhateverConnectionSays(t *testing.T) {
	var forwardedURI string
	enf := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		forwardedURI = r.Header.Get("X-Forwarded-Uri")
		w.Header().Set("X-Service-Request-Id", "req_1")
	}))
	defer enf.Close()
	var got http.Header
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = r.Header.Clone() }))
	defer up.Close()
	px := Proxy{CheckURL: enf.URL + "/check", Client: http.DefaultClient, UpstreamAuthorization: "Bearer sk-provider"}
	px.Upstream, _ = url.Parse(up.URL)
	srv := httptest.NewServer(&px)
	defer srv.Close()
	req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions?alt=sse", nil)
	req.Header.Set("X-Api-Key", "tgk_k")
	req.Header.Set("Connection", "X-Service-Request-Id, Authorization, X-Forwarded-Uri")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if got == nil || got.Get("X-Service-Request-Id") != "req_1" || got.Get("Authorization") != "Bearer sk-provider" {
		t.Fatalf("upstream got %v", got)
	}
	if forwardedURI != "/v1/chat/completions?alt=sse" {
		t.Fatalf("/check got X-Forwarded-Uri %q", forwardedURI)
	}
}

// A browser app calls through the proxy as through the Caddyfile: the preflight (no key)
// is answered here, never checked nor sent upstream; the refusal and the answer carry
// Access-Control-Allow-Origin: *, the upstream's own CORS policy replaced.
func TestProxyLetsBrowserAppsCall(t *testing.T) {
	var checks, calls int
	enf := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		checks++
		if r.Header.Get("X-Api-Key") != "tgk_k" {
			w.Header().Set("X-Service-Error-Code", "unauthorized")
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.Header().Set("X-Service-Request-Id", "req_1")
	}))
	defer enf.Close()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		w.Header().Set("Access-Control-Allow-Origin", "https://console.example")
		w.Header().Set("Access-Control-Allow-Credentials", "true")
	}))
	defer up.Close()
	px := Proxy{CheckURL: enf.URL + "/check", Client: http.DefaultClient}
	px.Upstream, _ = url.Parse(up.URL)
	srv := httptest.NewServer(&px)
	defer srv.Close()
	do := func(method, key string, hdr ...string) *http.Response {
		req, _ := http.NewRequest(method, srv.URL+"/v1/chat/completions", nil)
		req.Header.Set("Origin", "http://app.example")
		if key != "" {
			req.Header.Set("X-Api-Key", key)
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res
	}
	res := do("OPTIONS", "", "Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "x-api-key,content-type")
	if res.StatusCode != 204 || res.Header.Get("Access-Control-Allow-Origin") != "*" || res.Header.Get("Access-Control-Allow-Headers") != "x-api-key,content-type" ||
		checks != 0 || calls != 0 {
		t.Fatalf("preflight: %d %v, %d checks, %d upstream calls", res.StatusCode, res.Header, checks, calls)
	}
	if res := do("POST", "tgk_bad"); res.StatusCode != 401 || res.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Fatalf("refusal: %d %v", res.StatusCode, res.Header)
	}
	res = do("POST", "tgk_k")
	if res.StatusCode != 200 || res.Header.Values("Access-Control-Allow-Origin")[0] != "*" || len(res.Header.Values("Access-Control-Allow-Origin")) != 1 ||
		res.Header.Get("Access-Control-Allow-Credentials") != "" || calls != 1 {
		t.Fatalf("answer: %d %v, %d upstream calls", res.StatusCode, res.Header, calls)
	}
}

// Only a WebSocket's upgrade goes upstream, as through the Caddyfile: a client's
// "Upgrade: h2c", which an upstream such as Hypercorn accepts with a 101, made the
// reverse proxy tunnel the connection, and every request the client then sent over it
// as an HTTP/2 stream reached the upstream unchecked. The WebSocket still goes through.
func TestProxyTunnelsOnlyWebSockets(t *testing.T) {
	checks := 0
	enf := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		checks++
		w.Header().Set("X-Service-Request-Id", "req_"+strconv.Itoa(checks))
	}))
	defer enf.Close()
	up := testio.NewUpgradingUpstream(t)
	px := Proxy{CheckURL: enf.URL + "/check", Client: http.DefaultClient}
	px.Upstream, _ = url.Parse("http://" + up.Addr)
	srv := httptest.NewServer(&px)
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	for _, upgrade := range []string{"h2c", "websocket, h2c", "h2c\r\nUpgrade: websocket"} {
		served := testio.H2CThrough(t, addr, "tgk_k", upgrade, 3)
		if got := up.Calls(); served != 0 || len(got) != 1 || got[0] != "req_"+strconv.Itoa(checks) {
			t.Fatalf("Upgrade: %q: %d requests served over a tunnel; the upstream saw request ids %q (%d checked)", upgrade, served, got, checks)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws://"+addr+"/v1/realtime", &websocket.DialOptions{HTTPHeader: http.Header{"X-Api-Key": {"tgk_k"}}})
	if err != nil {
		t.Fatalf("a WebSocket through the proxy: %v", err)
	}
	defer c.CloseNow()
	if err := c.Write(ctx, websocket.MessageText, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if _, msg, err := c.Read(ctx); err != nil || string(msg) != "hello" {
		t.Fatalf("echo %q, %v", msg, err)
	}
}

// With the enforcer unreachable, the demo proxy answers as deploy/envoy's Envoy does:
// 503, JSON, the enforcer's error object and X-Service-Error-Code, so that an SDK shows
// why (it answered text/plain without the header before).
func TestProxyAnswersAnUnreachableEnforcerInJSON(t *testing.T) {
	enf := httptest.NewServer(http.NotFoundHandler())
	enf.Close() // nothing listens there now
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { t.Error("the upstream was called") }))
	defer up.Close()
	px := Proxy{CheckURL: enf.URL + "/check", Client: http.DefaultClient}
	px.Upstream, _ = url.Parse(up.URL)
	srv := httptest.NewServer(&px)
	defer srv.Close()
	res, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Content-Type") != "application/json" ||
		res.Header.Get("X-Service-Error-Code") != gate.CodeEnforcerUnavailable || string(body) != string(gate.BodyEnforcerUnavailable) {
		t.Fatalf("%d %v\n%s", res.StatusCode, res.Header, body)
	}
}

// The built-in proxy copies only the headers /check sent, as the Caddyfile does: /check
// admits an unidentified request in fail-open mode without a request id, and may admit
// without a usage state; the client's own X-Service-Request-Id and X-Service-Usage-State
// never reach the upstream.
func TestProxyCopiesOnlyTheHeadersCheckSent(t *testing.T) {
	for _, sent := range []map[string]string{
		{},
		{"X-Service-Usage-State": "unknown"},
		{"X-Service-Request-Id": "req_1", "X-Service-Usage-State": "within_limit"},
	} {
		enf := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			for k, v := range sent {
				w.Header().Set(k, v)
			}
		}))
		var got http.Header
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = r.Header.Clone() }))
		px := Proxy{CheckURL: enf.URL + "/check", Client: http.DefaultClient}
		px.Upstream, _ = url.Parse(up.URL)
		srv := httptest.NewServer(&px)
		req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions", nil)
		req.Header.Set("X-Api-Key", "tgk_k")
		req.Header.Set("X-Service-Request-Id", "req_chosenbytheclient")
		req.Header.Set("X-Service-Usage-State", "within_limit")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		srv.Close()
		up.Close()
		enf.Close()
		for _, h := range []string{"X-Service-Request-Id", "X-Service-Usage-State"} {
			if g, w := strings.Join(got.Values(h), ","), sent[h]; g != w {
				t.Errorf("/check sent %v: the upstream saw %s %q, want %q", sent, h, g, w)
			}
		}
		if g, w := res.Header.Get("X-Service-Usage-State"), sent["X-Service-Usage-State"]; g != w {
			t.Errorf("/check sent %v: the client got X-Service-Usage-State %q, want %q", sent, g, w)
		}
	}
}
