package ledger_test

import (
	"testing"
	"time"

	at "github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// TestReportWithoutSnapshotConcurrentWithTheEventsCreation: a fail-open request's
// settlement with its snapshot (incomplete, cost 0) creates its event on one control
// plane while a report of the same request by id only (the real cost, 1,500 micro-USD)
// reaches another. Whichever transaction writes first, the report is charged once: it
// is decided against the event (or applied by the event's settlement), and no
// quarantine record is left open that reconciliation refuses (already_recorded) and no
// operator action can close.
func TestReportWithoutSnapshotConcurrentWithTheEventsCreation(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	e := at.New(t, at.Options{})
	other := secondLedger(t, e)
	org, ms := e.Org(t, 1)
	m := ms[0]
	now := e.Clock.Now()
	// Settle the member once, so that its tracking row exists.
	first := at.ReqID()
	if r := settle1(t, e, &internalv1.SettleItem{RequestId: first, OrganizationId: org, MemberId: m, Snapshot: at.Snapshot(org, m, now, 0),
		UpstreamCostMicroUsd: at.Cost(100), Complete: true}); r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED {
		t.Fatalf("first settlement: %v", r)
	}
	// A fence change holds the member's tracking row: the event's settlement inserts
	// the event, finds no quarantine record, and waits for the row.
	tx := beginTx(t, e)
	if rows, err := store.LockTracking(ctx, tx, []string{m}); err != nil || len(rows) != 1 {
		t.Fatalf("lock: %v %v", rows, err)
	}
	id := at.ReqID()
	created := make(chan *internalv1.SettleResult, 1)
	go func() {
		res, err := e.Ledger.Settle(ctx, []*internalv1.SettleItem{{RequestId: id, OrganizationId: org, MemberId: m,
			Snapshot: at.Snapshot(org, m, now, 0)}})
		if err != nil {
			t.Error(err)
			close(created)
			return
		}
		created <- res[0]
	}()
	waitLocks(t, e, 1, nil)
	// The report by id only, on the other control plane: it is answered, or waits for
	// the event's transaction.
	reported := make(chan *internalv1.SettleResult, 1)
	go func() {
		res, err := other.Settle(ctx, []*internalv1.SettleItem{{RequestId: id, OrganizationId: org, MemberId: m,
			UpstreamCostMicroUsd: at.Cost(1500), Complete: true}})
		if err != nil {
			t.Error(err)
			close(reported)
			return
		}
		reported <- res[0]
	}()
	waitLocks(t, e, 2, reported)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	c, r := <-created, <-reported
	if used := e.Used(t, org, m, window.Day, now); used != 1600 {
		t.Errorf("day used %d, want 1,600 (100 + the report's 1,500): the event was charged %v, the report answered %v", used, c, r)
	}
	if n := e.Int64s(t, `SELECT 'open', count(*) FROM usage_quarantined_settlements WHERE reconciled_at IS NULL`)["open"]; n != 0 {
		t.Errorf("%d quarantine records left open for a request whose event exists (report answered %v)", n, r)
	}
	at.Check(t, e.Store)
}

// waitLocks waits until n sessions of the test's database wait for a lock, or answered
// has an answer (put back).
func waitLocks(t *testing.T, e *at.Env, n int, answered chan *internalv1.SettleResult) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case r := <-answered:
			answered <- r
			return
		default:
		}
		var waiting int
		if err := e.Store.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions wait for a lock, want %d", waiting, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
