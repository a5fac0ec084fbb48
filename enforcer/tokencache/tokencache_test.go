package tokencache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fake is a token endpoint: each fetch issues "Bearer t-N" living lifetime, unless
// fail is set; a fetch waits while gate is not nil.
type fake struct {
	mu       sync.Mutex
	n        int
	lifetime time.Duration
	fail     bool
	gate     chan struct{}
	now      func() time.Time
}

func (f *fake) fetch(ctx context.Context) (string, time.Time, error) {
	f.mu.Lock()
	gate := f.gate
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return "", time.Time{}, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	if f.fail {
		return "", time.Time{}, errors.New("endpoint down")
	}
	return fmt.Sprintf("Bearer t-%d", f.n), f.now().Add(f.lifetime), nil
}

func (f *fake) fetches() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

// clock is a settable now.
type clock struct{ t atomic.Int64 }

func (c *clock) now() time.Time          { return time.Unix(0, c.t.Load()) }
func (c *clock) advance(d time.Duration) { c.t.Add(int64(d)) }

func setup(lifetime time.Duration) (*Cache, *fake, *clock) {
	clk := &clock{}
	clk.t.Store(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC).UnixNano())
	f := &fake{lifetime: lifetime, now: clk.now}
	c := New(f.fetch, time.Second, 5*time.Minute)
	c.now = clk.now
	return c, f, clk
}

