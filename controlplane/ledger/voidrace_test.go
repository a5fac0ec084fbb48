package ledger_test

import (
	"context"
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
