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
		if ms, est, nested, _ := l.Event([]byte(s.event)); ms != s.millis || est || nested != nil {
			t.Fatalf("%s: %d ms (nested %s), want %d", s.event, ms, nested, s.millis)
		}
	}
	if l.Model() != "gpt-live-1-2026-11-01" {
		t.Fatalf("model %q, want the server's", l.Model())
	}
	_, _, nested, _ := l.Event([]byte(`{"type":"response.event","event_id":"e9","delegation_id":"dl_1","event":{"type":"response.completed","response":{"id":"resp_1","model":"gpt-5.5","usage":{"input_tokens":10,"output_tokens":2}}}}`))
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
	if ms, _, _, _ := l.Event([]byte(`{"type":"session.closed","reason":"close_requested","session":{"model":"gpt-live-1-2026-11-01"},"usage":{"seconds":26.5}}`)); ms != 5500 {
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
	if ms, est, _, _ := l.Event(delta); ms != 0 || est {
		t.Fatalf("before the silence: %d ms (estimated %v)", ms, est)
	}
	at = at.Add(2 * time.Second)
	if ms, est, _, _ := l.Event(delta); ms != 61_000 || !est {
		t.Fatalf("after a minute of silence: %d ms (estimated %v), want the 61 s since the start, estimated", ms, est)
	}
	if ms, _, _, _ := l.Event(delta); ms != 0 {
		t.Fatalf("right after: %d ms", ms)
	}
	// The server reports 65 s: 4 s beyond the estimate, under a step.
	if ms, _, _, _ := l.Event([]byte(`{"type":"session.usage.updated","usage":{"seconds":65}}`)); ms != 0 {
		t.Fatalf("a report under the estimate plus a step: %d ms", ms)
	}
	if ms, _, _, _ := l.Event([]byte(`{"type":"session.usage.updated","usage":{"seconds":75}}`)); ms != 14_000 {
		t.Fatalf("a report 14 s beyond what was charged: %d ms", ms)
	}
	at = at.Add(3 * time.Second)
	if ms, est, _, _ := l.Event([]byte(`{"type":"session.closed","usage":{"seconds":76}}`)); ms != 1_000 || est {
		t.Fatalf("the close: %d ms (estimated %v), want the 1 s left, reported", ms, est)
	}
}

// A decision.event (a Decision API evaluation the session ran: the client's
// decision.create, a delegation, a transcript trigger) hands back the native Decision it
// carries, whose model and usage are billed by their tokens; anything else wrapped the
// same way hands back nothing.
func TestGPTLiveHandsOverEachDecision(t *testing.T) {
	decision := `{"model":"gpt-5.5","answers":[{"type":"predicate","name":"angry","probability":0.1}],` +
		`"usage":{"input_tokens":200000,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":0},"output_tokens":5000,"output_tokens_details":{"reasoning_tokens":4000},"total_tokens":205000}}`
	cases := []struct {
		name, event, want string
	}{
		{"a decision", `{"type":"decision.event","event_id":"ev_d","delegation_id":null,"trigger_id":null,"event":{"type":"decision.completed","decision":` + decision + `}}`, decision},
		{"a trigger's decision", `{"type":"decision.event","event_id":"ev_t","delegation_id":null,"trigger_id":"tr_1","source_event_id":"ev_9","source_event_type":"session.input_transcript.delta","event":{"type":"decision.completed","decision":` + decision + `}}`, decision},
		{"another event wrapped", `{"type":"decision.event","event":{"type":"decision.failed","decision":` + decision + `}}`, ""},
		{"no decision", `{"type":"decision.event","event":{"type":"decision.completed","decision":null}}`, ""},
		{"a decision outside decision.event", `{"type":"response.event","decision":` + decision + `}`, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := NewGPTLive(time.Now)
			ms, _, nested, got := l.Event([]byte(c.event))
			if string(got) != c.want || ms != 0 || (c.name != "a decision outside decision.event" && nested != nil) {
				t.Fatalf("decision %s, nested %s, %d ms; want decision %s", got, nested, ms, c.want)
			}
		})
	}
}
