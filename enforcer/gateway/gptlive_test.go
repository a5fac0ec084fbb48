package gateway_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/tollgate-dev/tollgate/enforcer/gate"
)

// gptLiveUpstream is a fake of OpenAI's GPT-Live over a WebSocket: the client's
// session.start is answered by session.started (the model's snapshot); each "speak"
// message by a session.usage.updated adding 6 seconds to the session's total and a
// backend response (response.event wrapping response.created, a text delta and
// response.completed, gpt-5.5, 300 input and 20 output tokens; with hang, the second one
// never completes); "close" by session.closed with 1.5 seconds more. It counts the
// session.start messages it got.
type gptLiveUpstream struct {
	hang bool

	mu     sync.Mutex
	starts int
}

func (u *gptLiveUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, send := fakeSession(w, r, websocket.MessageText)
	if c == nil {
		return
	}
	defer c.CloseNow()
	ctx := r.Context()
	var seconds float64
	for i := 0; ; {
		_, msg, err := c.Read(ctx)
		if err != nil {
			return
		}
		switch m := string(msg); {
		case strings.Contains(m, `"session.start"`):
			u.mu.Lock()
			u.starts++
			u.mu.Unlock()
			_ = send(`{"type":"session.started","event_id":"ev_0","session":{"id":"live_1","model":"gpt-live-1-2026-11-01"}}`)
		case strings.Contains(m, "speak"):
			seconds += 6
			_ = send(fmt.Sprintf(`{"type":"session.usage.updated","event_id":"ev_u","usage":{"seconds":%g}}`, seconds))
			id := fmt.Sprintf("resp_%d", i)
			wrap := func(e string) string {
				return `{"type":"response.event","event_id":"ev_r","delegation_id":"dl_1","event":` + e + `}`
			}
			_ = send(wrap(`{"type":"response.created","response":{"id":"` + id + `","model":"gpt-5.5","status":"in_progress"}}`))
			_ = send(wrap(`{"type":"response.output_text.delta","delta":"Tolls are paid in tokens."}`))
			if !(u.hang && i == 1) {
				_ = send(wrap(`{"type":"response.completed","response":{"id":"` + id + `","model":"gpt-5.5","status":"completed","usage":{"input_tokens":300,"output_tokens":20}}}`))
			}
			i++
		case strings.Contains(m, "close"):
			seconds += 1.5
			_ = send(fmt.Sprintf(`{"type":"session.closed","event_id":"ev_c","reason":"close_requested","session":{"model":"gpt-live-1-2026-11-01"},"usage":{"seconds":%g}}`, seconds))
		}
	}
}

// startGPTLive opens a GPT-Live session of gpt-live-1 with the good key, up to its
// session.started.
func startGPTLive(t *testing.T, url string) *websocket.Conn {
	t.Helper()
	c, _, err := dialRealtime(t, url+"/v1/live/sessions", "tgk_good")
	if err != nil {
		t.Fatal(err)
	}
	say(t, c, `{"type":"session.start","session":{"model":"gpt-live-1"}}`)
	readUntil(t, c, "session.started")
	return c
}

