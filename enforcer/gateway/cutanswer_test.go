package gateway_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/enforcer/gateway"
)

// An answer the upstream breaks off (its connection dropped, its HTTP/2 stream reset, or
// silent past the idle timeout) reaches the client broken off too: over HTTP/1.1 its
// connection is closed without the chunked terminator, over HTTP/2 its stream is reset,
// and the client's read fails. Before, a stream of unknown length was ended as if whole
// (the terminator written when the handler returned), so an SDK took a cut stream for
// the complete answer (no error, no retry) while the request was settled incomplete.
// An answer whose length was announced was already seen cut over HTTP/1.1 (net/http
// closes a connection whose body is short), which the test keeps.
func TestAnswerCutUpstreamIsCutForTheClient(t *testing.T) {
	const event = "data: {\"choices\":[{\"delta\":{\"content\":\"some words here\"}}]}\n\n"
	cuts := map[string]http.HandlerFunc{
		"dropped": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, event)
			w.(http.Flusher).Flush()
			c, _, _ := http.NewResponseController(w).Hijack()
			_ = c.Close()
		},
		"dropped, announced length": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", "1000")
			_, _ = io.WriteString(w, `{"choices":[{"message":{"content":"some words`)
			w.(http.Flusher).Flush()
			c, _, _ := http.NewResponseController(w).Hijack()
			_ = c.Close()
		},
		"silent": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, event)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		},
	}
	for _, proto := range []string{"HTTP/1.1", "h2c"} {
		for name, cut := range cuts {
			t.Run(proto+", "+name, func(t *testing.T) {
				up := httptest.NewServer(cut)
				defer up.Close()
				e := newEnv(t, up.URL, gateway.Config{IdleTimeout: 150 * time.Millisecond})
				client := http.DefaultClient
				if proto == "h2c" {
					front := httptest.NewUnstartedServer(e.gw)
					front.Config.Protocols = new(http.Protocols)
					front.Config.Protocols.SetUnencryptedHTTP2(true)
					front.Start()
					defer front.Close()
					e.front = front
					tr := &http.Transport{Protocols: new(http.Protocols)}
					tr.Protocols.SetUnencryptedHTTP2(true)
					defer tr.CloseIdleConnections()
					client = &http.Client{Transport: tr}
				}
				req, _ := http.NewRequest("POST", e.front.URL+"/v1/chat/completions", strings.NewReader(chatBody))
				req.Header.Set("Authorization", "Bearer tgk_good")
				res, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				got, err := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != 200 || !strings.Contains(string(got), "some words") {
					t.Fatalf("%d %q: want the part the upstream sent", res.StatusCode, got)
				}
				if err == nil {
					t.Fatalf("the client read %q and a clean end: the cut was hidden", got)
				}
				if u := e.tracker.settled(t); u.Complete {
					t.Fatalf("settled %+v: want incomplete", u)
				}
			})
		}
	}
}
