package lifecycle_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/pkg/lifecycle"
)

// wait runs until ctx ends, then records its name.
func wait(name string, mu *sync.Mutex, order *[]string, ret error) func(context.Context) error {
	return func(ctx context.Context) error {
		<-ctx.Done()
		mu.Lock()
		*order = append(*order, name)
		mu.Unlock()
		if ret != nil {
			return ret
		}
		return ctx.Err()
	}
}

func TestLoopOutlivesTheProgramContextUntilStopped(t *testing.T) {
	type key struct{}
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
	var sawValue bool
	l := lifecycle.Go(parent, "loop", func(ctx context.Context) error {
		sawValue = ctx.Value(key{}) == "v"
		<-ctx.Done()
		return ctx.Err()
	})
	cancel()
	select {
	case <-l.Done():
		t.Fatal("the loop ended with the program's context")
	case <-time.After(20 * time.Millisecond):
	}
	if err := l.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if err := l.Stop(); err != nil {
		t.Fatalf("second stop: %v", err)
	}
	if !sawValue {
		t.Fatal("the loop's context lost the program context's values")
	}
}

func TestStopReportsFailures(t *testing.T) {
	boom := errors.New("boom")
	l := lifecycle.Go(context.Background(), "ledger", func(ctx context.Context) error { <-ctx.Done(); return boom })
	if err := l.Stop(); !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "ledger: ") {
		t.Fatalf("err %v", err)
	}
}

func TestGroupStopsInReverseAndReportsEarlyExit(t *testing.T) {
	var mu sync.Mutex
	var order []string
	var g lifecycle.Group
	first := g.Go(context.Background(), "first", wait("first", &mu, &order, nil))
	g.Go(context.Background(), "second", wait("second", &mu, &order, nil))
	g.Go(context.Background(), "third", wait("third", &mu, &order, nil))
	// A shutdown stops one loop by name first; StopAll stops the rest, newest first.
	if err := first.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := g.StopAll(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(order, ","); got != "first,third,second" {
		t.Fatalf("stop order %s", got)
	}
	select {
	case err := <-g.Exited():
		t.Fatalf("stopped loops reported as exited: %v", err)
	default:
	}

	// The first loop to return by itself is reported by Exited, the others by StopAll;
	// none twice.
	var g2 lifecycle.Group
	g2.Go(context.Background(), "quitter", func(context.Context) error { return nil })
	g2.Go(context.Background(), "failer", func(ctx context.Context) error { <-ctx.Done(); return errors.New("redis gone") })
	select {
	case err := <-g2.Exited():
		if err.Error() != "quitter: stopped by itself" {
			t.Fatalf("exit %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("an early exit was not reported")
	}
	err := g2.StopAll()
	if err == nil || err.Error() != "failer: redis gone" {
		t.Fatalf("StopAll %v", err)
	}
}

// WaitForStop returns nil on a plain stop, and the failure of a server or of a loop that
// stopped by itself.
func TestWaitForStop(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var none lifecycle.Group
	if err := lifecycle.WaitForStop(ctx, make(chan error), &none, log); err != nil {
		t.Fatalf("plain stop: %v", err)
	}
	failed := make(chan error, 1)
	failed <- errors.New("listener closed")
	if err := lifecycle.WaitForStop(context.Background(), failed, &none, log); err == nil || err.Error() != "listener closed" {
		t.Fatalf("server failure: %v", err)
	}
	var loops lifecycle.Group
	loops.Go(context.Background(), "quitter", func(context.Context) error { return errors.New("gave up") })
	if err := lifecycle.WaitForStop(context.Background(), make(chan error), &loops, log); err == nil {
		t.Fatal("a loop that stopped by itself was not reported")
	}
}

// Every runs its task once an interval, not at once, and returns nil when its context
// ends.
func TestEvery(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var n atomic.Int32
	done := make(chan error, 1)
	started := time.Now()
	go func() {
		done <- lifecycle.Every(ctx, 20*time.Millisecond, func(context.Context) {
			if n.Add(1) == 1 && time.Since(started) < 15*time.Millisecond {
				t.Error("the task ran before one interval had passed")
			}
		})
	}()
	for n.Load() < 3 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Every returned %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Every did not return when its context ended")
	}
}

func TestValidateShutdownDelay(t *testing.T) {
	for _, tc := range []struct {
		name           string
		delay, timeout time.Duration
		problem        string // "" when valid
	}{
		{"the default", lifecycle.DefaultShutdownDelay, 20 * time.Second, ""},
		{"off", 0, time.Second, ""},
		{"negative", -time.Second, 20 * time.Second, "must not be negative"},
		{"the whole timeout", 5 * time.Second, 5 * time.Second, "5s must be below TOLLGATE_SHUTDOWN_TIMEOUT (5s)"},
		{"past the timeout", 5 * time.Second, 2 * time.Second, "5s must be below TOLLGATE_SHUTDOWN_TIMEOUT (2s)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := lifecycle.ValidateShutdownDelay(tc.delay, tc.timeout)
			if (tc.problem == "") != (got == "") || !strings.Contains(got, tc.problem) {
				t.Fatalf("%q, want %q", got, tc.problem)
			}
		})
	}
}

// A delay nobody set fits a short timeout (a quarter of it): a TOLLGATE_SHUTDOWN_TIMEOUT
// of 5s or less was valid before the delay existed. A delay someone set is kept, to be
// checked as given.
func TestFitDefaultDelay(t *testing.T) {
	d := lifecycle.DefaultShutdownDelay
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		set     bool
		want    time.Duration
	}{
		{"the default timeout", 20 * time.Second, false, d},
		{"a timeout of the default delay", 5 * time.Second, false, 1250 * time.Millisecond},
		{"a short timeout", 3 * time.Second, false, 750 * time.Millisecond},
		{"set, kept to be refused", 3 * time.Second, true, d},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := lifecycle.FitDefaultDelay(d, tc.timeout, tc.set)
			if got != tc.want {
				t.Fatalf("%v, want %v", got, tc.want)
			}
			if !tc.set && lifecycle.ValidateShutdownDelay(got, tc.timeout) != "" {
				t.Fatalf("the fitted delay %v is refused with a %v timeout", got, tc.timeout)
			}
		})
	}
}
