package gateway_test

import (
	"encoding/base64"
	"net/http"
	"strings"
	"testing"

	"github.com/coder/websocket"
)

// A Realtime response cut before its response.done (the client left, the grace passed)
// is estimated from its text and its audio both (package realtimeusage, since
// 2026-12-06): a second of the default output (PCM16 at 24 kHz) is 20 tokens, 80 bytes
// of text as the estimate counts them, besides the transcript's text. docs/gateway.md's
// Realtime section said until 2026-12-07 that its audio was not counted.
func TestRealtimeCutResponseCountsItsAudio(t *testing.T) {
	second := base64.StdEncoding.EncodeToString(make([]byte, 48_000))
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
		_ = send(`{"type":"response.output_audio_transcript.delta","response_id":"resp_a","delta":"Tolls."}`)
		_ = send(`{"type":"response.output_audio.delta","response_id":"resp_a","delta":"` + second + `"}`)
		for {
			if _, _, err := c.Read(r.Context()); err != nil { // the response never ends
				return
			}
		}
	})
	_, tr, url, _ := newRealtimeEnv(t, up, 10)
	c, _ := openSession(t, url)
	c.SetReadLimit(1 << 20)
	say(t, c, `{"type":"response.create"}`)
	readUntil(t, c, "output_audio.delta")
	_ = c.CloseNow()
	cut := tr.settlements(t, 1)[0]
	if cut.Complete || cut.Seen == nil || cut.Seen.TextBytes != int64(len("Tolls."))+80 {
		t.Fatalf("the cut response was settled %+v (seen %+v), want its transcript and a second of audio (80 bytes)", cut, cut.Seen)
	}
	if !strings.HasPrefix(cut.Model, "gpt-realtime") {
		t.Fatalf("priced at %q", cut.Model)
	}
}
