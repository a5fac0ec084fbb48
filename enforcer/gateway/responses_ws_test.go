package gateway_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/coder/websocket"

	"github.com/tollgate-dev/tollgate/enforcer/gate"
)

// responsesUpstream is a fake of the Responses API's WebSocket mode: each response.create
// the client sends is answered by one response's events (response.created, a text
// delta, response.completed with the whole response: a web search call among its output
// items, usage in+i input tokens of which 100 cached, out+i output tokens), as text
// frames, i counting the responses made. With hang, the second response never ends. A
// create whose input says "no_such_response" is refused with an "error" event, as the
// provider refuses a previous_response_id it does not know; one that says "silent" is
// never answered. It keeps every message it got.
type responsesUpstream struct {
	in, out int64
	hang    bool

	mu  sync.Mutex
	got []string
}

func (u *responsesUpstream) messages() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.got...)
}

func (u *responsesUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, send := fakeSession(w, r, websocket.MessageText)
	if c == nil {
		return
	}
	defer c.CloseNow()
	ctx := r.Context()
	for i := int64(0); ; {
		_, msg, err := c.Read(ctx)
		if err != nil {
			return
		}
		u.mu.Lock()
		u.got = append(u.got, string(msg))
		u.mu.Unlock()
		switch {
		case strings.Contains(string(msg), "no_such_response"):
			_ = send(`{"type":"error","status":400,"error":{"type":"invalid_request_error","code":"previous_response_not_found","message":"Previous response not found."}}`)
			continue
		case strings.Contains(string(msg), "silent"):
			continue
		}
		id := fmt.Sprintf("resp_%d", i)
		_ = send(`{"type":"response.created","sequence_number":0,"response":{"id":"` + id + `","object":"response","model":"gpt-5-2025-08-07","status":"in_progress","output":[]}}`)
		_ = send(`{"type":"response.output_text.delta","sequence_number":1,"item_id":"msg_1","output_index":1,"content_index":0,"delta":"Tolls are paid in tokens."}`)
		if u.hang && i == 1 {
			i++
			continue
		}
		_ = send(fmt.Sprintf(`{"type":"response.completed","sequence_number":2,"response":{"id":%q,"object":"response","model":"gpt-5-2025-08-07","status":"completed",`+
			`"output":[{"type":"web_search_call","id":"ws_1","status":"completed"},{"type":"message","id":"msg_1","content":[{"type":"output_text","text":"Tolls are paid in tokens."}]}],`+
			`"usage":{"input_tokens":%d,"input_tokens_details":{"cached_tokens":100},"output_tokens":%d,"output_tokens_details":{"reasoning_tokens":7},"total_tokens":%d}}}`,
			id, u.in+i, u.out+i, u.in+u.out+2*i))
		i++
	}
}

// responseCreate is a response.create event asking gpt-5 for at most 500 output tokens.
func responseCreate(input string) string {
	return `{"type":"response.create","model":"gpt-5","max_output_tokens":500,"input":"` + input + `"}`
}

// settledIDs are the ids of the requests the tracker settled, in order.
func (f *fakeTracker) settledIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.finishedIDs...)
}

// The Responses API's WebSocket mode is proxied and charged response by response: the
// handshake's request (req_1), which asked for no response, is settled at 0 once the
// session is open; each response.create is checked as the request it is, with its body
// (the gate reserves its worst case from its model and output cap), and its response's
// terminal event settles it as the same response streamed over HTTP would be (its
// model, usage, cached input, the web search its output lists); a response cut by the
// session's end is estimated from its text.
func TestResponsesWebSocketIsChargedByResponse(t *testing.T) {
	for _, hang := range []bool{false, true} {
		t.Run(fmt.Sprint("hang ", hang), func(t *testing.T) {
			up := &responsesUpstream{in: 1000, out: 200, hang: hang}
			g, tr, url, _ := newRealtimeEnv(t, up, 10)
			c, _, err := dialRealtime(t, url+"/v1/responses", "tgk_good")
			if err != nil {
				t.Fatal(err)
			}
			say(t, c, responseCreate("How are tolls paid?"))
			readUntil(t, c, "response.completed")
			say(t, c, responseCreate("And tunnels?"))
			if hang {
				readUntil(t, c, "output_text.delta")
			} else {
				readUntil(t, c, "response.completed")
			}
			_ = c.Close(websocket.StatusNormalClosure, "bye")
			s := tr.settlements(t, 3)
			if ids := tr.settledIDs(); fmt.Sprint(ids) != "[req_1 req_2 req_3]" {
				t.Fatalf("settled %v, want the handshake's request, then one per response.create", ids)
			}
			if open := s[0]; !open.Complete || open.InputTokens != 0 || open.OutputTokens != 0 || open.Seen != nil {
				t.Fatalf("the handshake's request: %+v, want complete at 0", open)
			}
			for i, u := range s[1:] {
				if hang && i == 1 {
					if u.Complete || u.Seen == nil || u.Seen.TextBytes != int64(len("Tolls are paid in tokens.")) || u.InputTokens != 0 || u.Model != "gpt-5-2025-08-07" {
						t.Fatalf("the cut response was settled %+v (seen %+v)", u, u.Seen)
					}
					continue
				}
				if !u.Complete || u.Model != "gpt-5-2025-08-07" || u.InputTokens != 1000+int64(i) || u.CachedTokens != 100 ||
					u.OutputTokens != 200+int64(i) || u.WebSearchRequests != 1 || u.UpstreamStatus != 101 {
					t.Fatalf("response %d was settled %+v", i, u)
				}
			}
			g.mu.Lock()
			defer g.mu.Unlock()
			if g.checks != 3 {
				t.Fatalf("%d checks, want the handshake's and one per response.create", g.checks)
			}
			if g.hints[0].Body != nil {
				t.Fatalf("the handshake was checked with a body: %+v", g.hints[0].Body)
			}
			for _, h := range g.hints[1:] {
				if h.Body == nil || h.Body.Model != "gpt-5" || h.Body.OutputCap != 500 || h.Body.TextBytes == 0 {
					t.Fatalf("a response.create was checked with %+v, want its model, output cap and input", h.Body)
				}
			}
			if got := tr.recordedModels(); fmt.Sprint(got) != "[gpt-5 gpt-5]" {
				t.Fatalf("recorded %v, want each response.create's model", got)
			}
		})
	}
}

