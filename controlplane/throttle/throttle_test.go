package throttle

import (
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
