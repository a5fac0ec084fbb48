package e2e_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/e2e/envoyemu"
	"github.com/tollgate-dev/tollgate/internal/testio"
)

// TestBrowserAppThroughEnvoy: a browser app calls through deploy/envoy/envoy.yaml's
// filter chain as it calls the gateway (docs/gateway.md, "Browser apps (CORS)"), the real
// Chromium running the page. The preflight (an OPTIONS without any key) is answered by
// Envoy's CORS filter before ext_authz, which would refuse it 401; the admitted call
// reads its answer and X-Service-Usage-State, the refused one its 429 and
// X-Service-Error-Code. The upstream's own CORS policy (for another origin) is replaced.
// Before 2026-12-03 envoy.yaml had no CORS filter and both calls failed in the browser
// as "Failed to fetch".
func TestBrowserAppThroughEnvoy(t *testing.T) {
	t.Parallel()
	browserThroughEnvoy(t, func(s *stack, upstream string) string {
		_, front := s.deployedEnvoy(t, upstream)
		return front
	})
}

// TestBrowserAppThroughEnvoyGateway is TestBrowserAppThroughEnvoy with the Envoy
// configuration Envoy Gateway makes of deploy/envoy-gateway's policies (the
// SecurityPolicy's cors): its CORS filter answers the preflight by echoing the headers
// asked for (its translator writes allow_headers "*"). Before 2026-12-03 the policy had no
// cors and the calls failed the same way.
func TestBrowserAppThroughEnvoyGateway(t *testing.T) {
	t.Parallel()
	cfg, clusters := envoyGatewayTranslation(t)
	browserThroughEnvoy(t, func(s *stack, upstream string) string {
		proxy, err := envoyemu.New(envoyemu.Options{Config: cfg, Clusters: clusters(s.enfGRPC, upstream), Logf: t.Logf, TimeoutFloor: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		front := httptest.NewServer(proxy)
		t.Cleanup(func() { front.Close(); proxy.Close() })
		return front.URL
	})
}

// browserThroughEnvoy runs a page's two calls, one admitted and one refused, through the
// Envoy front envoyFront puts before the stack's enforcer and a fake upstream.
func browserThroughEnvoy(t *testing.T, envoyFront func(s *stack, upstream string) string) {
	var mu sync.Mutex
	var methods []string
	up := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		methods = append(methods, r.Method)
		mu.Unlock()
		rw.Header().Set("Access-Control-Allow-Origin", "https://console.example")
		rw.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(rw, `{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12}}`)
	}))
	t.Cleanup(up.Close)
	s := startStack(t, gatewayEnv(up.URL))
	admitted, spent := s.setUpOrg(t), s.setUpOrg(t)
	s.guardPolicy(t, spent, "0.000001", nil)
	front := envoyFront(s, up.URL)
	chat := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello"}]}`
	send := func(key string) int {
		res, _ := testio.Send(t, "POST", front+"/v1/chat/completions",
			map[string]string{"Authorization": "Bearer " + key, "Content-Type": "application/json"}, chat)
		return res.StatusCode
	}
	send(spent.key)
	waitFor(t, 15*time.Second, "the enforcer refusing", func() bool { return send(spent.key) == 429 })
	mu.Lock()
	before := len(methods)
	mu.Unlock()

	got := testio.BrowserCalls(t, front+"/v1/chat/completions", admitted.key, spent.key)
	if want := "200 within_limit - answer|429 blocked service_gateway_usage_limit_exceeded refusal"; got != want {
		t.Fatalf("the browser app saw %q, want %q", got, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if seen := methods[before:]; len(seen) != 1 || seen[0] != "POST" {
		t.Fatalf("the upstream got %v: want the admitted call alone, no preflight", seen)
	}
}
