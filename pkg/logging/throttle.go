package logging

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/tollgate-dev/tollgate/pkg/clock"
)

// DefaultThrottleEvery is how often a throttled line may repeat unless told otherwise.
const DefaultThrottleEvery = 10 * time.Second

// Throttle lets one line of a kind through per interval. A failure that repeats per
// request (the control plane or Redis unreachable, an upstream down, at thousands of
// requests a second) would otherwise write a line per request: a flood that buries the
// first cause and loads the log pipeline, while saying nothing the first line did not.
// The first occurrence after a quiet interval is logged at once; those within the
// interval after it are only counted, and the next line logged carries that count as
// "suppressed". The metrics of each call site count every occurrence.
//
// The zero value is ready: it lets a line through every DefaultThrottleEvery on the
// system clock. It is safe for concurrent use; the lock is taken only when something
// is to be logged, which is a failure path.
//
// Written here rather than taken from a library: golang.org/x/time/rate.Sometimes
// throttles but does not count what it left out, and a slog sampling handler would
// sample every line of the logger, not the one kind that repeats.
type Throttle struct {
	// Every is the shortest time between two lines; 0 means DefaultThrottleEvery.
	Every time.Duration
	// Clock tells the time; nil means the system clock.
	Clock clock.Clock

	mu         sync.Mutex
	next       time.Time // before this instant, occurrences are counted, not logged
	suppressed int64
}

// Allow reports whether this occurrence is to be logged and, when it is, how many
// occurrences were left out since the last line logged.
func (t *Throttle) Allow() (ok bool, suppressed int64) {
	now := t.now()
	every := t.Every
	if every <= 0 {
		every = DefaultThrottleEvery
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if now.Before(t.next) {
		t.suppressed++
		return false, 0
	}
	suppressed, t.suppressed = t.suppressed, 0
	t.next = now.Add(every)
	return true, suppressed
}

// Idle reports whether the interval since the last line logged has passed: the next
// occurrence would be logged. A caller keeping a throttle per key (a peer) forgets the
// idle ones.
func (t *Throttle) Idle() bool {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	return !now.Before(t.next)
}

func (t *Throttle) now() time.Time {
	if t.Clock != nil {
		return t.Clock.Now()
	}
	return time.Now()
}

// Log logs msg at level with args when Allow lets it through, adding "suppressed" (the
// occurrences left out before it) when there were any.
func (t *Throttle) Log(l *slog.Logger, level slog.Level, msg string, args ...any) {
	if !l.Enabled(context.Background(), level) {
		return
	}
	ok, n := t.Allow()
	if !ok {
		return
	}
	if n > 0 {
		args = append(args, "suppressed", n)
	}
	l.Log(context.Background(), level, msg, args...)
}
