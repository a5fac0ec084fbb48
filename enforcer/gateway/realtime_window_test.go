package gateway_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/tollgate-dev/tollgate/enforcer/gate"
	"github.com/tollgate-dev/tollgate/enforcer/gateway"
	"github.com/tollgate-dev/tollgate/enforcer/inflight"
	"github.com/tollgate-dev/tollgate/pkg/clock"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// clockedGate is a countingGate that notes the instant of each admission on clk, the
// instant whose windows its request is charged on (ACCOUNTING.md: "Admission, start,
// settlement").
type clockedGate struct {
	*countingGate
	clk *clock.Manual
	mu  sync.Mutex
	at  map[string]time.Time
}

func (g *clockedGate) CheckRequest(ctx context.Context, c gate.Credentials, h gate.Hint) (gate.Answer, error) {
	a, err := g.countingGate.CheckRequest(ctx, c, h)
	if a.RequestID != "" {
		g.mu.Lock()
		g.at[a.RequestID] = g.clk.Now()
		g.mu.Unlock()
	}
	return a, err
}

func (g *clockedGate) Trailing(orgID, memberID string) string {
	id := g.countingGate.Trailing(orgID, memberID)
	g.mu.Lock()
	g.at[id] = g.clk.Now()
	g.mu.Unlock()
	return id
}

func (g *clockedGate) admittedAt(id string) time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.at[id]
}

// newClockedRealtimeEnv is newRealtimeEnv on a gateway and a gate that tell the time by
// clk, set to 04:50 UTC: ten minutes before a day's (and this Monday's) windows end.
func newClockedRealtimeEnv(t *testing.T, up http.Handler, admits int) (*clockedGate, *fakeTracker, string, *clock.Manual) {
	t.Helper()
	clk := clock.NewManual(time.Date(2026, 9, 14, 4, 50, 0, 0, time.UTC))
	g := &clockedGate{countingGate: &countingGate{n: admits}, clk: clk, at: map[string]time.Time{}}
	tr := newTracker()
	gw := realtimeGatewayOf(t, up, g, tr, func(c *gateway.Config) { c.Clock = clk })
	front := httptest.NewServer(gw)
	t.Cleanup(front.Close)
	return g, tr, "ws" + strings.TrimPrefix(front.URL, "http"), clk
}

// waitChecks waits until g made n checks.
func waitChecks(t *testing.T, g *countingGate, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); g.count() < n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d checks, want %d", g.count(), n)
		}
	}
}

// A Realtime session holds the request its member was checked for after a response
// until the next response: a session idle across 05:00 UTC (a day's end, here a week's
// too) held one admitted in the ended windows, and the response that began after 05:00
// was charged on them (ACCOUNTING.md charges a request on its admission's windows; the
// specification's rule 11 takes admission time at the quota check). Since 2026-12-07 a
// response that begins once the held request's windows ended has the member checked
// again then: the held request is settled at 0 and the response is
// charged on a request admitted in the windows it ran in.
func TestRealtimeResponseAfterAWindowEndIsChargedOnItsWindow(t *testing.T) {
	up := &realtimeUpstream{in: 100, out: 50}
	g, tr, url, clk := newClockedRealtimeEnv(t, up, 10)
	c, _ := openSession(t, url)
	say(t, c, `{"type":"response.create"}`)
	readUntil(t, c, "response.done")
	waitChecks(t, g.countingGate, 2) // the request held for the next response, at 04:50

	clk.Set(time.Date(2026, 9, 14, 5, 10, 0, 0, time.UTC))
	say(t, c, `{"type":"response.create"}`)
	readUntil(t, c, "response.done")
	_ = c.Close(websocket.StatusNormalClosure, "")
	tr.settlements(t, 3)
	time.Sleep(100 * time.Millisecond) // and the fourth, the session's last
	tr.mu.Lock()
	s, ids := append([]inflight.Usage(nil), tr.finished...), append([]string(nil), tr.finishedIDs...)
	tr.mu.Unlock()
	newDay := window.Of(window.Day, clk.Now())
	for i, u := range s {
		at := g.admittedAt(ids[i])
		switch {
		case u.InputTokens == 100 && at.After(newDay.Start):
			t.Fatalf("the first response was charged on %s, admitted at %v", ids[i], at)
		case u.InputTokens == 101 && !newDay.Contains(at):
			t.Fatalf("the response that began at 05:10 was charged on %s, admitted at %v: the day that ended", ids[i], at)
		case u.InputTokens == 0 && (u.OutputTokens != 0 || !u.Complete || u.Seen != nil):
			t.Fatalf("settlement %d on %s: %+v, want nothing charged", i, ids[i], u)
		}
	}
	if len(ids) != 4 || ids[1] != "req_2" || s[1].InputTokens != 0 || s[2].InputTokens != 101 || ids[2] != "req_3" {
		t.Fatalf("settled %v: %v, want req_2 (held across 05:00) at 0, then the response on req_3", ids, s)
	}
}

