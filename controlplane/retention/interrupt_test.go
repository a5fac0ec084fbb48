package retention_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	"github.com/tollgate-dev/tollgate/controlplane/metrics"
	"github.com/tollgate-dev/tollgate/controlplane/retention"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// cancelOnFirstBatch is a log handler that cancels the run's context when the first
// batch is logged (an operator's Ctrl-C, or serve's SIGTERM, in the middle of an applied
// run), and keeps every record.
type cancelOnFirstBatch struct {
	cancel context.CancelFunc
	mu     *sync.Mutex
	recs   *[]slog.Record
}

func newCancelOnFirstBatch(cancel context.CancelFunc) cancelOnFirstBatch {
	return cancelOnFirstBatch{cancel: cancel, mu: &sync.Mutex{}, recs: &[]slog.Record{}}
}

func (h cancelOnFirstBatch) Enabled(context.Context, slog.Level) bool { return true }
func (h cancelOnFirstBatch) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "retention batch" {
		h.cancel()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	*h.recs = append(*h.recs, r.Clone())
	return nil
}
func (h cancelOnFirstBatch) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h cancelOnFirstBatch) WithGroup(string) slog.Handler      { return h }

func (h cancelOnFirstBatch) records() []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]slog.Record(nil), *h.recs...)
}

// oldSettledStarts makes n settled starts 100 days before the clock's new now.
func oldSettledStarts(t *testing.T, n int) fixture {
	e := accountingtest.New(t, accountingtest.Options{})
	org, ms := e.Org(t, 1)
	f := fixture{e: e, org: org, member: ms[0]}
	old := e.Clock.Now()
	for i := range n {
		id := fmt.Sprintf("req_old_%d", i)
		f.start(t, id, old)
		f.settle(t, &internalv1.SettleItem{RequestId: id, Model: "gpt-4o", UpstreamCostMicroUsd: accountingtest.Cost(10), Complete: true})
	}
	e.Clock.Set(old.Add(100 * 24 * time.Hour))
	return f
}

// An applied run cancelled after its first batch has removed data for good: it is still
// audited, with what it removed, interrupted: true and the error, and its partial report
// says so.
func TestInterruptedAppliedRunIsAuditedAsInterrupted(t *testing.T) {
	f := oldSettledStarts(t, 4)
	ctx, cancel := context.WithCancel(f.e.Ctx)
	defer cancel()
	r, err := retention.Run(ctx, retention.Deps{Store: f.e.Store, Clock: f.e.Clock, Log: slog.New(newCancelOnFirstBatch(cancel))},
		retention.Options{Age: retention.DefaultAge, Batch: 2, Apply: true})
	if err == nil {
		t.Fatal("the cancelled run reported no error")
	}
	pruned := f.count(t, `SELECT count(*) FROM usage_request_starts WHERE snapshot IS NULL`)
	if pruned == 0 || r.Starts.Removed != pruned {
		t.Fatalf("pruned %d start snapshot(s), the report says %d; the test needs a partial run", pruned, r.Starts.Removed)
	}
	var n, audited int64
	var interrupted bool
	var msg string
	if err := f.e.Store.Pool.QueryRow(f.e.Ctx, `SELECT count(*), coalesce(max((details->>'startsPruned')::bigint), 0), coalesce(bool_and((details->>'interrupted')::bool), false), coalesce(max(details->>'error'), '')
		FROM audit_events WHERE action = 'usage.retention.apply'`).Scan(&n, &audited, &interrupted, &msg); err != nil {
		t.Fatalf("%d audit event(s): %v", n, err)
	}
	if n != 1 || audited != pruned || !interrupted || !strings.Contains(msg, "context canceled") {
		t.Fatalf("audit events %d, startsPruned %d, interrupted %v, error %q; want 1, %d, true, the run's error", n, audited, interrupted, msg, pruned)
	}
	var out bytes.Buffer
	r.Write(&out)
	if s := out.String(); !r.Interrupted || !strings.Contains(s, "Interrupted") {
		t.Fatalf("the partial report does not say the run was interrupted:\n%s", s)
	}
}

