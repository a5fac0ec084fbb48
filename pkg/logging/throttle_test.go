package logging_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/pkg/clock"
	"github.com/tollgate-dev/tollgate/pkg/logging"
)

// The first occurrence is logged; those within the interval after it are counted, and
// the first one after the interval is logged with that count; a quiet interval starts
// afresh with nothing suppressed.
func TestThrottleLogsOncePerIntervalAndCountsTheRest(t *testing.T) {
	clk := clock.NewManual(time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC))
	th := &logging.Throttle{Every: 10 * time.Second, Clock: clk}
	type step struct {
		advance    time.Duration
		ok         bool
		suppressed int64
	}
	steps := []step{
		{0, true, 0},
		{time.Second, false, 0},
		{time.Second, false, 0},
		{7 * time.Second, false, 0}, // 9 s after the first line
		{time.Second, true, 3},      // 10 s: three were left out
		{0, false, 0},               // the same instant
		{time.Minute, true, 1},      // long after: the one left out is still told
		{time.Minute, true, 0},      // a quiet interval: nothing left out
	}
	for i, s := range steps {
		clk.Set(clk.Now().Add(s.advance))
		ok, n := th.Allow()
		if ok != s.ok || n != s.suppressed {
			t.Errorf("step %d: Allow() = %v, %d; want %v, %d", i, ok, n, s.ok, s.suppressed)
		}
	}
}

// Log writes the line with its count of suppressed occurrences, and nothing for those
// it suppresses; concurrent callers share one throttle.
func TestThrottleLogAddsTheSuppressedCount(t *testing.T) {
	clk := clock.NewManual(time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC))
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	th := &logging.Throttle{Every: time.Minute, Clock: clk}
	var wg sync.WaitGroup
	for range 100 {
		wg.Go(func() { th.Log(log, slog.LevelWarn, "start failed", "reason", "deadline") })
	}
	wg.Wait()
	clk.Set(clk.Now().Add(time.Minute))
	th.Log(log, slog.LevelWarn, "start failed", "reason", "controlplane")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("logged %d lines, want 2:\n%s", len(lines), buf.String())
	}
	if !strings.Contains(lines[0], "reason=deadline") || strings.Contains(lines[0], "suppressed") {
		t.Errorf("first line %q: want the first occurrence, without a count", lines[0])
	}
	if !strings.Contains(lines[1], "reason=controlplane") || !strings.HasSuffix(lines[1], "suppressed=99") {
		t.Errorf("second line %q: want suppressed=99", lines[1])
	}
}

// A level the logger does not write is neither logged nor counted.
func TestThrottleLogBelowTheLevelCountsNothing(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelError}))
	th := &logging.Throttle{}
	th.Log(log, slog.LevelWarn, "quiet")
	if ok, n := th.Allow(); !ok || n != 0 || buf.Len() != 0 {
		t.Errorf("after a disabled line: Allow() = %v, %d, log %q; want true, 0, nothing", ok, n, buf.String())
	}
}

// Idle tells whether the next occurrence would be logged: before any line, and once the
// interval since the last one has passed.
func TestThrottleIdle(t *testing.T) {
	clk := clock.NewManual(time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC))
	th := &logging.Throttle{Every: 10 * time.Second, Clock: clk}
	if !th.Idle() {
		t.Fatal("a fresh throttle is not idle")
	}
	th.Allow()
	clk.Set(clk.Now().Add(9 * time.Second))
	if th.Idle() {
		t.Fatal("idle 9 s after a line, with a 10 s interval")
	}
	clk.Set(clk.Now().Add(time.Second))
	if !th.Idle() {
		t.Fatal("not idle once the interval passed")
	}
}
