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

// A client that announces a body and never sends it is answered 408
// service_gateway_body_timeout after BodyTimeout and gives its slot back, over HTTP/1.1
// and over HTTP/2 (h2c: one stream of a connection that stays open), whether its type
// is JSON's or an upload's (whose first bytes are peeked at). Before 2026-12-02 the
// read had no deadline and the slot was held for as long as the client stayed.
func TestStalledBodyIsAnswered408(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"model":"gpt-4o-mini","usage":{"prompt_tokens":1,"completion_tokens":1}}`)
	}))
	t.Cleanup(up.Close)
	for _, tc := range []struct {
		name        string
		h2c         bool
		contentType string
	}{
		{"HTTP/1.1, JSON", false, "application/json"},
		{"HTTP/1.1, an upload", false, "application/octet-stream"},
		{"h2c, JSON", true, "application/json"},
		{"h2c, an upload", true, "audio/mpeg"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, up.URL, gateway.Config{BodyTimeout: 300 * time.Millisecond, MaxStreams: 1})
			client := http.DefaultClient
			if tc.h2c {
				e.front.Config.Protocols = new(http.Protocols)
				e.front.Config.Protocols.SetHTTP1(true)
				e.front.Config.Protocols.SetUnencryptedHTTP2(true)
				tr := &http.Transport{Protocols: new(http.Protocols)}
				tr.Protocols.SetUnencryptedHTTP2(true)
				t.Cleanup(tr.CloseIdleConnections)
				client = &http.Client{Transport: tr}
			}
			stall, _ := io.Pipe() // a body that never comes
			t.Cleanup(func() { stall.Close() })
			r, _ := http.NewRequest("POST", e.front.URL+"/v1/chat/completions", stall)
			r.ContentLength = 1000
			r.Header.Set("Content-Type", tc.contentType)
			start := time.Now()
			res, err := client.Do(r)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusRequestTimeout || res.Header.Get("X-Service-Error-Code") != "service_gateway_body_timeout" ||
				!strings.Contains(string(b), `"code":"service_gateway_body_timeout"`) || time.Since(start) > 5*time.Second {
				t.Fatalf("%d %q after %v: %s", res.StatusCode, res.Header.Get("X-Service-Error-Code"), time.Since(start), b)
			}
			if got := post(t, e.front.URL+"/v1/chat/completions", "tgk_good", `{"model":"gpt-4o-mini","messages":[]}`); got.StatusCode != http.StatusOK {
				got.Body.Close()
				t.Fatalf("the next request got %d, want 200: the slot is still held", got.StatusCode)
			} else {
				got.Body.Close()
			}
		})
	}
}