// An applied run that fails before removing anything writes no audit event: there is
// nothing to account for.
func TestFailedAppliedRunThatRemovedNothingIsNotAudited(t *testing.T) {
	f := oldSettledStarts(t, 1)
	ctx, cancel := context.WithCancel(f.e.Ctx)
	cancel()
	if _, err := retention.Run(ctx, retention.Deps{Store: f.e.Store, Clock: f.e.Clock, Log: slog.New(slog.NewTextHandler(io.Discard, nil))},
		retention.Options{Age: retention.DefaultAge, Batch: 2, Apply: true}); err == nil {
		t.Fatal("a run on a cancelled context reported no error")
	}
	if n := f.count(t, `SELECT count(*) FROM audit_events WHERE action = 'usage.retention.apply'`); n != 0 {
		t.Fatalf("%d audit event(s) for a run that removed nothing", n)
	}
}

// serve's scheduled run cut short by serve stopping says so, at warn, with what it
// removed: the context being done must not silence it.
func TestScheduleLogsAnInterruptedRun(t *testing.T) {
	f := oldSettledStarts(t, 4)
	ctx, cancel := context.WithCancel(f.e.Ctx)
	defer cancel()
	h := newCancelOnFirstBatch(cancel)
	s := retention.Schedule{Deps: retention.Deps{Store: f.e.Store, Clock: f.e.Clock, Log: slog.New(h)},
		Options: retention.Options{Age: retention.DefaultAge, Batch: 2}, Interval: 10 * time.Millisecond}
	if err := s.Run(ctx); err != nil {
		t.Fatalf("schedule stopped with %v", err)
	}
	for _, r := range h.records() {
		if r.Level < slog.LevelWarn || !strings.Contains(r.Message, "interrupted") {
			continue
		}
		var removed int64 = -1
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "starts_removed" {
				removed = a.Value.Int64()
			}
			return true
		})
		if removed != 2 {
			t.Fatalf("the interrupted run's log says starts_removed %d, want 2 (one batch)", removed)
		}
		// The run cut short by serve stopping is due again at once, for the control
		// plane that comes next (a rollout), not an interval later.
		applied, _ := schedules(t, f.e, 1, time.Hour)
		waitFor(t, "no run of the next control plane after a run cut short", func() bool { return applied() == 1 })
		if n := f.count(t, `SELECT count(*) FROM usage_request_starts WHERE snapshot IS NOT NULL`); n != 0 {
			t.Fatalf("%d snapshots left after the next control plane's run", n)
		}
		return
	}
	t.Fatalf("no warning of the interrupted scheduled run; logged: %v", h.records())
}

// A scheduled run that removed something is audited; the runs after it, which find
// nothing more, are not.
func TestScheduledRunIsAuditedWhenItRemoves(t *testing.T) {
	f := oldSettledStarts(t, 1)
	ctx, cancel := context.WithCancel(f.e.Ctx)
	defer cancel()
	m := metrics.Discard()
	s := retention.Schedule{Deps: retention.Deps{Store: f.e.Store, Clock: f.e.Clock, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: m},
		Options: retention.Options{Age: retention.DefaultAge, Batch: 10}, Interval: 10 * time.Millisecond}
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(m.RetentionRuns.WithLabelValues("applied")) < 3 {
		if time.Now().After(deadline) {
			t.Fatal("fewer than 3 applied runs after 10 s with an interval of 10 ms")
		}
		time.Sleep(20 * time.Millisecond)
		f.e.Clock.Advance(10 * time.Millisecond) // a run is due once the interval passed on the clock
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("schedule stopped with %v", err)
	}
	if n := f.count(t, `SELECT count(*) FROM audit_events WHERE action = 'usage.retention.apply' AND (details->>'startsPruned')::int = 1`); n != 1 {
		t.Fatalf("%d audit events of the run that pruned the start, want 1", n)
	}
	if n := f.count(t, `SELECT count(*) FROM audit_events WHERE action = 'usage.retention.apply'`); n != 1 {
		t.Fatalf("%d retention audit events, want the one run that removed something", n)
	}
}
