package e2e_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/e2e/fakellm"
)

// streamCutter serves fake, but breaks off its next answer after its headers and half
// its body, sent as a stream is (no announced length), as a provider whose connection
// drops mid-stream does.
type streamCutter struct {
	fake *fakellm.Server
	mu   sync.Mutex
	cut  bool
}

func (u *streamCutter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	cut := u.cut
	u.cut = false
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
	w.Header().Del("Content-Length")
	w.WriteHeader(whole.Code)
	_, _ = w.Write(body[:len(body)/2])
	w.(http.Flusher).Flush()
	panic(http.ErrAbortHandler) // the connection is broken off
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
	up := &streamCutter{fake: fake}
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)
	s := startStack(t, gatewayEnv(srv.URL))
	o := s.setUpOrg(t)
	for _, c := range []struct{ script, model string }{{"openai.mjs", model}, {"anthropic.mjs", claudeModel}} {
		t.Run(c.script, func(t *testing.T) {
			up.mu.Lock()
			up.cut = true
			up.mu.Unlock()
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