// An OpenAI GPT-Live session over a WebSocket is charged by the second of its session, at
// its model, in steps of at least 10 seconds, the rest at session.closed; each
// Responses call its backend makes is charged its tokens at the backend's model; the
// member is checked again after each settlement.
func TestGPTLiveSessionIsChargedByTheSecond(t *testing.T) {
	up := &gptLiveUpstream{}
	g, tr, url, _ := newRealtimeEnv(t, up, 10)
	c := startGPTLive(t, url)
	say(t, c, `{"type":"speak"}`)
	readUntil(t, c, "response.completed")
	say(t, c, `{"type":"speak"}`) // 12 s now: a step
	readUntil(t, c, "response.completed")
	say(t, c, `{"type":"session.close"}`)
	readUntil(t, c, "session.closed")
	_ = c.Close(websocket.StatusNormalClosure, "bye")
	s := tr.settlements(t, 5)
	got := make([]string, len(s))
	for i, u := range s {
		got[i] = fmt.Sprintf("%s in %d out %d ms %d complete %v", u.Model, u.InputTokens, u.OutputTokens, u.AudioInputMillis, u.Complete)
	}
	want := []string{
		"gpt-5.5 in 300 out 20 ms 0 complete true",
		"gpt-live-1-2026-11-01 in 0 out 0 ms 12000 complete true",
		"gpt-5.5 in 300 out 20 ms 0 complete true",
		"gpt-live-1-2026-11-01 in 0 out 0 ms 1500 complete true",
		"gpt-live-1-2026-11-01 in 0 out 0 ms 0 complete true", // nothing after session.closed
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("settled:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if n := g.count(); n != 5 {
		t.Fatalf("%d checks, want the handshake's and one after each settlement but the last", n)
	}
}

// A member refused at a check mid-session (1008) is charged what the session ran since
// its last charged step: the seconds the server reported and no step charged, and the
// time since its last report by the clock (an estimate: none passes in this test but a
// millisecond or so), on a request opened without a check (gate.Gate.Trailing) for the
// refused member; before 2026-11-30 it went uncharged. A key revoked during the session
// is refused naming nobody: the time is the member's whose key opened the session
// (before 2026-11-30's fourth session it went uncharged).
func TestGPTLiveRefusedIsChargedItsLastSeconds(t *testing.T) {
	for _, tc := range []struct {
		name    string
		revoked bool
		reason  string
	}{
		{"over the limit", false, gate.CodeUsageLimitExceeded},
		{"key revoked", true, "unknown_credential"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := &gptLiveUpstream{}
			g, tr, url, _ := newRealtimeEnv(t, up, 1) // the handshake's check alone is admitted
			g.revoked = tc.revoked
			c := startGPTLive(t, url)
			say(t, c, `{"type":"speak"}`) // 6 s reported (no step yet), and a backend response
			readUntil(t, c, "response.completed")
			if ce, err := closeOf(c); ce.Code != websocket.StatusPolicyViolation || ce.Reason != tc.reason {
				t.Fatalf("after the backend response: %v %v, want close 1008 %s", ce, err, tc.reason)
			}
			s := tr.settlements(t, 2)
			if backend := s[0]; backend.Model != "gpt-5.5" || backend.InputTokens != 300 || !backend.Complete {
				t.Fatalf("the backend response: %+v", backend)
			}
			tr.mu.Lock()
			id := tr.finishedIDs[1]
			tr.mu.Unlock()
			if last := s[1]; id != "req_trailing_1" || !strings.HasPrefix(last.Model, "gpt-live-1") || last.AudioInputMillis < 6000 ||
				last.AudioInputMillis > 6000+5000 || last.Complete != (last.AudioInputMillis == 6000) {
				t.Fatalf("the session's last seconds on %s: %+v, want the 6 s reported (and, estimated, the time since), on the trailing request", id, last)
			}
			g.mu.Lock()
			defer g.mu.Unlock()
			if len(g.trailing) != 1 || g.trailing[0] != "org_1/om_1" {
				t.Fatalf("trailing requests opened for %v, want the session's member's one", g.trailing)
			}
		})
	}
}

// A GPT-Live session cut before session.closed is charged the time since its last report
// as an estimate (incomplete), and a backend response cut with it is estimated from its
// text on a request of its own. A model nobody priced, where the organization refuses
// those, is refused at session.start, which never reaches the provider.
func TestGPTLiveCutAndRefused(t *testing.T) {
	up := &gptLiveUpstream{hang: true}
	_, tr, url, _ := newRealtimeEnv(t, up, 10)
	c := startGPTLive(t, url)
	say(t, c, `{"type":"speak"}`)
	readUntil(t, c, "response.completed")
	say(t, c, `{"type":"speak"}`)
	readUntil(t, c, "output_text.delta")
	_ = c.Close(websocket.StatusNormalClosure, "bye")
	s := tr.settlements(t, 4)
	if first := s[0]; first.Model != "gpt-5.5" || !first.Complete || first.InputTokens != 300 {
		t.Fatalf("the first backend response: %+v", first)
	}
	if step := s[1]; step.AudioInputMillis != 12000 || !step.Complete {
		t.Fatalf("the 12 s reported: %+v", step)
	}
	var cut, time bool
	for _, u := range s[2:] {
		switch {
		case u.Model == "gpt-5.5" && !u.Complete && u.Seen != nil && u.Seen.TextBytes == int64(len("Tolls are paid in tokens.")):
			cut = true
		case strings.HasPrefix(u.Model, "gpt-live-1") && !u.Complete && u.AudioInputMillis > 0 && u.Seen == nil:
			time = true // the time since the last report (the grace for the backend response included), estimated
		}
	}
	if !cut || !time {
		t.Fatalf("the session's end settled %+v, want the cut backend response and the session's time, estimated", s[2:])
	}

	up2 := &gptLiveUpstream{}
	_, tr2, url2, _ := newRealtimeEnv(t, up2, 10)
	tr2.refuse = "gpt-live-unpriced"
	c, _, err := dialRealtime(t, url2+"/v1/live/sessions", "tgk_good")
	if err != nil {
		t.Fatal(err)
	}
	say(t, c, `{"type":"session.start","session":{"model":"gpt-live-unpriced"}}`)
	if ce, err := closeOf(c); ce.Code != websocket.StatusPolicyViolation || ce.Reason != gate.CodeModelNotPriced {
		t.Fatalf("after session.start: %v %v, want close 1008 %s", ce, err, gate.CodeModelNotPriced)
	}
	up2.mu.Lock()
	defer up2.mu.Unlock()
	if up2.starts != 0 {
		t.Fatalf("the provider got %d session.start", up2.starts)
	}
}

