package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	at "github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// A start batch does not wait for a settlement batch that holds the same member's
// tracking row (the two lanes used to serialise on it, a WAL flush per batch), but it
// does wait for a capture fence change, so a start is either committed before the fence
// moves or judged against the moved fence.
func TestStartsWaitForFenceChangesNotForSettlements(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 1)
	m := ms[0]
	now := e.Clock.Now()
	if r := start1(t, e, at.StartItem(at.ReqID(), org, m, now, 0)); r.Outcome != internalv1.StartOutcome_START_OUTCOME_RECORDED {
		t.Fatalf("first start: %v", r)
	}
	startAsync := func() <-chan *internalv1.StartResult { return startAsync(t, e, org, m, now) }
	begin := func() pgx.Tx { return beginTx(t, e) }

	// A settlement batch's lock, held open.
	tx := begin()
	st, err := store.ReadSettleState(ctx, tx, nil, []string{m}, nil, store.PriceLookup{}, now)
	if err != nil || len(st.Tracking) != 1 {
		t.Fatalf("settlement lock: %v %v", st.Tracking, err)
	}
	select {
	case r := <-startAsync():
		if r.GetOutcome() != internalv1.StartOutcome_START_OUTCOME_RECORDED {
			t.Fatalf("start beside a settlement: %v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a start waited for a settlement batch holding its member's tracking row")
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	// A fence change's lock, held open: the start waits until it ends.
	tx = begin()
	if rows, err := store.LockTracking(ctx, tx, []string{m}); err != nil || len(rows) != 1 {
		t.Fatalf("fence lock: %v %v", rows, err)
	}
	done := startAsync()
	select {
	case r := <-done:
		t.Fatalf("a start was recorded while a fence change held its member's row: %v", r)
	case <-time.After(300 * time.Millisecond):
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.GetOutcome() != internalv1.StartOutcome_START_OUTCOME_RECORDED {
			t.Fatalf("start after the fence lock: %v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the start did not go on after the fence change ended")
	}
	if _, pending, _, _, _ := e.Tracking(t, m); pending != 3 {
		t.Fatalf("pending %d, want 3", pending)
	}
	at.Check(t, e.Store)
}

// startAsync starts a request of member m in the background; its answer comes on the
// channel, which is closed without one when the call failed.
func startAsync(t *testing.T, e *at.Env, org, m string, now time.Time) <-chan *internalv1.StartResult {
	done := make(chan *internalv1.StartResult, 1)
	go func() {
		res, err := e.Ledger.Start(ctx, []*internalv1.StartItem{at.StartItem(at.ReqID(), org, m, now, 1)})
		if err != nil {
			t.Error(err)
			close(done)
			return
		}
		done <- res[0]
	}()
	return done
}

// beginTx begins a transaction of the test's own, to hold a lock; a failure must still
// end it, or the ledger's batch waiting behind it would never let the test stop.
func beginTx(t *testing.T, e *at.Env) pgx.Tx {
	t.Helper()
	tx, err := e.Store.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback(context.Background()) })
	return tx
}
