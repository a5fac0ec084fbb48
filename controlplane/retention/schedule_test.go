package retention_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	"github.com/tollgate-dev/tollgate/controlplane/metrics"
	"github.com/tollgate-dev/tollgate/controlplane/retention"
)

// schedules runs n schedules of interval on e (n control planes of one deployment, each
// with its own metrics) until the returned stop is called; applied says how many applied
// runs they made between them.
func schedules(t *testing.T, e *accountingtest.Env, n int, interval time.Duration) (applied func() float64, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(e.Ctx)
	var wg sync.WaitGroup
	ms := make([]*metrics.Metrics, n)
	for i := range ms {
		ms[i] = metrics.Discard()
		s := retention.Schedule{Deps: retention.Deps{Store: e.Store, Clock: e.Clock, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: ms[i]},
			Options: retention.Options{Age: retention.DefaultAge, Batch: 10}, Interval: interval}
		wg.Go(func() {
			if err := s.Run(ctx); err != nil {
				t.Errorf("schedule stopped with %v", err)
			}
		})
	}
	applied = func() float64 {
		var sum float64
		for _, m := range ms {
			sum += testutil.ToFloat64(m.RetentionRuns.WithLabelValues("applied"))
		}
		return sum
	}
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return applied, stop
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A control plane restarted more often than the interval (a rollout, a rescheduled or
// autoscaled pod) still runs retention: a run is due once the interval has passed since
// the deployment's last run began, whenever this control plane started. Until
// 2026-12-07 each control plane ran it one interval after it started, so with the
// chart's example of 24h and a pod restarted daily it never ran, and nothing said so.
func TestScheduleRunsADueRetentionSoonAfterItStarts(t *testing.T) {
	e := accountingtest.New(t, accountingtest.Options{})
	applied, stop := schedules(t, e, 1, 24*time.Hour)
	waitFor(t, "no applied run of a schedule of 24h started with none run before", func() bool { return applied() == 1 })
	stop()

	// Restarted an hour later: the last run began an hour ago, the next is not due.
	e.Clock.Advance(time.Hour)
	applied, stop = schedules(t, e, 1, 24*time.Hour)
	time.Sleep(300 * time.Millisecond)
	if n := applied(); n != 0 {
		t.Fatalf("%v applied runs an hour after the last one, with an interval of 24h", n)
	}
	stop()

	// Restarted a day after that run: it is due, and runs at once.
	e.Clock.Advance(23 * time.Hour)
	applied, _ = schedules(t, e, 1, 24*time.Hour)
	waitFor(t, "no applied run of a schedule restarted 24h after the last run", func() bool { return applied() == 1 })
}

// Several control planes with the same schedule run retention once per interval between
// them, not once each: until 2026-12-07 each ran its own, so N replicas made N passes
// over the tables per interval.
func TestSchedulesOfSeveralControlPlanesRunOncePerInterval(t *testing.T) {
	e := accountingtest.New(t, accountingtest.Options{})
	const interval = 20 * time.Millisecond
	applied, _ := schedules(t, e, 3, interval)
	waitFor(t, "no applied run", func() bool { return applied() >= 1 })
	time.Sleep(300 * time.Millisecond) // 15 intervals of real time; none of the clock's
	if n := applied(); n != 1 {
		t.Fatalf("%v applied runs by three control planes within one interval of the clock, want 1", n)
	}
	e.Clock.Advance(interval)
	waitFor(t, "no second run once the interval passed", func() bool { return applied() >= 2 })
	time.Sleep(300 * time.Millisecond)
	if n := applied(); n != 2 {
		t.Fatalf("%v applied runs within two intervals of the clock, want 2", n)
	}
}