// decidingLiveUpstream is a fake GPT-Live server (openai 7.59's LiveWS) whose session
// answers each client decision.create with a Decision API evaluation: a decision.event
// wrapping decision.completed, the native Decision with its model and token usage
// (live.d.ts: DecisionEvent, "The native Decision API response, including its model,
// ordered answers, and token usage"), then closes the session on session.close.
type decidingLiveUpstream struct{}

func (decidingLiveUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, send := fakeSession(w, r, websocket.MessageText)
	if c == nil {
		return
	}
	defer c.CloseNow()
	ctx := r.Context()
	for {
		_, msg, err := c.Read(ctx)
		if err != nil {
			return
		}
		switch m := string(msg); {
		case strings.Contains(m, `"session.start"`):
			_ = send(`{"type":"session.started","event_id":"ev_0","session":{"id":"live_1","model":"gpt-live-1-2026-11-01"}}`)
		case strings.Contains(m, `"decision.create"`):
			_ = send(`{"type":"decision.event","event_id":"ev_d","delegation_id":null,"source_event_id":null,"source_event_type":null,"trigger_id":null,` +
				`"event":{"type":"decision.completed","decision":{"model":"gpt-5.5","answers":[{"type":"predicate","name":"angry","probability":0.1}],` +
				`"usage":{"input_tokens":200000,"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":0},"output_tokens":5000,"output_tokens_details":{"reasoning_tokens":4000},"total_tokens":205000}}}}`)
		case strings.Contains(m, `"session.close"`):
			_ = send(`{"type":"session.closed","event_id":"ev_c","reason":"close_requested","session":{"model":"gpt-live-1-2026-11-01"},"usage":{"seconds":1}}`)
		}
	}
}

// A GPT-Live session's Decision API evaluations (the client's decision.create, a
// delegation to Decisions, a transcript trigger) are billed by OpenAI at the decision's
// model by its tokens, reported in decision.event: each is charged on a request of its
// own, at its model, and the member is checked again after it, as after a backend
// response.
func TestGPTLiveChargesEachDecisionAtItsModel(t *testing.T) {
	_, tr, url, _ := newRealtimeEnv(t, decidingLiveUpstream{}, 10)
	c := startGPTLive(t, url)
	for range 3 {
		say(t, c, `{"type":"decision.create","event_id":"`+fmt.Sprint(time.Now().UnixNano())+`"}`)
		readUntil(t, c, "decision.completed")
	}
	say(t, c, `{"type":"session.close"}`)
	readUntil(t, c, "session.closed")
	_ = c.Close(websocket.StatusNormalClosure, "bye")
	time.Sleep(300 * time.Millisecond)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var in, out int64
	decisions := 0
	for _, u := range tr.finished {
		in += u.InputTokens
		out += u.OutputTokens
		if u.Model == "gpt-5.5" && u.InputTokens == 200_000 && u.OutputTokens == 5_000 && u.Complete {
			decisions++
		}
	}
	t.Logf("settled %d requests: %d input and %d output tokens in all", len(tr.finished), in, out)
	if decisions != 3 || in != 3*200_000 || out != 3*5_000 {
		t.Fatalf("three decisions of 200,000 input and 5,000 output tokens (gpt-5.5) were charged %d input and %d output tokens", in, out)
	}
}
