package responseusage

import (
	"strings"
	"testing"
)

// A Responses WebSocket session: each terminal event is its response's whole usage, read
// as an HTTP stream's terminal event; text deltas (not audio ones) count for a response
// that reports no usage (a failed one) or is cut; the model is the responses'.
func TestResponsesSession(t *testing.T) {
	s := NewResponsesSession()
	for _, m := range []string{
		`{"type":"response.created","response":{"id":"resp_1","model":"gpt-5-2025-08-07","status":"in_progress"}}`,
		`{"type":"response.output_text.delta","delta":"Tolls "}`,
		`{"type":"response.output_audio.delta","delta":"UklGRiQAAABXQVZF"}`,
		`{"type":"response.function_call_arguments.delta","delta":"{\"a\":1}"}`,
	} {
		want := OtherEvent
		if strings.Contains(m, "response.created") {
			want = ResponseCreated
		}
		if _, ev := s.Event([]byte(m)); ev != want {
			t.Fatalf("%s: event %d, want %d", m, ev, want)
		}
	}
	if text, open := s.Unfinished(); !open || text != int64(len("Tolls ")+len(`{"a":1}`)) || s.Model() != "gpt-5-2025-08-07" {
		t.Fatalf("in progress: %d bytes, open %v, model %q", text, open, s.Model())
	}
	u, ev := s.Event([]byte(`{"type":"response.completed","response":{"id":"resp_1","object":"response","model":"gpt-5-2025-08-07","status":"completed",` +
		`"output":[{"type":"web_search_call","id":"ws_1","status":"completed"}],"service_tier":"priority",` +
		`"usage":{"input_tokens":50,"input_tokens_details":{"cached_tokens":20},"output_tokens":9}}}`))
	if ev != ResponseEnded || !u.Complete || u.InputTokens != 50 || u.CachedInputTokens != 20 || u.OutputTokens != 9 || u.WebSearchRequests != 1 ||
		u.Model != "gpt-5-2025-08-07" || u.Tier == 0 {
		t.Fatalf("completed: %s (searches %d, tier %v)", show(u), u.WebSearchRequests, u.Tier)
	}
	if _, open := s.Unfinished(); open {
		t.Fatal("a response still open after its end")
	}
	s.Event([]byte(`{"type":"response.created","response":{"id":"resp_2","model":"gpt-5-2025-08-07"}}`))
	s.Event([]byte(`{"type":"response.output_text.delta","delta":"A long answer"}`))
	u, ev = s.Event([]byte(`{"type":"response.failed","response":{"id":"resp_2","status":"failed","error":{"code":"server_error"}}}`))
	if ev != ResponseEnded || u.OutputReported || u.TextBytes != int64(len("A long answer")) {
		t.Fatalf("failed without usage: %s", show(u))
	}
	// The server's refusal of a response.create it does not run.
	if _, ev := s.Event([]byte(`{"type":"error","status":400,"error":{"type":"invalid_request_error","code":"previous_response_not_found"}}`)); ev != ErrorEvent {
		t.Fatalf("an error event: %d", ev)
	}
}

// A terminal event sent as JSON with line breaks between its tokens (a server that
// indents its messages; JSON allows white space there, and the event decodes alike) is
// read whole: its usage was lost at its first line break, read as the end of an event
// stream's data line, and the response charged an estimate from its text.
func TestResponsesSessionEventWithLineBreaks(t *testing.T) {
	for _, nl := range []string{"\n", "\r\n", "\r"} {
		s := NewResponsesSession()
		s.Event([]byte(`{"type":"response.created","response":{"id":"resp_1","model":"gpt-5"}}`))
		msg := strings.Join([]string{`{`, `  "type": "response.completed",`, `  "response": {`, `    "id": "resp_1",`,
			`    "object": "response",`, `    "model": "gpt-5",`, `    "usage": {"input_tokens": 50, "output_tokens": 9}`, `  }`, `}`}, nl)
		u, ev := s.Event([]byte(msg))
		if ev != ResponseEnded || !u.Complete || u.InputTokens != 50 || u.OutputTokens != 9 || u.Model != "gpt-5" {
			t.Fatalf("line breaks %q: %s", nl, show(u))
		}
	}
}
