package gateway_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/gateway"
	"github.com/tollgate-dev/tollgate/internal/testio"
)

// A browser app calls the gateway from its own origin, as it calls a provider that
// allows it (the OpenAI SDK's dangerouslyAllowBrowser, Anthropic's
// anthropic-dangerous-direct-browser-access): its Authorization header makes the
// browser send a CORS preflight first, an OPTIONS without any credential. Here the real
// Chromium runs the page: the admitted call reads its answer and X-Service-Usage-State,
// the refused one its 429 and X-Service-Error-Code; the preflights are answered by the
// gateway, never checked, never sent upstream. The upstream answers with a CORS policy
// of its own for another origin (as a provider's console's), which the gateway's
// replaces. Before 2026-12-03 the preflight was answered 401 (no key), and both calls
// failed in the browser as "Failed to fetch", the 429 unreadable.
func TestBrowserAppThroughTheGateway(t *testing.T) {
	var mu sync.Mutex
	var methods []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		methods = append(methods, r.Method)
		mu.Unlock()
		w.Header().Set("Access-Control-Allow-Origin", "https://console.example")
		w.Header().Set("Access-Control-Allow-Credentials", "true")
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"model":"gpt-4o-mini","choices":[{"message":{"content":"hello"}}],"usage":{"prompt_tokens":5,"completion_tokens":1}}`)
	}))
	defer up.Close()
	e := newEnv(t, up.URL, gateway.Config{})
	got := testio.BrowserCalls(t, e.front.URL+"/v1/chat/completions", "tgk_good", "tgk_blocked")
	if want := "200 within_limit - answer|429 blocked service_gateway_usage_limit_exceeded refusal"; got != want {
		t.Fatalf("the browser app saw %q, want %q", got, want)
	}
	e.gate.mu.Lock()
	checked := len(e.gate.hints)
	e.gate.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	if checked != 2 || len(methods) != 1 || methods[0] != "POST" {
		t.Fatalf("%d checks, the upstream got %v: want the two calls checked, the admitted one alone sent, no preflight", checked, methods)
	}
}
