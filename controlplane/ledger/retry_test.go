package ledger_test

import (
	"context"
	"testing"
	"time"

	at "github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	"github.com/tollgate-dev/tollgate/controlplane/ledger"
	"github.com/tollgate-dev/tollgate/internal/storetest"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// TestRetriedSettleCallIsNotWorkedTwice: a Settle call whose caller gave up (the
// enforcer's call timeout, with Postgres slowed by a lock) and that the caller then
// sends again. The settlements still queued in the ledger when their caller left are
// dropped before any database work, as starts are: the caller has no answer for them
// and sends them again (the enforcer's settle queue and spool keep every one until it
// is answered). Until 2026-12-03 they were committed all the same, and the retry was
// committed again behind them as duplicates: in a burst the control plane could not
// keep up with, every call past the enforcer's timeout doubled the work of its items.
func TestRetriedSettleCallIsNotWorkedTwice(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	const batch = 4
	e := at.New(t, at.Options{Ledger: ledger.Config{Lanes: 1, MaxBatch: batch}})
	org, ms := e.Org(t, 1)
	now := e.Clock.Now()
	items := make([]*internalv1.SettleItem, 12)
	for i := range items {
		items[i] = &internalv1.SettleItem{RequestId: at.ReqID(), OrganizationId: org, MemberId: ms[0],
			Snapshot: at.Snapshot(org, ms[0], now, 0), UpstreamCostMicroUsd: at.Cost(100), Complete: true}
	}
	release := storetest.LockTable(t, e.Store, "usage_receipts", "ACCESS EXCLUSIVE")
	c := storetest.Conn(t, e.Store)
	call, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := e.Ledger.Settle(call, items); err == nil {
		t.Fatal("a settle call behind a held lock was answered before its deadline")
	}
	storetest.WaitForLockWaiters(t, c, 1) // the first batch waits in Postgres
	release()

	res, err := e.Ledger.Settle(context.Background(), items)
	if err != nil {
		t.Fatal(err)
	}
	n := map[internalv1.SettleOutcome]int{}
	for _, r := range res {
		n[r.GetOutcome()]++
	}
	settled, dup := n[internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED], n[internalv1.SettleOutcome_SETTLE_OUTCOME_DUPLICATE]
	if settled+dup != len(items) {
		t.Fatalf("retried call answered %v", n)
	}
	// Only what was already in a transaction when the caller left may have been
	// committed then: at most one batch.
	if dup > batch {
		t.Fatalf("the retried call found %d of its %d settlements committed after their caller had left (at most one batch of %d was under way)",
			dup, len(items), batch)
	}
	if used := e.Used(t, org, ms[0], "day", now); used != 100*int64(len(items)) {
		t.Fatalf("charged %d, want %d", used, 100*len(items))
	}
}
