package e2e_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/e2e/fakellm"
)

// cuttingUpstream serves fake, but breaks off the next cuts answers after their headers
// and half their body, as a provider whose connection drops mid-answer does (or a proxy
// between, or the gateway's own idle timeout).
type cuttingUpstream struct {
	fake *fakellm.Server
	// streamed: the cut answer announces no length, as a stream does (else its whole
	// length, which the half sent falls short of).
	streamed bool
	mu       sync.Mutex
	cuts     int
}

func (u *cuttingUpstream) cutNext(n int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.cuts = n
}

func (u *cuttingUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	cut := u.cuts > 0
	if cut {
		u.cuts--
	}
	u.mu.Unlock()
	if !cut {
		u.fake.ServeHTTP(w, r)
		return
	}
	whole := httptest.NewRecorder()
	u.fake.ServeHTTP(whole, r)
	body := whole.Body.Bytes()
	for k, v := range whole.Header() {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	if u.streamed {
		w.Header().Del("Content-Length")
	}
	w.WriteHeader(whole.Code)
	_, _ = w.Write(body[:len(body)/2])
	w.(http.Flusher).Flush()
	panic(http.ErrAbortHandler) // the connection is broken off
}

// TestSDKsMeetingACutAnswer: an answer the provider's connection breaks off half-way
// through its body (a JSON answer, not a stream), as the official SDKs meet it through
// the gateway. Anthropic's SDK (since 1.17.0) sends such a call again, within its retries,
// unless the answer said x-should-retry: false; OpenAI's fails the call. Whatever the
// SDK does, every attempt that reached the provider is charged: the cut one incomplete,
// for what it carried and the request's input (estimated: its usage was in the half not
// sent), the one answered whole exactly; the member's spend is their sum.
func TestSDKsMeetingACutAnswer(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)
	const inTok, outTok = 1_000, 100
	fake := &fakellm.Server{Snapshots: map[string]string{model: model + "-2024-07-18"},
		Usage: func(fakellm.Call) fakellm.Usage { return fakellm.Usage{InputTokens: inTok, OutputTokens: outTok} }}
	up := &cuttingUpstream{fake: fake}
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)
	s := startStack(t, gatewayEnv(srv.URL))
	o := s.setUpOrg(t)

	cases := []struct {
		script, model string
		whole         int64 // the cost of the answer received whole
		resends       bool  // the SDK sends the call again after the cut
	}{
		{"anthropic.mjs", claudeModel, catalogCostOf(t, claudeModel, inTok, outTok), true},
		{"openai.mjs", model, catalogCost(inTok, 0, outTok), false},
	}
	settled, used := 0, int64(0)
	for _, c := range cases {
		ok := t.Run(c.script, func(t *testing.T) {
			up.cutNext(1)
			before := len(fake.Calls())
			r := runSDK(t, dir, c.script, "json", s.gateway, o.key, c.model)
			calls := fake.Calls()[before:]
			want := 1
			if c.resends {
				want = 2
			}
			if len(calls) != want || r.OK != c.resends {
				t.Fatalf("the provider got %d calls, want %d; the SDK reported %+v", len(calls), want, r)
			}
			if c.resends && r.Text != fakellm.Text {
				t.Errorf("the answer sent again lost text: %+v", r)
			}
			cut := waitReceipt(t, s, calls[0].Header.Get("X-Service-Request-Id"))
			if cut["complete"] != false || cut.cost() <= 0 {
				t.Errorf("the cut answer's receipt %s: want incomplete, charged", cut)
			}
			settled++
			used += cut.cost()
			if c.resends {
				again := waitReceipt(t, s, calls[1].Header.Get("X-Service-Request-Id"))
				if again["complete"] != true || again.cost() != c.whole {
					t.Errorf("the answer sent again: receipt %s, want complete at %d", again, c.whole)
				}
				settled++
				used += again.cost()
			}
			t.Logf("cut answer charged %d micro-USD (%v, %v input / %v output tokens); whole %d",
				cut.cost(), cut["cost_basis"], cut["input_tokens"], cut["output_tokens"], c.whole)
		})
		if !ok {
			return
		}
	}
	s.waitUsed(t, o, settled, used)
}

// TestSDKsMeetingACutStream: a stream the provider's connection breaks off half-way
// reaches the official SDKs through the gateway broken off too, and each fails the call.
// Before, the gateway ended the cut stream as if whole (its chunked terminator): the
// Anthropic SDK returned the half answer as the complete one ("Tolls "), with no error
// and no retry, and OpenAI's failed only where the cut split an event (its JSON
// malformed), else it too took what came for the whole answer. The cut stream is
// charged, incomplete, what it carried.
func TestSDKsMeetingACutStream(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)
	fake := &fakellm.Server{Snapshots: map[string]string{model: model + "-2024-07-18"},
		Usage: func(fakellm.Call) fakellm.Usage { return fakellm.Usage{InputTokens: 1_000, OutputTokens: 100} }}
	up := &cuttingUpstream{fake: fake, streamed: true}
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)
	s := startStack(t, gatewayEnv(srv.URL))
	o := s.setUpOrg(t)
	for _, c := range []struct{ script, model string }{{"openai.mjs", model}, {"anthropic.mjs", claudeModel}} {
		t.Run(c.script, func(t *testing.T) {
			up.cutNext(1)
			before := len(fake.Calls())
			r := runSDK(t, dir, c.script, "stream", s.gateway, o.key, c.model)
			calls := fake.Calls()[before:]
			if r.OK || len(calls) != 1 {
				t.Fatalf("the provider got %d calls; the SDK reported %+v: want the call failed on the cut stream", len(calls), r)
			}
			cut := waitReceipt(t, s, calls[0].Header.Get("X-Service-Request-Id"))
			if cut["complete"] != false || cut.cost() <= 0 {
				t.Errorf("the cut stream's receipt %s: want incomplete, charged", cut)
			}
			t.Logf("the SDK reported %+v; the cut stream charged %d micro-USD", r, cut.cost())
		})
	}
}
