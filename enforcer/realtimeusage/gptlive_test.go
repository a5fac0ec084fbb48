package realtimeusage

import (
	"testing"
	"time"
)

// A GPT-Live session's time is charged from the server's cumulative reports, in steps of
// at least GPTLiveStep, the rest at session.closed; a smaller or broken report changes
// nothing; a response.event hands back the Responses event it wraps; the model is the
// server's (the client's session.start before it named one).
func TestGPTLive(t *testing.T) {
	at := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	l := NewGPTLive(func() time.Time { return at })
	if m := SessionStart([]byte(`{"type":"session.start","session":{"model":"gpt-live-1","voice":"marin"}}`)); m != "gpt-live-1" {
		t.Fatalf("session.start named %q", m)
	}
	if m := SessionStart([]byte(`{"type":"session.update","session":{"model":"gpt-live-1"}}`)); m != "" {
		t.Fatalf("another event named %q", m)
	}
	l.SetModel("gpt-live-1")
	steps := []struct {
		event  string
		millis int64
	}{
		{`{"type":"session.started","event_id":"e1","session":{"id":"live_1","model":"gpt-live-1-2026-11-01"}}`, 0},
		{`{"type":"session.usage.updated","event_id":"e2","usage":{"seconds":4.2}}`, 0},         // under a step
		{`{"type":"session.usage.updated","event_id":"e3","usage":{"seconds":10.0005}}`, 10001}, // a started millisecond counts
		{`{"type":"session.usage.updated","event_id":"e4","usage":{"seconds":3}}`, 0},           // smaller: a total never shrinks
		{`{"type":"session.usage.updated","event_id":"e5","usage":{"seconds":-1}}`, 0},
		{`{"type":"session.usage.updated","event_id":"e6","usage":{"seconds":"12"}}`, 0}, // not a number: not an event's shape
		{`{"type":"session.usage.updated","event_id":"e7","usage":{"seconds":21}}`, 10999},
		{`{"type":"output_audio.delta","event_id":"e8","delta":"UklGR"}`, 0},
	}
	for _, s := range steps {
		if ms, est, nested := l.Event([]byte(s.event)); ms != s.millis || est || nested != nil {
			t.Fatalf("%s: %d ms (nested %s), want %d", s.event, ms, nested, s.millis)
		}
	}
	if l.Model() != "gpt-live-1-2026-11-01" {
		t.Fatalf("model %q, want the server's", l.Model())
	}
	_, _, nested := l.Event([]byte(`{"type":"response.event","event_id":"e9","delegation_id":"dl_1","event":{"type":"response.completed","response":{"id":"resp_1","model":"gpt-5.5","usage":{"input_tokens":10,"output_tokens":2}}}}`))
	if string(nested) != `{"type":"response.completed","response":{"id":"resp_1","model":"gpt-5.5","usage":{"input_tokens":10,"output_tokens":2}}}` {
		t.Fatalf("response.event wrapped %s", nested)
	}

	// Cut now, 4 seconds after the last report: what its reports said, no more.
	if ms, est := l.Unreported(); ms != 0 || est {
		t.Fatalf("just after a report: %d ms (estimated %v)", ms, est)
	}
	at = at.Add(4 * time.Second)
	l.Event([]byte(`{"type":"session.usage.updated","usage":{"seconds":25}}`)) // under a step again
	at = at.Add(1500 * time.Millisecond)
	if ms, est := l.Unreported(); ms != 4000+1500 || !est {
		t.Fatalf("cut 1.5 s after its last report: %d ms (estimated %v), want the 4 s reported and the 1.5 s since", ms, est)
	}
	if ms, _, _ := l.Event([]byte(`{"type":"session.closed","reason":"close_requested","session":{"model":"gpt-live-1-2026-11-01"},"usage":{"seconds":26.5}}`)); ms != 5500 {
		t.Fatalf("session.closed charged %d ms, want the 5.5 s left", ms)
	}
	at = at.Add(time.Minute)
	if ms, est := l.Unreported(); ms != 0 || est {
		t.Fatalf("after session.closed: %d ms (estimated %v)", ms, est)
	}
}

// A server that stops reporting has the session's clock time charged once it was silent
// for GPTLiveSilence, at its next event, an estimate; its later reports charge only what
// goes beyond the time so charged.
func TestGPTLiveSilentServer(t *testing.T) {
	at := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	l := NewGPTLive(func() time.Time { return at })
	delta := []byte(`{"type":"output_audio.delta","event_id":"e1","delta":"UklGR"}`)
	at = at.Add(GPTLiveSilence - time.Second)
	if ms, est, _ := l.Event(delta); ms != 0 || est {
		t.Fatalf("before the silence: %d ms (estimated %v)", ms, est)
	}
	at = at.Add(2 * time.Second)
	if ms, est, _ := l.Event(delta); ms != 61_000 || !est {
		t.Fatalf("after a minute of silence: %d ms (estimated %v), want the 61 s since the start, estimated", ms, est)
	}
	if ms, _, _ := l.Event(delta); ms != 0 {
		t.Fatalf("right after: %d ms", ms)
	}
	// The server reports 65 s: 4 s beyond the estimate, under a step.
	if ms, _, _ := l.Event([]byte(`{"type":"session.usage.updated","usage":{"seconds":65}}`)); ms != 0 {
		t.Fatalf("a report under the estimate plus a step: %d ms", ms)
	}
	if ms, _, _ := l.Event([]byte(`{"type":"session.usage.updated","usage":{"seconds":75}}`)); ms != 14_000 {
		t.Fatalf("a report 14 s beyond what was charged: %d ms", ms)
	}
	at = at.Add(3 * time.Second)
	if ms, est, _ := l.Event([]byte(`{"type":"session.closed","usage":{"seconds":76}}`)); ms != 1_000 || est {
		t.Fatalf("the close: %d ms (estimated %v), want the 1 s left, reported", ms, est)
	}
}
