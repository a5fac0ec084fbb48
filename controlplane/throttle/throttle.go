// Package throttle slows down repeated failures of one key (an email, a client address):
// after a few free failures each further one doubles the wait before the next attempt is
// heard. It keeps state in memory, per replica: it is a brake on password guessing, not an
// account lockout, so losing it on restart is acceptable. It must not block successes of
// other keys.
package throttle

import (
	"crypto/sha256"
	"sync"
	"time"

	"github.com/tollgate-dev/tollgate/pkg/clock"
)

// Limiter tracks failures per key.
type Limiter struct {
	clock      clock.Clock
	free       int           // failures allowed before waits begin
	base, max  time.Duration // first wait, longest wait
	forgetting time.Duration // a key with no failure for this long starts over

	mu sync.Mutex
	// entries are kept by the SHA-256 of their key: keys are the client's to choose (an
	// email as sent, up to the API's 1 MiB body), and each failure keeps its key for the
	// forgetting period, so a stored key costs 32 bytes however long it was.
	entries map[[32]byte]*entry
}

func keyOf(k string) [32]byte { return sha256.Sum256([]byte(k)) }

type entry struct {
	failures int
	last     time.Time
	until    time.Time
}

// New returns a limiter: free failures, then waits of base, 2*base, ... up to max.
func New(c clock.Clock, free int, base, max time.Duration) *Limiter {
	return &Limiter{clock: c, free: free, base: base, max: max, forgetting: 15 * time.Minute, entries: map[[32]byte]*entry{}}
}

// Wait tells how long the keys must still wait before another attempt; zero when none.
func (l *Limiter) Wait(keys ...string) time.Duration {
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	var longest time.Duration
	for _, k := range keys {
		if e := l.entries[keyOf(k)]; e != nil && e.until.After(now) {
			longest = max(longest, e.until.Sub(now))
		}
	}
	return longest
}

// Fail records a failed attempt for each key.
func (l *Limiter) Fail(keys ...string) {
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.entries) > 100_000 {
		l.sweep(now)
	}
	for _, s := range keys {
		k := keyOf(s)
		e := l.entries[k]
		if e == nil || now.Sub(e.last) > l.forgetting {
			e = &entry{}
			l.entries[k] = e
		}
		e.failures++
		e.last = now
		if over := e.failures - l.free; over > 0 {
			wait := l.base << min(over-1, 20)
			if wait > l.max || wait <= 0 {
				wait = l.max
			}
			e.until = now.Add(wait)
		}
	}
}

// Succeed forgets the failures of the keys. Pass only the keys a success vouches for
// (the account's, not the client address's: anyone can succeed on an account of their
// own between failures on others').
func (l *Limiter) Succeed(keys ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		delete(l.entries, keyOf(k))
	}
}

// sweep drops entries that no longer matter, bounding memory under a spray of keys.
func (l *Limiter) sweep(now time.Time) {
	for k, e := range l.entries {
		if now.Sub(e.last) > l.forgetting && !e.until.After(now) {
			delete(l.entries, k)
		}
	}
}
