package gateway_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/tollgate-dev/tollgate/enforcer/gateway"
	"github.com/tollgate-dev/tollgate/enforcer/responseusage"
)

// The provider's credential goes to the route's upstream and nowhere else. A plain
// request's redirect is passed to the client (docs/gateway.md, "Limits": "one to another
// host is followed by the client as the provider gave it"); a Realtime handshake's
// redirect must not be followed by the gateway with the route's api-key (Azure OpenAI) or
// x-goog-api-key (Gemini Live) to another host: Go's client drops only Authorization and
// cookies on such a redirect.
func TestRealtimeHandshakeRedirectKeepsTheProviderKeyHome(t *testing.T) {
	for _, header := range []string{"api-key", "x-goog-api-key", "x-api-key"} {
		t.Run(header, func(t *testing.T) {
			var mu sync.Mutex
			var leaked []string
			elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				for k, vs := range r.Header {
					for _, v := range vs {
						if strings.Contains(v, "provider-secret") {
							leaked = append(leaked, k+": "+v)
						}
					}
				}
				mu.Unlock()
				http.Error(w, "no", http.StatusNotFound)
			}))
			defer elsewhere.Close()
			other := strings.Replace(elsewhere.URL, "127.0.0.1", "localhost", 1)
			upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, other+r.URL.RequestURI(), http.StatusTemporaryRedirect)
			}))
			defer upstream.Close()
			rt, err := gateway.NewRoute("/", upstream.URL, header, "provider-secret")
			if err != nil {
				t.Fatal(err)
			}
			m, _ := newMetrics()
			gw, err := gateway.New(gateway.Config{Routes: []gateway.Route{rt}}, &countingGate{n: 10}, newTracker(), responseusage.Limits{}, m, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			front := httptest.NewServer(gw)
			defer front.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			h := http.Header{"Authorization": {"Bearer tgk_good"}}
			noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			c, res, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(front.URL, "http")+"/openai/realtime?api-version=2025-04-01-preview&deployment=gpt-realtime", &websocket.DialOptions{HTTPHeader: h, HTTPClient: noFollow})
			if err == nil {
				c.CloseNow()
			}
			mu.Lock()
			defer mu.Unlock()
			if len(leaked) > 0 {
				t.Fatalf("the gateway followed the upstream's redirect to %s with the provider's credential: %v", other, leaked)
			}
			// The client is given the redirect, as it came (another host: the provider's to give).
			if res == nil || res.StatusCode != http.StatusTemporaryRedirect || !strings.HasPrefix(res.Header.Get("Location"), other+"/openai/realtime") {
				t.Fatalf("the client got %v, want the upstream's 307 to %s", res, other)
			}
		})
	}
}
