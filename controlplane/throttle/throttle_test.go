package throttle

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/pkg/clock"
)

func TestBackoffDoublesAndResets(t *testing.T) {
	c := clock.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l := New(c, 3, time.Second, 8*time.Second)
	for i := 0; i < 3; i++ {
		l.Fail("a")
		if w := l.Wait("a"); w != 0 {
			t.Fatalf("free failure %d already waits %v", i+1, w)
		}
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second}
	for i, w := range want {
		l.Fail("a")
		if got := l.Wait("a"); got != w {
			t.Fatalf("failure %d: wait %v, want %v", i+4, got, w)
		}
	}
	if got := l.Wait("b", "a"); got != 8*time.Second {
		t.Fatalf("longest of several keys: %v", got)
	}
	if got := l.Wait("b"); got != 0 {
		t.Fatalf("another key is slowed down: %v", got)
	}
	c.Advance(8 * time.Second)
	if got := l.Wait("a"); got != 0 {
		t.Fatalf("wait not over: %v", got)
	}
	l.Succeed("a")
	l.Fail("a")
	if got := l.Wait("a"); got != 0 {
		t.Fatalf("success did not reset: %v", got)
	}
}

// A key is the client's to choose (sign-in keys on the email as sent, up to the API's
// 1 MiB body): each failure keeps its key for the forgetting period, so a stored key must
// cost a fixed size however long the key is, or a few thousand failed sign-ins with
// megabyte "emails" hold gigabytes. Before 2026-12-03 the key was kept as sent.
func TestAKeyCostsAFixedSizeHoweverLong(t *testing.T) {
	c := clock.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l := New(c, 3, time.Second, 8*time.Second)
	for i := range 3 {
		l.Fail(strings.Repeat(string(rune('a'+i)), 1<<20), "addr:192.0.2.1")
	}
	if len(l.entries) != 4 {
		t.Fatalf("%d entries, want 4", len(l.entries))
	}
	for k := range l.entries {
		if len(k) > 64 {
			t.Fatalf("a key of %d bytes is kept", len(k))
		}
	}
	// Keys still name what they named.
	long := strings.Repeat("a", 1<<20)
	for range 3 {
		l.Fail(long)
	}
	if l.Wait(long) == 0 || l.Wait(strings.Repeat("b", 1<<20)) != 0 {
		t.Fatal("hashed keys do not keep their own counts")
	}
}

// Failures of distinct keys within the forgetting period (a spray of emails, or of
// client addresses over IPv6) are all live, so a sweep frees none of them: before
// 2026-12-03 the limiter kept every one (memory without a bound) and, past 100,000,
// walked them all under its lock on every failure. It keeps at most MaxEntries, the
// least recently failed forgotten first, and a key failing again is kept.
func TestLiveKeysAreBounded(t *testing.T) {
	c := clock.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l := New(c, 3, time.Second, 8*time.Second)
	for range 4 {
		l.Fail("victim@example.com") // over its free failures: it waits
	}
	for i := range MaxEntries + MaxEntries/2 {
		if i%1000 == 0 {
			l.Fail("victim@example.com") // still failing, so still kept
			c.Advance(time.Millisecond)
		}
		l.Fail("spray-" + strconv.Itoa(i))
	}
	if n := len(l.entries); n > MaxEntries {
		t.Fatalf("%d entries kept, want at most %d", n, MaxEntries)
	}
	if l.Wait("victim@example.com") == 0 {
		t.Fatal("the key that kept failing was forgotten")
	}
	if l.Wait("spray-0") != 0 || len(l.entries) < MaxEntries/2 {
		t.Fatalf("the oldest key is kept (or too few: %d)", len(l.entries))
	}
	// Expired entries go first, whatever the bound.
	c.Advance(time.Hour)
	l.Fail("late")
	if n := len(l.entries); n != 1 {
		t.Fatalf("%d entries after every other key expired, want 1", n)
	}
}

// BenchmarkFailAmongManyLiveKeys is a failure's cost when the limiter is full of live
// keys (go test -bench FailAmong ./controlplane/throttle).
func BenchmarkFailAmongManyLiveKeys(b *testing.B) {
	c := clock.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l := New(c, 3, time.Second, 8*time.Second)
	for i := range 150_000 {
		l.Fail("spray-" + strconv.Itoa(i))
	}
	b.ResetTimer()
	for i := range b.N {
		l.Fail("more-" + strconv.Itoa(i))
	}
}

// An attempt under way counts as a failure until it ends: before, Begin's check (then
// Wait) saw only the failures recorded, so a burst of sign-ins sent at once, each
// hashing its guessed password before any of them failed, were all heard; a hundred
// concurrent guesses at one account's password got a hundred answers, where the brake
// allows five and then one per doubling wait.
func TestAttemptsUnderWayCountAsFailures(t *testing.T) {
	c := clock.NewManual(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l := New(c, 3, time.Second, 8*time.Second)
	for i := range 3 {
		if w := l.Begin("email:a", "addr:x"); w != 0 {
			t.Fatalf("free attempt %d waits %v", i+1, w)
		}
	}
	if w := l.Begin("email:a", "addr:y"); w == 0 {
		t.Fatal("a fourth attempt at one email began while three were under way, with no free failure left")
	}
	if w := l.Begin("email:b", "addr:x"); w == 0 {
		t.Fatal("a fourth attempt from one address began while three were under way, with no free failure left")
	}
	if w := l.Begin("email:b", "addr:y"); w != 0 {
		t.Fatalf("other keys wait %v", w)
	}
	l.End("email:b", "addr:y")

	// One succeeds: its place is free again, and the email's count starts over.
	l.Succeed("email:a")
	l.End("email:a", "addr:x")
	if w := l.Begin("email:c", "addr:x"); w != 0 {
		t.Fatalf("an ended attempt still counts: %v", w)
	}
	// The other two fail, and the new one: the address has spent its free failures.
	for range 2 {
		l.Fail("email:a", "addr:x")
		l.End("email:a", "addr:x")
	}
	l.Fail("email:c", "addr:x")
	l.End("email:c", "addr:x")
	if w := l.Begin("email:d", "addr:x"); w != 0 {
		t.Fatalf("the last free failure's place waits %v", w)
	}
	l.Fail("email:d", "addr:x")
	l.End("email:d", "addr:x")
	if w := l.Begin("email:d", "addr:x"); w != time.Second {
		t.Fatalf("after its free failures the address waits %v, want 1s", w)
	}
	// Once the wait is over, one attempt at a time.
	c.Advance(time.Second)
	if w := l.Begin("email:d", "addr:x"); w != 0 {
		t.Fatalf("after the wait: %v", w)
	}
	if w := l.Begin("email:e", "addr:x"); w == 0 {
		t.Fatal("a second attempt began beside one under way after the free failures were spent")
	}
	l.End("email:d", "addr:x")
	if w := l.Begin("email:e", "addr:x"); w != 0 {
		t.Fatalf("the attempt under way ended, yet the next waits %v", w)
	}
	l.End("email:e", "addr:x")

	// Ended attempts leave nothing behind that stops a key's state from being forgotten.
	c.Advance(time.Hour)
	l.Fail("z")
	if len(l.entries) != 1 {
		t.Fatalf("%d entries after an hour, want only the new failure's", len(l.entries))
	}
}
