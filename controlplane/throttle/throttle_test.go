package throttle

import (
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
