package app_test

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/enforcer/internal/enforcertest"
)

// docs/enforcer.md, "Shutdown": a forward-auth check still running when the HTTP
// server's share of the shutdown runs out is cut, and whatever it started is settled
// before the enforcer stops. The server's Shutdown gave up and left it running: the
// server was never closed, so the check went on past the tracker's final settle-all and
// answered its proxy 200 (the request forwarded by an enforcer that had settled
// everything and was exiting), and its admission could land in the tracker after the
// settle-all, never settled: a durable start pending until recovery, holding its place
// under an in-flight cap for the guard's 20 minutes. Here the start is answered once the
// server's share of the shutdown (3s of 4s) has cut the check, and the second left must
// settle it. (The start took 1.8s, past the server's 1.5s share of a 2s shutdown: with the
// test binary stopped 300ms of every 500ms, the 200ms left for settling it were taken,
// and 3 runs of 3 failed "1 starts left pending at the control plane".)
func TestShutdownCutsACheckStillRunningAndSettlesItsStart(t *testing.T) {
	timeout := 4 * time.Second
	e := enforcertest.New(t, enforcertest.Options{Quiet: true, Config: func(c *appConfig) {
		c.ShutdownTimeout, c.CheckTimeout, c.StartDeadline = timeout, 10*time.Second, 10*time.Second
	}})
	capped := dayLimit(1*usd, true)
	capped.MaxInFlight = 1
	w := newMember(e, capped)
	hold := make(chan struct{})
	e.CP.StartHold.Store(&hold)
	type answer struct {
		status int
		err    error
	}
	answered := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest("POST", e.HTTPURL+"/check", nil)
		req.Header.Set("X-Api-Key", w.key)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			answered <- answer{err: err}
			return
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		answered <- answer{status: res.StatusCode}
	}()
	enforcertest.WaitFor(t, "the check's start sent", func() bool { return e.CP.CallCount("Start") == 1 })
	began := time.Now()
	stopped := make(chan time.Duration, 1)
	go func() { e.Stop(); stopped <- time.Since(began) }()
	var a answer
	select {
	case a = <-answered:
	case <-time.After(10 * time.Second):
		t.Fatal("the check was never answered nor cut")
	}
	close(hold) // the start is answered after the check was cut
	var took time.Duration
	select {
	case took = <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the enforcer never stopped")
	}
	t.Logf("stopped in %v; the check: status %d, error %v", took.Round(time.Millisecond), a.status, a.err)
	if a.err == nil && a.status == 200 {
		t.Fatalf("the check was answered 200 after the HTTP server's shutdown gave up on it (stopped in %v): admitted by an enforcer about to exit",
			took.Round(time.Millisecond))
	}
	if n := e.Enforcer.Tracker.Len(); n != 0 {
		t.Fatalf("%d admitted requests left unsettled in the tracker", n)
	}
	if p := e.CP.Pending(w.member); p != 0 {
		t.Fatalf("%d starts left pending at the control plane", p)
	}
	if took > timeout+500*time.Millisecond {
		t.Fatalf("shutdown took %v, past its %v deadline", took.Round(time.Millisecond), timeout)
	}
}
