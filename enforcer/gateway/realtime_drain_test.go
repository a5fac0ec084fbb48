package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/tollgate-dev/tollgate/enforcer/gateway"
)

// A session whose client stopped reading in the middle of a response (its socket's
// buffers full, the gateway's write to it blocked) is ended by a shutdown all the same:
// its request settled, as a cut response, before DrainSessions returns. Before
// 2026-12-07 the write waited for the idle timeout (5 minutes by default), which the
// shutdown did not cut: DrainSessions gave the session up, and the tracker's SettleAll
// settled its request without what the response had shown.
func TestRealtimeShutdownCutsAWriteToAStuckClient(t *testing.T) {
	delta := `{"type":"response.output_text.delta","response_id":"resp_a","delta":"` + strings.Repeat("toll ", 10_000) + `"}`
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, send := fakeSession(w, r, websocket.MessageText)
		if c == nil {
			return
		}
		defer c.CloseNow()
		_ = send(`{"type":"session.created","session":{"model":"gpt-realtime-2025-08-28"}}`)
		if _, _, err := c.Read(r.Context()); err != nil {
			return
		}
		_ = send(`{"type":"response.created","response":{"id":"resp_a","status":"in_progress"}}`)
		for send(delta) == nil { // a long answer, faster than the client reads it
		}
	})
	_, tr, url, gw := newRealtimeEnv(t, up, 10, func(c *gateway.Config) { c.IdleTimeout = 20 * time.Second })
	c, _ := openSession(t, url)
	defer c.CloseNow()
	c.SetReadLimit(1 << 20)
	say(t, c, `{"type":"response.create"}`)
	readUntil(t, c, "output_text.delta")
	// The client reads no more: the gateway's writes fill its buffers and block.
	time.Sleep(500 * time.Millisecond)
	grace, stop := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer stop()
	began := time.Now()
	gw.DrainSessions(grace)
	took := time.Since(began)
	tr.mu.Lock()
	settled := append(tr.finished[:0:0], tr.finished...)
	tr.mu.Unlock()
	if len(settled) != 1 || settled[0].Complete || settled[0].Seen == nil || settled[0].Seen.TextBytes == 0 {
		t.Fatalf("DrainSessions returned after %v with %+v settled, want the cut response, estimated from its text", took, settled)
	}
}
