// Package throttle slows down repeated failures of one key (an email, a client address):
// after a few free failures each further one doubles the wait before the next attempt is
// heard. It keeps state in memory, per replica: it is a brake on password guessing, not an
// account lockout, so losing it on restart is acceptable. It must not block successes of
// other keys.
package throttle

import (
	"container/list"
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
	entries map[[32]byte]*list.Element
	// order holds the entries least recently failed first: a failure moves its key to
	// the back, so what has expired, or must go past MaxEntries, is at the front.
	order list.List
}

func keyOf(k string) [32]byte { return sha256.Sum256([]byte(k)) }

type entry struct {
	key      [32]byte
	failures int
	// pending counts the attempts Begin let go on that have not ended (End): each may
	// still be a failure.
	pending int
	last    time.Time
	until   time.Time
}

// MaxEntries is the most keys a limiter keeps (about 20 MB). Failures of distinct keys
// within the forgetting period are all live (a spray of emails, or of client addresses
// over IPv6): before 2026-12-03 every one was kept, without a bound, and past 100,000
// each failure walked them all under the lock. Past it the least recently failed key is
// forgotten: a brake, not a lockout, and a key that keeps failing is never the oldest.
const MaxEntries = 100_000

// New returns a limiter: free failures, then waits of base, 2*base, ... up to max.
func New(c clock.Clock, free int, base, max time.Duration) *Limiter {
	return &Limiter{clock: c, free: free, base: base, max: max, forgetting: 15 * time.Minute, entries: map[[32]byte]*list.Element{}}
}

// Wait tells how long the keys must still wait before another attempt; zero when none.
func (l *Limiter) Wait(keys ...string) time.Duration {
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	var longest time.Duration
	for _, k := range keys {
		if el := l.entries[keyOf(k)]; el != nil {
			if e := el.Value.(*entry); e.until.After(now) {
				longest = max(longest, e.until.Sub(now))
			}
		}
	}
	return longest
}

// Begin starts an attempt for keys and returns zero, or returns how long the keys must
// still wait and starts nothing. An attempt Begin started must be ended by End (after
// Fail or Succeed, when it failed or succeeded).
//
// An attempt under way counts as a failure until it ends: a key may have only as many
// under way as it has free failures left, and once those are spent one at a time.
// Checking the wait alone (Wait) let a burst of attempts sent at once all pass before
// the first of them failed: a hundred concurrent sign-ins with a hundred guessed
// passwords were all heard, where the brake allows five and then one per doubling wait.
func (l *Limiter) Begin(keys ...string) time.Duration {
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.forgetExpired(now)
	var longest time.Duration
	for _, k := range keys {
		el := l.entries[keyOf(k)]
		if el == nil {
			continue
		}
		e := el.Value.(*entry)
		if e.until.After(now) {
			longest = max(longest, e.until.Sub(now))
			continue
		}
		failures := e.failures
		if now.Sub(e.last) > l.forgetting {
			failures = 0
		}
		if e.pending > 0 && failures+e.pending >= l.free {
			longest = max(longest, l.base) // until an attempt under way ends
		}
	}
	if longest > 0 {
		return longest
	}
	for _, k := range keys {
		l.entry(keyOf(k)).pending++
	}
	return 0
}

// End ends an attempt Begin started.
func (l *Limiter) End(keys ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range keys {
		// Gone when forgotten meanwhile (Succeed, or MaxEntries): nothing to end.
		if el := l.entries[keyOf(k)]; el != nil {
			if e := el.Value.(*entry); e.pending > 0 {
				e.pending--
			}
		}
	}
}

// entry is key's entry, made (the most recent) when it has none.
func (l *Limiter) entry(k [32]byte) *entry {
	if el := l.entries[k]; el != nil {
		return el.Value.(*entry)
	}
	e := &entry{key: k}
	l.entries[k] = l.order.PushBack(e)
	if len(l.entries) > MaxEntries {
		l.remove(l.order.Front())
	}
	return e
}

// Fail records a failed attempt for each key.
func (l *Limiter) Fail(keys ...string) {
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.forgetExpired(now)
	for _, s := range keys {
		k := keyOf(s)
		var e *entry
		if el := l.entries[k]; el != nil {
			l.order.MoveToBack(el)
			e = el.Value.(*entry)
		} else {
			e = &entry{key: k}
			l.entries[k] = l.order.PushBack(e)
			if len(l.entries) > MaxEntries {
				l.remove(l.order.Front())
			}
		}
		if now.Sub(e.last) > l.forgetting {
			e.failures = 0
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
		if el := l.entries[keyOf(k)]; el != nil {
			l.remove(el)
		}
	}
}

// forgetExpired drops, from the front, the keys that no longer matter: no failure for
// the forgetting period and no wait left. It stops at the first that still matters,
// so a failure costs what it drops, not what the limiter holds.
func (l *Limiter) forgetExpired(now time.Time) {
	for el := l.order.Front(); el != nil; el = l.order.Front() {
		if e := el.Value.(*entry); now.Sub(e.last) <= l.forgetting || e.until.After(now) || e.pending > 0 {
			return
		}
		l.remove(el)
	}
}

func (l *Limiter) remove(el *list.Element) {
	delete(l.entries, el.Value.(*entry).key)
	l.order.Remove(el)
}
