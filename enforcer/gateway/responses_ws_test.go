package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/tollgate-dev/tollgate/enforcer/gate"
	"github.com/tollgate-dev/tollgate/enforcer/gateway"
	"github.com/tollgate-dev/tollgate/enforcer/inflight"
	"github.com/tollgate-dev/tollgate/enforcer/responseusage"
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
	received
}

// received keeps every message a fake provider got.
type received struct {
	mu  sync.Mutex
	got []string
}

func (r *received) record(msg []byte) {
	r.mu.Lock()
	r.got = append(r.got, string(msg))
	r.mu.Unlock()
}

func (r *received) messages() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
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
		u.record(msg)
		switch {
		case strings.Contains(string(msg), "no_such_response"):
			_ = send(`{"type":"error","status":400,"error":{"type":"invalid_request_error","code":"previous_response_not_found","message":"Previous response not found."}}`)
			continue
		case strings.Contains(string(msg), "silent"):
			continue
		case strings.Contains(string(msg), `"generate":false`):
			// A warmup, whose provider here reports no usage at all.
			id := fmt.Sprintf("resp_%d", i)
			_ = send(`{"type":"response.created","sequence_number":0,"response":{"id":"` + id + `","object":"response","model":"gpt-5-2025-08-07","status":"in_progress","output":[]}}`)
			_ = send(`{"type":"response.completed","sequence_number":1,"response":{"id":"` + id + `","object":"response","model":"gpt-5-2025-08-07","status":"completed","output":[],"usage":null}}`)
			i++
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

// The Responses API's WebSocket mode is proxied and charged response by response, the
// session holding one request in flight between responses as a Realtime session does:
// the handshake's request (req_1), which asked for no response, is settled at 0 when the
// first response.create comes, which is then checked as the request it is, with its body
// (the gate reserves its worst case from its model and output cap), and its response's
// terminal event settles it as the same response streamed over HTTP would be (its model,
// usage, cached input, the web search its output lists); then the next idle request is
// opened (checked, without a body), settled at 0 by the next create or the session's
// end. A response cut by the session's end is estimated from its text.
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
			waitFor(t, func() bool { return g.count() == 3 }) // the idle request after it
			say(t, c, responseCreate("And tunnels?"))
			if hang {
				readUntil(t, c, "output_text.delta")
			} else {
				readUntil(t, c, "response.completed")
				waitFor(t, func() bool { return g.count() == 5 })
			}
			_ = c.Close(websocket.StatusNormalClosure, "bye")
			want, idle := "[req_1 req_2 req_3 req_4 req_5]", []int{0, 2, 4}
			if hang {
				want, idle = "[req_1 req_2 req_3 req_4]", []int{0, 2}
			}
			s := tr.settlements(t, len(idle)+2)
			if ids := tr.settledIDs(); fmt.Sprint(ids) != want {
				t.Fatalf("settled %v, want %s: the idle requests at 0 (the handshake's first), each response.create's with its response", ids, want)
			}
			for _, i := range idle {
				if u := s[i]; !u.Complete || u.InputTokens != 0 || u.OutputTokens != 0 || u.Seen != nil {
					t.Fatalf("idle request %d: %+v, want complete at 0", i, u)
				}
			}
			for i, u := range []inflight.Usage{s[1], s[3]} {
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
			if want := len(idle) + 2; g.checks != want {
				t.Fatalf("%d checks, want %d: the handshake's, one per response.create, one per idle request after a response", g.checks, want)
			}
			for i, h := range g.hints {
				if i%2 == 0 {
					if h.Body != nil {
						t.Fatalf("idle request %d was checked with a body: %+v", i, h.Body)
					}
				} else if h.Body == nil || h.Body.Model != "gpt-5" || h.Body.OutputCap != 500 || h.Body.TextBytes == 0 {
					t.Fatalf("a response.create was checked with %+v, want its model, output cap and input", h.Body)
				}
			}
			if got := tr.recordedModels(); fmt.Sprint(got) != "[gpt-5 gpt-5]" {
				t.Fatalf("recorded %v, want each response.create's model", got)
			}
		})
	}
}