// A response that began before 05:00 and ends after it stays on the windows it was
// admitted in (ACCOUNTING.md: "a request admitted at 04:59:59 and finished after 05:00
// charges the old day"): only a response that begins after them is checked again.
func TestRealtimeResponseAcrossAWindowEndKeepsItsAdmission(t *testing.T) {
	up := &realtimeUpstream{in: 100, out: 50, hang: true}
	g, tr, url, clk := newClockedRealtimeEnv(t, up, 10)
	c, _ := openSession(t, url)
	say(t, c, `{"type":"response.create"}`)
	readUntil(t, c, "response.done")
	waitChecks(t, g.countingGate, 2)
	say(t, c, `{"type":"response.create"}`) // the second never ends
	readUntil(t, c, "Tolls are paid")
	clk.Set(time.Date(2026, 9, 14, 5, 10, 0, 0, time.UTC))
	say(t, c, `{"type":"input_audio_buffer.commit"}`) // a transcription during it: charged aside
	readUntil(t, c, "input_audio_transcription.completed")
	_ = c.Close(websocket.StatusNormalClosure, "")
	s := tr.settlements(t, 3)
	tr.mu.Lock()
	ids := append([]string(nil), tr.finishedIDs...)
	tr.mu.Unlock()
	if ids[2] != "req_2" || s[2].Complete || s[2].Seen == nil {
		t.Fatalf("settled %v: %+v, want the cut response last on req_2, admitted before 05:00", ids, s)
	}
}

// A member refused when a response begins after the held request's windows ended (a
// key revoked while the session was idle): the response, which the provider started and
// bills, is let finish and charged on a request opened without a check, and its end
// closes the session with 1008 and the refusal's code, as at any refusal.
func TestRealtimeRefusedAsAResponseBeginsAfterAWindowEnd(t *testing.T) {
	up := &realtimeUpstream{in: 100, out: 50}
	g, tr, url, clk := newClockedRealtimeEnv(t, up, 2)
	g.revoked = true
	c, _ := openSession(t, url)
	say(t, c, `{"type":"response.create"}`)
	readUntil(t, c, "response.done")
	waitChecks(t, g.countingGate, 2)

	clk.Set(time.Date(2026, 9, 14, 5, 10, 0, 0, time.UTC))
	say(t, c, `{"type":"response.create"}`)
	readUntil(t, c, "response.done") // not cut
	if ce, err := closeOf(c); err != nil || ce.Code != websocket.StatusPolicyViolation || ce.Reason == "" {
		t.Fatalf("closed with %v (%v), want 1008 and the refusal's code", ce, err)
	}
	s := tr.settlements(t, 3)
	tr.mu.Lock()
	ids := append([]string(nil), tr.finishedIDs...)
	tr.mu.Unlock()
	if ids[1] != "req_2" || s[1].InputTokens != 0 || ids[2] != "req_trailing_1" || s[2].InputTokens != 101 || !s[2].Complete {
		t.Fatalf("settled %v: %+v, want req_2 at 0 and the response on a trailing request", ids, s)
	}
	if at := g.admittedAt(ids[2]); !window.Of(window.Day, clk.Now()).Contains(at) {
		t.Fatalf("the trailing request was opened at %v", at)
	}
	time.Sleep(100 * time.Millisecond)
	if n := g.count(); n != 3 {
		t.Fatalf("%d checks, want 3: nothing checked after the refusal", n)
	}
}

// A Responses WebSocket session holds its idle request as a Realtime session does, and a
// response nobody asked for (no response.create, no steer: here a client event the
// provider answers with one) is charged on it. Held across 05:00 UTC, it was admitted in
// the windows that ended: since 2026-12-07 such a response that begins after them has
// the idle request settled at 0 and is charged on the next one, admitted as it began.
func TestResponsesWebSocketUnaskedResponseAfterAWindowEnd(t *testing.T) {
	up := &responsesUpstream{in: 1000, out: 100}
	g, tr, url, clk := newClockedRealtimeEnv(t, up, 10)
	c, _, err := dialRealtime(t, url+"/v1/responses", "tgk_good")
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	clk.Set(time.Date(2026, 9, 14, 5, 10, 0, 0, time.UTC))
	say(t, c, `{"type":"conversation.poke"}`) // no response.create: the provider answers it all the same
	readUntil(t, c, "response.completed")
	_ = c.Close(websocket.StatusNormalClosure, "")
	tr.settlements(t, 2)
	time.Sleep(100 * time.Millisecond)
	tr.mu.Lock()
	s, ids := append([]inflight.Usage(nil), tr.finished...), append([]string(nil), tr.finishedIDs...)
	tr.mu.Unlock()
	newDay := window.Of(window.Day, clk.Now())
	for i, u := range s {
		if u.InputTokens == 1000 && !newDay.Contains(g.admittedAt(ids[i])) {
			t.Fatalf("the response that began at 05:10 was charged on %s, admitted at %v: the day that ended", ids[i], g.admittedAt(ids[i]))
		}
	}
	if len(ids) != 3 || ids[0] != "req_1" || s[0].InputTokens != 0 || ids[1] != "req_2" || s[1].InputTokens != 1000 {
		t.Fatalf("settled %v: %+v, want the handshake's at 0, the response on req_2, req_3 at 0", ids, s)
	}
}
