package gate

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A check's calls context is made on first use and then bounds the calls by the
// caller's deadline less the margin; one first used after the check ended (a call that
// outlived it) is over; one never used costs no timer.
func TestLazyCalls(t *testing.T) {
	g := &Gate{}
	parent, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	pd, _ := parent.Deadline()

	c := &lazyCalls{g: g, parent: parent}
	if c.ctx != nil {
		t.Fatal("made before use")
	}
	d, ok := c.Deadline()
	if !ok || !d.Before(pd) || pd.Sub(d) > answerMargin {
		t.Fatalf("deadline %v (%v), want before the caller's %v by at most %v", d, ok, pd, answerMargin)
	}
	if c.Err() != nil || c.Value("k") != nil {
		t.Fatal("a live check's calls are over")
	}
	c.cancel()
	if !errors.Is(c.Err(), context.Canceled) {
		t.Fatalf("after the check: %v", c.Err())
	}

	unused := &lazyCalls{g: g, parent: parent}
	unused.cancel()
	if unused.stop != nil {
		t.Fatal("a check that made no call made a timer")
	}
	select {
	case <-unused.Done(): // used only after the check: over
	default:
		t.Fatal("calls first used after the check are not over")
	}
	if parent.Err() != nil {
		t.Fatal("the caller's context was cancelled")
	}
}