// Codex is told the member's limits as each of its response.create events is admitted,
// in the event it reads them from in a Responses WebSocket session (codex.rate_limits,
// the limits of that check: the second of the session, 2%), before the response's own
// events; Codex is the client whose handshake carries X-Codex-* headers. Another
// client is sent only what the provider sends.
func TestResponsesWebSocketTellsCodexTheLimits(t *testing.T) {
	for _, codex := range []bool{true, false} {
		t.Run(fmt.Sprint("codex ", codex), func(t *testing.T) {
			_, _, url, _ := newRealtimeEnv(t, &responsesUpstream{in: 1000, out: 200}, 10)
			h := http.Header{"Authorization": {"Bearer tgk_good"}}
			if codex {
				h.Set("X-Codex-Window-Id", "thread:0")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			c, _, err := websocket.Dial(ctx, url+"/v1/responses", &websocket.DialOptions{HTTPHeader: h})
			if err != nil {
				t.Fatal(err)
			}
			defer c.CloseNow()
			say(t, c, responseCreate("How are tolls paid?"))
			got := readUntil(t, c, "response.completed")
			var types []string
			for _, m := range got {
				var ev struct{ Type string }
				if err := json.Unmarshal([]byte(m), &ev); err != nil {
					t.Fatalf("%s: %v", m, err)
				}
				types = append(types, ev.Type)
			}
			const event = `{"type":"codex.rate_limits","rate_limits":{"allowed":true,"limit_reached":false,` +
				`"primary":{"used_percent":2.0,"window_minutes":1440,"reset_at":1800086400}}}`
			if codex && (len(got) < 2 || got[0] != event || types[1] != "response.created") {
				t.Fatalf("Codex was sent %q, want first %s, then the response's events", got, event)
			}
			if !codex && slices.Contains(types, "codex.rate_limits") {
				t.Fatalf("a client that is not Codex was sent %q", got)
			}
		})
	}
}

// A response.create the gateway refuses never reaches the provider: the client's
// WebSocket is closed with 1008 and the refusal's code, the request it was admitted as
// (if it was) settled uncharged. So are a member at the limit, a model nobody priced
// where the organization refuses those, and a code tool naming a container created apart
// (deferred billing, as over HTTP). The responses before it are charged; the idle
// request the session held (opened after the first response) is settled at 0 before the
// refused create's check.
func TestResponsesWebSocketRefusesACreateBeforeItRuns(t *testing.T) {
	for _, c := range []struct {
		name, create, code string
		admits             int
		refuse             string
		// settled is the refused create's own settlement, "" when it was not admitted.
		settled string
	}{
		// Three admissions: the handshake, the first create, the idle request after it.
		{name: "limit", create: responseCreate("More?"), code: "service_gateway_usage_limit_exceeded", admits: 3},
		{name: "unpriced model", create: `{"type":"response.create","model":"gpt-unpriced","input":"More?"}`,
			code: gate.CodeModelNotPriced, admits: 10, refuse: "gpt-unpriced"},
		{name: "container created apart", create: `{"type":"response.create","model":"gpt-5","input":"Run it",` +
			`"tools":[{"type":"code_interpreter","container":"cntr_0123"}]}`,
			code: gate.CodeBillingDeferred, admits: 10, settled: "req_4 403"},
	} {
		t.Run(c.name, func(t *testing.T) {
			up := &responsesUpstream{in: 1000, out: 200}
			g, tr, url, _ := newRealtimeEnv(t, up, c.admits)
			tr.refuse = c.refuse
			ws, _, err := dialRealtime(t, url+"/v1/responses", "tgk_good")
			if err != nil {
				t.Fatal(err)
			}
			say(t, ws, responseCreate("How are tolls paid?"))
			readUntil(t, ws, "response.completed")
			waitFor(t, func() bool { return g.count() == 3 })
			say(t, ws, c.create)
			if ce, err := closeOf(ws); ce.Code != websocket.StatusPolicyViolation || ce.Reason != c.code {
				t.Fatalf("after the refused create: %v %v, want close 1008 %s", ce, err, c.code)
			}
			want := 3
			if c.settled != "" {
				want++
			}
			s := tr.settlements(t, want)
			ids := tr.settledIDs()
			for _, i := range []int{0, 2} {
				if id := fmt.Sprintf("req_%d", i+1); ids[i] != id || !s[i].Complete || s[i].InputTokens != 0 {
					t.Fatalf("the idle request %s: %s %+v, want it at 0", id, ids[i], s[i])
				}
			}
			if ids[1] != "req_2" || !s[1].Complete || s[1].InputTokens != 1000 {
				t.Fatalf("the first response: %s %+v", ids[1], s[1])
			}
			if c.settled != "" {
				if got := fmt.Sprint(ids[3], " ", s[3].UpstreamStatus); got != c.settled || !s[3].Complete || s[3].InputTokens != 0 {
					t.Fatalf("the refused create was settled %s %+v, want %s, at 0", ids[3], s[3], c.settled)
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
// response is charged on its own request, not one off, and the session holds an idle
// request again. A create the provider had and never began when the session ended is
// charged its input estimate (incomplete, nothing seen), as an HTTP request cut before
// its answer began.
func TestResponsesWebSocketErrorsAndUnansweredCreates(t *testing.T) {
	up := &responsesUpstream{in: 1000, out: 200}
	g, tr, url, _ := newRealtimeEnv(t, up, 10)
	c, _, err := dialRealtime(t, url+"/v1/responses", "tgk_good")
	if err != nil {
		t.Fatal(err)
	}
	say(t, c, `{"type":"response.create","model":"gpt-5","previous_response_id":"resp_gone","input":"no_such_response"}`)
	readUntil(t, c, "previous_response_not_found")
	waitFor(t, func() bool { return g.count() == 3 }) // the idle request after the refusal
	say(t, c, responseCreate("How are tolls paid?"))
	readUntil(t, c, "response.completed")
	waitFor(t, func() bool { return g.count() == 5 })
	say(t, c, responseCreate("silent"))
	waitFor(t, func() bool { return len(up.messages()) == 3 })
	_ = c.Close(websocket.StatusNormalClosure, "bye")
	s := tr.settlements(t, 6)
	ids := tr.settledIDs()
	if fmt.Sprint(ids) != "[req_1 req_2 req_3 req_4 req_5 req_6]" {
		t.Fatalf("settled %v", ids)
	}
	for _, i := range []int{0, 2, 4} {
		if idle := s[i]; !idle.Complete || idle.InputTokens != 0 || idle.Seen != nil {
			t.Fatalf("the idle request %s, settled by the next create: %+v, want complete at 0", ids[i], idle)
		}
	}
	if refused := s[1]; !refused.Complete || refused.InputTokens != 0 || refused.Seen != nil {
		t.Fatalf("the create the provider refused: %+v, want complete at 0", refused)
	}
	if ran := s[3]; !ran.Complete || ran.InputTokens != 1000 || ran.OutputTokens != 200 {
		t.Fatalf("the response that ran: %+v", ran)
	}
	if unanswered := s[5]; unanswered.Complete || unanswered.Seen == nil || unanswered.Seen.TextBytes != 0 {
		t.Fatalf("the create never answered: %+v (seen %+v), want incomplete, its input estimate", unanswered, unanswered.Seen)
	}
}

// recordedModels are the models of the requests recorded (RecordRequest), in order.
func (f *fakeTracker) recordedModels() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.recorded...)
}

// inFlightGate admits each key's requests while fewer than limit of them are in flight
// (admitted and not yet settled with the tracker), as a policy's in-flight cap does, and
// refuses the next with the concurrency limit.
type inFlightGate struct {
	wholeCheckOnly
	tr    *fakeTracker
	limit int

	mu       sync.Mutex
	admitted map[string][]string // key -> request ids
	n        int
	// most is the most requests of one key in flight at once (the one admitted counted);
	// refusals, the concurrency refusals answered.
	most, refusals int
}

func (g *inFlightGate) Trailing(string, string) string { return "" }

func (g *inFlightGate) CheckRequest(_ context.Context, c gate.Credentials, _ gate.Hint) (gate.Answer, error) {
	key := strings.TrimPrefix(c.Authorization, "Bearer ")
	g.tr.mu.Lock()
	settled := map[string]bool{}
	for _, id := range g.tr.finishedIDs {
		settled[id] = true
	}
	g.tr.mu.Unlock()
	g.mu.Lock()
	defer g.mu.Unlock()
	inFlight := 0
	for _, id := range g.admitted[key] {
		if !settled[id] {
			inFlight++
		}
	}
	if inFlight >= g.limit {
		g.refusals++
		a := gate.Refusal(gate.ReasonConcurrencyLimit)
		a.OrganizationID, a.MemberID = "org_1", key
		return a, nil
	}
	g.n++
	g.most = max(g.most, inFlight+1)
	id := fmt.Sprintf("req_%d", g.n)
	g.admitted[key] = append(g.admitted[key], id)
	return gate.Answer{Status: 200, Decision: gate.Admitted, RequestID: id, UsageState: "within_limit",
		OrganizationID: "org_1", MemberID: key}, nil
}

// An idle Responses WebSocket session holds the request its handshake was admitted as
// until it ends, as a Realtime session holds its request: it counts in its member's
// requests in flight, so a policy's in-flight cap bounds how many such sessions a member
// holds open (and with them the gateway's slots); the third session of a member capped
// at two is refused 429 at its handshake, the gateway still has a slot for everyone
// else, and a session's end frees its place.
func TestResponsesWebSocketIdleSessionCountsInFlight(t *testing.T) {
	upstream := httptest.NewServer(&responsesUpstream{in: 1000, out: 200})
	t.Cleanup(upstream.Close)
	rt, err := gateway.NewRoute("/", upstream.URL, "", "Bearer sk-provider")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := newMetrics()
	tr := newTracker()
	g := &inFlightGate{tr: tr, limit: 2, admitted: map[string][]string{}}
	gw, err := gateway.New(gateway.Config{Routes: []gateway.Route{rt}, MaxStreams: 3}, g, tr, responseusage.Limits{}, m, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(gw)
	t.Cleanup(front.Close)
	url := "ws" + strings.TrimPrefix(front.URL, "http") + "/v1/responses"

	var sessions []*websocket.Conn
	for range 2 {
		c, _, err := dialRealtime(t, url, "tgk_good")
		if err != nil {
			t.Fatal(err)
		}
		defer c.CloseNow()
		sessions = append(sessions, c)
	}
	tr.mu.Lock()
	settled := len(tr.finishedIDs)
	tr.mu.Unlock()
	if settled != 0 {
		t.Fatalf("%d requests settled while both sessions are open and idle, want none: each holds its handshake's", settled)
	}
	if _, res, err := dialRealtime(t, url, "tgk_good"); err == nil || res == nil || res.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a third session of the member: %v %v, want 429 (its in-flight cap)", res, err)
	}
	res, err := http.Post(front.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode == http.StatusServiceUnavailable {
		t.Fatalf("another request: %d %s: the member's idle sessions took every slot", res.StatusCode, res.Header.Get("X-Service-Error-Code"))
	}
	_ = sessions[0].Close(websocket.StatusNormalClosure, "bye")
	s := tr.settlements(t, 2) // the chat request's, and the first session's handshake
	var handshake *inflight.Usage
	for i, id := range tr.settledIDs() {
		if id == "req_1" {
			handshake = &s[i]
		}
	}
	if handshake == nil || !handshake.Complete || handshake.InputTokens != 0 || handshake.Seen != nil {
		t.Fatalf("the first session's handshake: %+v (settled %v), want settled at 0 at its end", handshake, tr.settledIDs())
	}
	c, _, err := dialRealtime(t, url, "tgk_good")
	if err != nil {
		t.Fatalf("a session once one ended: %v", err)
	}
	c.CloseNow()
}

// A Responses WebSocket session holds one request in flight while its responses run one
// after another, idle or busy, as a Realtime session does: a member whose in-flight cap
// is 1 runs three responses in a row on one session, each charged its usage on its own
// request, the session never refused (the idle request is settled at 0 before each
// response.create's own check, and the next idle one opened after each response). A
// second response.create while one is in progress is a second request in flight, refused
// with the cap's code (1008), as before. Before 2026-12-02 the session held the
// handshake's request besides each response's: the first create was refused.
func TestResponsesWebSocketSequentialResponsesHoldOneRequest(t *testing.T) {
	up, tr := &responsesUpstream{in: 1000, out: 200}, newTracker()
	g := &inFlightGate{tr: tr, limit: 1, admitted: map[string][]string{}}
	front := httptest.NewServer(realtimeGatewayOf(t, up, g, tr))
	t.Cleanup(front.Close)
	c, _, err := dialRealtime(t, "ws"+strings.TrimPrefix(front.URL, "http")+"/v1/responses", "tgk_good")
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	for _, q := range []string{"How are tolls paid?", "And tunnels?", "And bridges?"} {
		say(t, c, responseCreate(q))
		readUntil(t, c, "response.completed")
	}
	g.mu.Lock()
	refusals, most := g.refusals, g.most
	g.mu.Unlock()
	if refusals != 0 || most != 1 {
		t.Fatalf("%d refusals, at most %d requests in flight, over three responses in a row; want none refused, one in flight", refusals, most)
	}
	say(t, c, responseCreate("silent")) // in progress: the provider never answers it
	waitFor(t, func() bool { return len(up.messages()) == 4 })
	say(t, c, responseCreate("And ferries?"))
	if ce, err := closeOf(c); ce.Code != websocket.StatusPolicyViolation || ce.Reason != gate.CodeConcurrencyLimitExceeded {
		t.Fatalf("a second response.create while one is in progress: %v %v, want close 1008 %s", ce, err, gate.CodeConcurrencyLimitExceeded)
	}
	waitFor(t, func() bool { // the session's end settles the create in progress
		g.mu.Lock()
		admitted := len(g.admitted["tgk_good"])
		g.mu.Unlock()
		return len(tr.settledIDs()) == admitted
	})
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var charged []string
	for _, u := range tr.finished {
		if u.InputTokens > 0 {
			charged = append(charged, fmt.Sprint(u.InputTokens, "/", u.OutputTokens))
		}
	}
	if fmt.Sprint(charged) != "[1000/200 1001/201 1002/202]" {
		t.Fatalf("charged %v, want the three responses, each its usage (settled %v)", charged, tr.finishedIDs)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.most != 1 || g.refusals != 1 {
		t.Fatalf("at most %d in flight, %d refused; want 1 and 1 (the concurrent create)", g.most, g.refusals)
	}
	if settled, admitted := len(tr.finishedIDs), len(g.admitted["tgk_good"]); settled != admitted {
		t.Fatalf("%d requests settled of %d admitted: %v", settled, admitted, tr.finishedIDs)
	}
}

// steeringUpstream is a fake of the Responses API's WebSocket mode with steering
// (openai 7.59's ResponseSteerEvent): a response.create is answered with one response
// (100,000 input, 20,000 output tokens); a response.steer is accepted and, as OpenAI
// documents it ("Normal completion can also be followed by an automatic successor"),
// followed by a successor response that no response.create asked for, unless its input
// says "fail" (response.steer.failed, no successor). With unasked, every response to a
// response.create is followed by a second response nobody asked for.
type steeringUpstream struct {
	unasked bool
	received
}

func (u *steeringUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, send := fakeSession(w, r, websocket.MessageText)
	if c == nil {
		return
	}
	defer c.CloseNow()
	ctx := r.Context()
	n := 0
	respond := func() {
		id := fmt.Sprintf("resp_%d", n)
		n++
		_ = send(`{"type":"response.created","sequence_number":1,"response":{"id":"` + id + `","object":"response","model":"gpt-5-2025-08-07","status":"in_progress","output":[]}}`)
		_ = send(`{"type":"response.output_text.delta","sequence_number":2,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"More tolls."}`)
		_ = send(fmt.Sprintf(`{"type":"response.completed","sequence_number":3,"response":{"id":%q,"object":"response","model":"gpt-5-2025-08-07","status":"completed",`+
			`"output":[{"type":"message","id":"msg_1","content":[{"type":"output_text","text":"More tolls."}]}],`+
			`"usage":{"input_tokens":100000,"output_tokens":20000,"total_tokens":120000}}}`, id))
	}
	for i := 0; ; i++ {
		_, msg, err := c.Read(ctx)
		if err != nil {
			return
		}
		u.record(msg)
		switch m := string(msg); {
		case strings.Contains(m, `"response.steer"`) && strings.Contains(m, `"fail"`):
			_ = send(fmt.Sprintf(`{"type":"response.steer.failed","sequence_number":0,"steer":{"id":"steer_%d"},"error":{"code":"response_not_active","message":"no"}}`, i))
		case strings.Contains(m, `"response.steer"`):
			_ = send(fmt.Sprintf(`{"type":"response.steer.accepted","sequence_number":0,"steer":{"id":"steer_%d","previous_response_id":"resp_%d"}}`, i, n-1))
			respond()
		default:
			respond()
			if u.unasked {
				respond()
			}
		}
	}
}

// steeringSession opens a Responses WebSocket session to up through a gate admitting
// admits checks, runs one response.create to its end and waits for the idle request
// opened after it (the third check).
func steeringSession(t *testing.T, up *steeringUpstream, admits int) (*countingGate, *fakeTracker, *websocket.Conn) {
	t.Helper()
	g, tr, url, _ := newRealtimeEnv(t, up, admits)
	c, _, err := dialRealtime(t, url+"/v1/responses", "tgk_good")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	say(t, c, responseCreate("How are tolls paid?"))
	readUntil(t, c, "response.completed")
	waitFor(t, func() bool { return g.count() == 3 }) // the idle request after it
	return g, tr, c
}

// steer sends a response.steer of the last response with input.
func steer(t *testing.T, c *websocket.Conn, input string) {
	t.Helper()
	say(t, c, `{"type":"response.steer","previous_response_id":"resp_0","input":"`+input+`"}`)
}

// A response.steer makes the provider start a successor response on its own (openai
// 7.59: a steer ends the active response or follows its completion), so it is a request:
// checked before it goes upstream, its successor charged on its request, a steer that
// starts none (response.steer.failed) settled at 0. A member refused at a steer's check
// gets 1008 and the steer never reaches the provider. Before 2026-12-02 steers passed
// unread: a member refused at every check got one full response per steer, each charged
// on a trailing request past the limit, and the session was never closed.
func TestResponsesWebSocketSteerIsARequest(t *testing.T) {
	t.Run("admitted", func(t *testing.T) {
		up := &steeringUpstream{}
		g, tr, c := steeringSession(t, up, 10)
		steer(t, c, "fail")
		readUntil(t, c, "response.steer.failed")
		waitFor(t, func() bool { return g.count() == 5 })
		steer(t, c, "and more")
		readUntil(t, c, "response.completed")
		waitFor(t, func() bool { return g.count() == 7 })
		_ = c.Close(websocket.StatusNormalClosure, "bye")
		s := tr.settlements(t, 7)
		if ids := fmt.Sprint(tr.settledIDs()); ids != "[req_1 req_2 req_3 req_4 req_5 req_6 req_7]" {
			t.Fatalf("settled %s, want each idle request, then the create's, the failed steer's, the steer's successor's", ids)
		}
		if s[1].InputTokens != 100_000 || s[5].InputTokens != 100_000 || s[5].OutputTokens != 20_000 || !s[5].Complete {
			t.Fatalf("the responses were settled %+v and %+v", s[1], s[5])
		}
		for _, i := range []int{0, 2, 3, 4, 6} {
			if s[i].InputTokens != 0 || !s[i].Complete {
				t.Fatalf("%s (an idle request, or the failed steer's): %+v, want it at 0", tr.settledIDs()[i], s[i])
			}
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.checks != 7 || len(g.trailing) != 0 {
			t.Fatalf("%d checks, trailing %v; want 7 (the handshake, the create, both steers, the idle request after each), none trailing", g.checks, g.trailing)
		}
	})
	t.Run("refused", func(t *testing.T) {
		up := &steeringUpstream{}
		// Three admissions: the handshake, the first response.create, the idle request
		// after its response.
		g, tr, c := steeringSession(t, up, 3)
		steer(t, c, "and more")
		if ce, err := closeOf(c); ce.Code != websocket.StatusPolicyViolation || ce.Reason != "service_gateway_usage_limit_exceeded" {
			t.Fatalf("after the refused steer: %v %v, want close 1008", ce, err)
		}
		tr.settlements(t, 3)
		if got := up.messages(); len(got) != 1 {
			t.Fatalf("the provider got %d messages, want only the create: %q", len(got), got)
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		if len(g.trailing) != 0 {
			t.Fatalf("trailing requests %v, want none", g.trailing)
		}
	})
}

// A response nobody asked for (no request waits for it) is charged on the idle request
// the session holds (opened, checked, after the response before it), and the next idle
// request is checked then; when that check refuses the member the session is closed
// with 1008, as at a refused response.create (before 2026-12-02 the session went on).
// With no idle request held, such a response is charged on a request checked then, a
// trailing one (the provider bills it) if the member is refused.
func TestResponsesWebSocketUnaskedResponseRefusedClosesTheSession(t *testing.T) {
	up := &steeringUpstream{unasked: true}
	// Three admissions: the handshake, the response.create, the idle request after its
	// response, which carries the unasked one.
	g, tr, url, _ := newRealtimeEnv(t, up, 3)
	c, _, err := dialRealtime(t, url+"/v1/responses", "tgk_good")
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	say(t, c, responseCreate("How are tolls paid?"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	completed := 0
	var closeErr error
	for {
		_, msg, err := c.Read(ctx)
		if err != nil {
			closeErr = err
			break
		}
		if strings.Contains(string(msg), "response.completed") {
			completed++
		}
	}
	if completed != 2 || websocket.CloseStatus(closeErr) != websocket.StatusPolicyViolation {
		t.Fatalf("%d responses then %v, want both responses then close 1008", completed, closeErr)
	}
	s := tr.settlements(t, 3)
	if ids := fmt.Sprint(tr.settledIDs()); ids != "[req_1 req_2 req_3]" {
		t.Fatalf("settled %s, want the handshake's (at 0), the create's, the unasked response's on the idle request", ids)
	}
	if s[0].InputTokens != 0 || s[1].InputTokens != 100_000 || s[2].InputTokens != 100_000 || s[2].OutputTokens != 20_000 {
		t.Fatalf("settled %+v", s)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.trailing) != 0 || g.checks != 4 {
		t.Fatalf("%d checks, trailing %v; want 4 (the last refused), none trailing", g.checks, g.trailing)
	}
}

// A warmup (a response.create with "generate": false, which Codex sends as its session
// opens: the turn's state prepared, nothing generated) is checked as the request it is,
// marked as generating nothing, so that the gate reserves its input alone
// (enforcer/worstcase); the turn after it, and a "generate": true, are checked as any
// response.create. A warmup whose response reports no usage is settled incomplete, for
// the tracker to charge its estimate, as any response without usage.
func TestResponsesWebSocketWarmupReservesItsInput(t *testing.T) {
	up := &responsesUpstream{in: 1000, out: 0}
	g, tr, url, _ := newRealtimeEnv(t, up, 10)
	c, _, err := dialRealtime(t, url+"/v1/responses", "tgk_good")
	if err != nil {
		t.Fatal(err)
	}
	creates := []string{
		`{"type":"response.create","model":"gpt-5","generate":false,"input":"Prepare"}`,
		responseCreate("How are tolls paid?"),
		`{"type":"response.create","model":"gpt-5","generate":true,"input":"And tunnels?"}`,
	}
	for i, create := range creates {
		say(t, c, create)
		readUntil(t, c, "response.completed")
		waitFor(t, func() bool { return g.count() == 3+2*i }) // the idle request after it
	}
	_ = c.Close(websocket.StatusNormalClosure, "bye")
	s := tr.settlements(t, 7)
	g.mu.Lock()
	hints := append([]gate.Hint(nil), g.hints...)
	g.mu.Unlock()
	var warmups []bool
	for i, h := range hints {
		if i%2 == 1 { // a create's; the others are the idle requests'
			if h.Body == nil || h.Body.Model != "gpt-5" {
				t.Fatalf("create %d was checked with %+v", i/2, h.Body)
			}
			warmups = append(warmups, h.Body.NoGeneration)
		}
	}
	if fmt.Sprint(warmups) != "[true false false]" {
		t.Fatalf("creates checked as generating nothing: %v, want the warmup alone", warmups)
	}
	// The warmup's response reported no usage: settled incomplete, so that the tracker
	// charges its estimate (never nothing); the two others their usage, complete.
	if u := s[1]; u.Complete || u.InputTokens != 0 || u.OutputTokens != 0 {
		t.Fatalf("the warmup without usage was settled %+v, want incomplete (estimated)", u)
	}
	for _, i := range []int{3, 5} {
		if u := s[i]; !u.Complete || u.InputTokens == 0 {
			t.Fatalf("response %d was settled %+v, want its usage, complete", i, u)
		}
	}
}