// A response.create the gateway refuses never reaches the provider: the client's
// WebSocket is closed with 1008 and the refusal's code, the request it was admitted as
// (if it was) settled uncharged. So are a member at the limit, a model nobody priced
// where the organization refuses those, and a code tool naming a container created apart
// (deferred billing, as over HTTP). The responses before it are charged.
func TestResponsesWebSocketRefusesACreateBeforeItRuns(t *testing.T) {
	for _, c := range []struct {
		name, create, code string
		admits             int
		refuse             string
		// settled is the refused create's own settlement, "" when it was not admitted.
		settled string
	}{
		{name: "limit", create: responseCreate("More?"), code: "service_gateway_usage_limit_exceeded", admits: 2},
		{name: "unpriced model", create: `{"type":"response.create","model":"gpt-unpriced","input":"More?"}`,
			code: gate.CodeModelNotPriced, admits: 10, refuse: "gpt-unpriced"},
		{name: "container created apart", create: `{"type":"response.create","model":"gpt-5","input":"Run it",` +
			`"tools":[{"type":"code_interpreter","container":"cntr_0123"}]}`,
			code: gate.CodeBillingDeferred, admits: 10, settled: "req_3 403"},
	} {
		t.Run(c.name, func(t *testing.T) {
			up := &responsesUpstream{in: 1000, out: 200}
			_, tr, url, _ := newRealtimeEnv(t, up, c.admits)
			tr.refuse = c.refuse
			ws, _, err := dialRealtime(t, url+"/v1/responses", "tgk_good")
			if err != nil {
				t.Fatal(err)
			}
			say(t, ws, responseCreate("How are tolls paid?"))
			readUntil(t, ws, "response.completed")
			say(t, ws, c.create)
			if ce, err := closeOf(ws); ce.Code != websocket.StatusPolicyViolation || ce.Reason != c.code {
				t.Fatalf("after the refused create: %v %v, want close 1008 %s", ce, err, c.code)
			}
			want := 2
			if c.settled != "" {
				want++
			}
			s := tr.settlements(t, want)
			ids := tr.settledIDs()
			if ids[1] != "req_2" || !s[1].Complete || s[1].InputTokens != 1000 {
				t.Fatalf("the first response: %s %+v", ids[1], s[1])
			}
			if c.settled != "" {
				if got := fmt.Sprint(ids[2], " ", s[2].UpstreamStatus); got != c.settled || !s[2].Complete || s[2].InputTokens != 0 {
					t.Fatalf("the refused create was settled %s %+v, want %s, at 0", ids[2], s[2], c.settled)
				}
			}
			if got := up.messages(); len(got) != 1 {
				t.Fatalf("the provider got %d messages, want only the first create: %q", len(got), got)
			}
		})
	}
}

// The provider's "error" event, its refusal of a response.create it does not run (a
// previous_response_id it does not know), settles that create's request at 0; the next
// response is charged on its own request, not one off. A create the provider had and
// never began when the session ended is charged its input estimate (incomplete, nothing
// seen), as an HTTP request cut before its answer began.
func TestResponsesWebSocketErrorsAndUnansweredCreates(t *testing.T) {
	up := &responsesUpstream{in: 1000, out: 200}
	_, tr, url, _ := newRealtimeEnv(t, up, 10)
	c, _, err := dialRealtime(t, url+"/v1/responses", "tgk_good")
	if err != nil {
		t.Fatal(err)
	}
	say(t, c, `{"type":"response.create","model":"gpt-5","previous_response_id":"resp_gone","input":"no_such_response"}`)
	readUntil(t, c, "previous_response_not_found")
	say(t, c, responseCreate("How are tolls paid?"))
	readUntil(t, c, "response.completed")
	say(t, c, responseCreate("silent"))
	waitFor(t, func() bool { return len(up.messages()) == 3 })
	_ = c.Close(websocket.StatusNormalClosure, "bye")
	s := tr.settlements(t, 4)
	ids := tr.settledIDs()
	if fmt.Sprint(ids) != "[req_1 req_2 req_3 req_4]" {
		t.Fatalf("settled %v", ids)
	}
	if refused := s[1]; !refused.Complete || refused.InputTokens != 0 || refused.Seen != nil {
		t.Fatalf("the create the provider refused: %+v, want complete at 0", refused)
	}
	if ran := s[2]; !ran.Complete || ran.InputTokens != 1000 || ran.OutputTokens != 200 {
		t.Fatalf("the response that ran: %+v", ran)
	}
	if unanswered := s[3]; unanswered.Complete || unanswered.Seen == nil || unanswered.Seen.TextBytes != 0 {
		t.Fatalf("the create never answered: %+v (seen %+v), want incomplete, its input estimate", unanswered, unanswered.Seen)
	}
}

// recordedModels are the models of the requests recorded (RecordRequest), in order.
func (f *fakeTracker) recordedModels() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.recorded...)
}
