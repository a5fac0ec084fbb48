package realtimeusage

import (
	"bytes"
	"math"
	"testing"
	"time"
)

// checkUsage holds a usage to what a settlement can charge: no negative count, the
// cached count within the input, the cached parts within it (as Usage documents; the
// other parts may exceed their counts as reported, which the pricing clamps).
func checkUsage(t *testing.T, msg []byte, u Usage) {
	t.Helper()
	part := func(name string, p *int64, whole int64) {
		if p != nil && (*p < 0 || *p > whole) {
			t.Fatalf("%s %d outside 0..%d after %q: %+v", name, *p, whole, msg, u)
		}
	}
	if u.InputTokens < 0 || u.OutputTokens < 0 || u.CachedInputTokens < 0 || u.AudioInputMillis < 0 || u.TextBytes < 0 {
		t.Fatalf("negative usage after %q: %+v", msg, u)
	}
	if u.CachedInputTokens > u.InputTokens {
		t.Fatalf("cached %d above input %d after %q", u.CachedInputTokens, u.InputTokens, msg)
	}
	part("audio input", u.AudioInputTokens, math.MaxInt64)
	part("audio output", u.AudioOutputTokens, math.MaxInt64)
	part("image input", u.ImageInputTokens, math.MaxInt64)
	part("cached audio", u.CachedAudioInputTokens, u.CachedInputTokens)
	part("cached image", u.CachedImageInputTokens, u.CachedInputTokens)
	if !u.Reported && (u.InputTokens != 0 || u.OutputTokens != 0) {
		t.Fatalf("unreported usage with counts after %q: %+v", msg, u)
	}
}

// FuzzSessions feeds one session's server messages (the input's lines) to each reader:
// every usage they report is one a settlement can charge (checkUsage), and what a turn
// in progress has shown (Unfinished) never shrinks as its messages arrive, until a
// usage ends it; GPT-Live's session time is never negative.
func FuzzSessions(f *testing.F) {
	for _, s := range []string{
		`{"type":"session.created","session":{"model":"gpt-realtime","audio":{"output":{"format":{"type":"audio/pcm","rate":16000}}}}}
{"type":"response.created","response":{"id":"r1"}}
{"type":"response.output_text.delta","response_id":"r1","delta":"hello"}
{"type":"response.output_audio.delta","response_id":"r1","delta":"AAAAAAAA"}
{"type":"response.done","response":{"id":"r1","usage":{"input_tokens":10,"output_tokens":5,"input_token_details":{"cached_tokens":4,"audio_tokens":3,"cached_tokens_details":{"audio_tokens":9}},"output_token_details":{"audio_tokens":2}}}}
{"type":"conversation.item.input_audio_transcription.completed","usage":{"type":"duration","seconds":1.2345}}`,
		`{"serverContent":{"modelTurn":{"parts":[{"text":"hi"},{"inlineData":{"mimeType":"audio/pcm;rate=24000","data":"AAAAAAAA"}}]}}}
{"usageMetadata":{"promptTokenCount":10,"responseTokenCount":3,"totalTokenCount":20,"promptTokensDetails":[{"modality":"AUDIO","tokenCount":40}],"cacheTokensDetails":[{"modality":"AUDIO","tokenCount":1}]}}`,
		`{"type":"session.started","session":{"model":"gpt-live"}}
{"type":"session.usage.updated","usage":{"seconds":12.5}}
{"type":"session.closed","usage":{"seconds":1e30}}`,
	} {
		f.Add([]byte(s), uint16(100))
	}
	f.Fuzz(func(t *testing.T, session []byte, tick uint16) {
		at := time.Unix(1_790_000_000, 0)
		r, g, l := New("gpt-realtime"), NewGeminiLive(), NewGPTLive(func() time.Time { return at })
		g.Setup([]byte(`{"setup":{"model":"models/gemini-live"}}`))
		var shown, gShown int64
		for msg := range bytes.SplitSeq(session, []byte("\n")) {
			at = at.Add(time.Duration(tick) * time.Second)
			u, kind := r.Event(msg)
			checkUsage(t, msg, u)
			open, _ := r.Unfinished()
			checkUsage(t, msg, open)
			if kind == None && open.TextBytes < shown && !bytes.Contains(msg, []byte("session")) {
				t.Fatalf("shown went from %d to %d after %q", shown, open.TextBytes, msg)
			}
			shown = open.TextBytes

			u, kind = g.Event(msg)
			checkUsage(t, msg, u)
			gOpen, _ := g.Unfinished()
			checkUsage(t, msg, gOpen)
			if kind == None && gOpen.TextBytes < gShown {
				t.Fatalf("Gemini turn shown went from %d to %d after %q", gShown, gOpen.TextBytes, msg)
			}
			gShown = gOpen.TextBytes

			if ms, _, _, _ := l.Event(msg); ms < 0 {
				t.Fatalf("GPT-Live charged %d ms after %q", ms, msg)
			}
			if ms, _ := l.Unreported(); ms < 0 {
				t.Fatalf("GPT-Live leaves %d ms after %q", ms, msg)
			}
		}
	})
}