func value(t *testing.T, c *Cache) string {
	t.Helper()
	v, err := c.Value(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// waitSettled waits for the fetch in flight, if any, to have stored what it got: a
// no-op on the cache's flight joins it, or runs at once when none is.
func waitSettled(c *Cache) {
	<-c.fetches.DoChan("", func() (any, error) { return nil, nil })
}

// waitFetches waits for the background fetch to have run n fetches in all.
func waitFetches(t *testing.T, f *fake, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); f.fetches() < n; {
		if time.Now().After(deadline) {
			t.Fatalf("%d fetches, want %d", f.fetches(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// One fetch serves every request until the token nears its expiry; then the next
// request is served the old token and starts the renewal in the background; the
// renewed token serves the next ones.
func TestRenewsAheadInTheBackground(t *testing.T) {
	c, f, clk := setup(time.Hour)
	for range 3 {
		if v := value(t, c); v != "Bearer t-1" {
			t.Fatalf("got %q", v)
		}
	}
	clk.advance(54 * time.Minute) // 6 minutes left: fresh
	if v := value(t, c); v != "Bearer t-1" || f.fetches() != 1 {
		t.Fatalf("got %q after %d fetches", v, f.fetches())
	}
	clk.advance(2 * time.Minute) // 4 minutes left: renew
	if v := value(t, c); v != "Bearer t-1" {
		t.Fatalf("the renewing request got %q, want the valid token at once", v)
	}
	waitFetches(t, f, 2)
	waitSettled(c) // the renewal stores its token after the fetch returns
	if v := value(t, c); v != "Bearer t-2" {
		t.Fatalf("after the renewal: %q", v)
	}
}

// A token that lives less than twice the renewal window is renewed halfway through
// its life, not at every request.
func TestShortLivedTokenRenewedHalfway(t *testing.T) {
	c, f, clk := setup(4 * time.Minute)
	value(t, c)
	clk.advance(time.Minute)
	for range 5 {
		value(t, c)
	}
	if f.fetches() != 1 {
		t.Fatalf("%d fetches before half the token's life", f.fetches())
	}
	clk.advance(90 * time.Second)
	value(t, c)
	waitFetches(t, f, 2)
}

// A renewal that fails leaves the valid token in service and is not tried again before
// a timeout's length; an expired token is never served: the requests then wait for a
// fetch, and get its error.
func TestFailures(t *testing.T) {
	c, f, clk := setup(time.Hour)
	value(t, c)
	f.fail = true
	clk.advance(56 * time.Minute)
	if v := value(t, c); v != "Bearer t-1" {
		t.Fatalf("got %q", v)
	}
	waitFetches(t, f, 2)
	waitSettled(c) // the failed renewal stored its hold-off
	for range 5 {
		if v := value(t, c); v != "Bearer t-1" {
			t.Fatalf("got %q", v)
		}
	}
	if f.fetches() != 2 {
		t.Fatalf("%d fetches: a failed renewal was tried again at once", f.fetches())
	}
	clk.advance(2 * time.Second) // past the hold-off
	value(t, c)
	waitFetches(t, f, 3)
	// Before the clock moves on: a renewal that stored its failure after it would hold
	// the requests from the old clock's time, and a request would join it.
	waitSettled(c)
	clk.advance(5 * time.Minute) // expired
	if _, err := c.Value(context.Background()); err == nil || err.Error() != "endpoint down" {
		t.Fatalf("an expired token: err %v", err)
	}
	// For a second the failure answers without asking the endpoint again.
	asked := f.fetches()
	for range 5 {
		if _, err := c.Value(context.Background()); err == nil || err.Error() != "endpoint down" {
			t.Fatalf("within the failure's hold: err %v", err)
		}
	}
	if f.fetches() != asked {
		t.Fatalf("%d fetches within the failure's hold, want none", f.fetches()-asked)
	}
	f.fail = false
	if _, err := c.Value(context.Background()); err == nil {
		t.Fatal("the endpoint was asked within the failure's hold")
	}
	clk.advance(FailureHold)
	if v := value(t, c); v == "Bearer t-1" || v == "" {
		t.Fatalf("after the endpoint recovered: %q", v)
	}
}

// With no valid token, concurrent requests share one fetch, each waiting no longer than
// its own context; the fetch, bounded by the timeout, is not the caller's.
func TestWaitersShareOneFetch(t *testing.T) {
	c, f, _ := setup(time.Hour)
	f.gate = make(chan struct{})
	const callers = 8
	errs := make(chan error, callers)
	for range callers {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			_, err := c.Value(ctx)
			errs <- err
		}()
	}
	for range callers {
		if err := <-errs; !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err %v, want the caller's deadline", err)
		}
	}
	f.mu.Lock()
	close(f.gate)
	f.gate = nil
	f.mu.Unlock()
	if v := value(t, c); v != "Bearer t-1" || f.fetches() != 1 {
		t.Fatalf("got %q after %d fetches, want the one shared fetch's token", v, f.fetches())
	}
}

// A flight that starts just after another ended (a request that found no credential,
// then was delayed while the other flight stored one) serves what that one left
// instead of asking again: the credential, or the failure while it is held.
func TestFlightAfterAnotherServesWhatItLeft(t *testing.T) {
	c, f, clk := setup(time.Hour)
	if v := value(t, c); v != "Bearer t-1" {
		t.Fatalf("first value %q", v)
	}
	if v, err := c.fetchOnce(); v != "Bearer t-1" || err != nil || f.fetches() != 1 {
		t.Fatalf("a late flight answered %v, %v after %d fetches, want the stored token after one", v, err, f.fetches())
	}
	// Due for renewal: a flight fetches.
	clk.advance(56 * time.Minute)
	if v, err := c.fetchOnce(); v != "Bearer t-2" || err != nil || f.fetches() != 2 {
		t.Fatalf("a flight due for renewal answered %v, %v after %d fetches", v, err, f.fetches())
	}
	// A failure is held for its second: a late flight answers it too.
	clk.advance(2 * time.Hour)
	f.fail = true
	if _, err := c.Value(context.Background()); err == nil {
		t.Fatal("the failing endpoint gave a token")
	}
	asked := f.fetches()
	if _, err := c.fetchOnce(); err == nil || f.fetches() != asked {
		t.Fatalf("a late flight within the failure's hold: err %v, %d more fetches", err, f.fetches()-asked)
	}
}

// The hot path: a fresh token.
func BenchmarkValue(b *testing.B) {
	c, _, _ := setup(time.Hour)
	ctx := context.Background()
	if _, err := c.Value(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Value(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
