package ledger_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	at "github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// TestVoidOfAStartStillBeingWritten: an enforcer whose guarded start call failed (its
// deadline passed while the start's batch waited for the member's row) voids the start,
// since the request will not be forwarded (gate.voidFailed). The void may reach the
// control plane while that batch is still open; when the batch then commits, the start
// must not stay pending, holding its reservation and its place under the cap.
func TestVoidOfAStartStillBeingWritten(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 1)
	m := ms[0]
	now := e.Clock.Now()
	if r := start1(t, e, guardedStart(at.ReqID(), org, m, now, 1_000, 5)); r.Outcome != internalv1.StartOutcome_START_OUTCOME_RECORDED {
		t.Fatalf("first start: %v", r)
	}
	// A fence change holds the member's tracking row: the next guarded start's batch
	// inserts its start and waits for the row.
	tx := beginTx(t, e)
	if rows, err := store.LockTracking(ctx, tx, []string{m}); err != nil || len(rows) != 1 {
		t.Fatalf("lock: %v %v", rows, err)
	}
	id := at.ReqID()
	callCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := e.Ledger.Start(callCtx, []*internalv1.StartItem{guardedStart(id, org, m, now, 1_000, 5)}); err == nil {
		t.Fatal("the start was answered while its member's row was held")
	}
	// The enforcer's void, while the batch is still open (it may wait for the batch to
	// end, which waits for the row: released below).
	voided := make(chan *internalv1.SettleResult, 1)
	go func() {
		res, err := e.Ledger.Settle(ctx, []*internalv1.SettleItem{void(id, org, m)})
		if err != nil {
			t.Error(err)
			close(voided)
			return
		}
		voided <- res[0]
	}()
	// Let the void reach the database before the batch can go on: it is answered
	// (having found nothing to void), or it waits for the start's batch (two sessions
	// of the test's database then wait for a lock: the start's and the void's).
	deadline := time.Now().Add(10 * time.Second)
	for waiting := 0; waiting < 2; {
		select {
		case r := <-voided:
			voided <- r
			waiting = 2
			continue
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the void was neither answered nor waiting")
		}
		if err := e.Store.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if r := <-voided; r.GetOutcome() != internalv1.SettleOutcome_SETTLE_OUTCOME_VOIDED {
		t.Fatalf("void: %v", r)
	}
	// The start's batch goes on; wait until it is done with the member (a start after it
	// takes the same lock).
	if r := start1(t, e, guardedStart(at.ReqID(), org, m, now, 1_000, 5)); r.Outcome != internalv1.StartOutcome_START_OUTCOME_RECORDED {
		t.Fatalf("later start: %v", r)
	}
	var state string
	err := e.Store.Pool.QueryRow(ctx, `SELECT state FROM usage_request_starts WHERE request_id = $1`, id).Scan(&state)
	if err == nil {
		t.Fatalf("the voided start is %s after its batch committed: it holds its reservation and its place under the cap", state)
	}
	at.Check(t, e.Store)
}

// TestStartRecordedAfterItsVoid: the void of a failed guarded start can commit before
// that start's batch has written its row at all (the batch waited for a connection, ran
// again after losing one, or runs on another control plane). The start recorded after
// its void must not stay pending, holding its reservation and its place under the
// member's cap until abandonment recovery; a void naming another member voids nothing.
func TestStartRecordedAfterItsVoid(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 2)
	m, other := ms[0], ms[1]
	now := e.Clock.Now()
	id := at.ReqID()
	if r := settle1(t, e, void(id, org, m)); r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_VOIDED {
		t.Fatalf("void: %v", r)
	}
	if r := start1(t, e, guardedStart(id, org, m, now, 90_000, 1)); r.Outcome == internalv1.StartOutcome_START_OUTCOME_RECORDED {
		t.Errorf("the start written after its void: %v, want it refused (voided)", r)
	}
	if _, pending, _, _, _ := e.Tracking(t, m); pending != 0 {
		t.Fatalf("pending %d after a start written after its void, want 0: it holds its reservation and its place under the cap", pending)
	}
	if r := start1(t, e, guardedStart(at.ReqID(), org, m, now, 90_000, 1)); r.Outcome != internalv1.StartOutcome_START_OUTCOME_RECORDED {
		t.Fatalf("the member's next request: %v, want recorded (nothing in flight)", r)
	}
	// A void that names another member than the start's leaves that start alone.
	real := at.ReqID()
	if r := settle1(t, e, void(real, org, other)); r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_VOIDED {
		t.Fatalf("void for another member: %v", r)
	}
	if r := start1(t, e, at.StartItem(real, org, m, now, 0)); r.Outcome != internalv1.StartOutcome_START_OUTCOME_RECORDED {
		t.Fatalf("a start another member's void named: %v, want recorded", r)
	}
	if r := settle1(t, e, &internalv1.SettleItem{RequestId: real, UpstreamCostMicroUsd: at.Cost(700), Complete: true}); r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED {
		t.Fatalf("its settlement: %v", r)
	}
	at.Check(t, e.Store)
}

// TestStartsAndTheirVoidsRacingOnTwoLedgers: each request's start goes to one control
// plane and its void to the other at the same moment. Whatever the order in which their
// transactions write, nothing is left pending, nothing is charged, and every answer is
// consistent: a start answered recorded was removed by its void.
func TestStartsAndTheirVoidsRacingOnTwoLedgers(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	e := at.New(t, at.Options{})
	other := secondLedger(t, e)
	org, ms := e.Org(t, 4)
	now := e.Clock.Now()
	n := 200
	if testing.Short() {
		n = 60
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range n {
		id, m := at.ReqID(), ms[i%len(ms)]
		starter, voider := e.Ledger, other
		if i%2 == 1 {
			starter, voider = other, e.Ledger
		}
		wg.Go(func() {
			if _, err := starter.Start(ctx, []*internalv1.StartItem{guardedStart(id, org, m, now, 1_000, 1_000)}); err != nil {
				errs <- err
			}
		})
		wg.Go(func() {
			res, err := voider.Settle(ctx, []*internalv1.SettleItem{void(id, org, m)})
			if err == nil && res[0].GetOutcome() != internalv1.SettleOutcome_SETTLE_OUTCOME_VOIDED {
				err = fmt.Errorf("void of %s: %v", id, res[0])
			}
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var pending int64
	if err := e.Store.Pool.QueryRow(ctx, `SELECT count(*) FROM usage_request_starts`).Scan(&pending); err != nil || pending != 0 {
		t.Fatalf("%d starts left after their voids (%v), want none", pending, err)
	}
	at.Check(t, e.Store)
}
