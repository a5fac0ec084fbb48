package mirrorsync_test

import (
	"context"
	"errors"
	"testing"

	at "github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	"github.com/tollgate-dev/tollgate/controlplane/ledger"
	"github.com/tollgate-dev/tollgate/controlplane/mirrorsync"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/storetest"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
)

// A settlement is committed, and the read of its member's record that follows fails
// (Postgres restarted or failed over just after the COMMIT). The record cannot be
// written, nor the failure marked in Postgres: the older record in Redis must not stay
// trusted. It did: the member was only remembered for repair in this process's memory,
// and the enforcers read the spend from before the settlement (a member it blocked
// admitted) until the next maintenance round, or, when the process ended first, until
// the member's next settlement. Now the record is deleted as when its write fails, and
// the enforcers resolve the member through the control plane.
func TestRefreshThatCannotReadPostgresForgetsTheOlderRecord(t *testing.T) {
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 1)
	m := ms[0]
	settleOne(t, e, org, m, 100)
	if spend, _, err := monthSpend(t, e, m); err != nil || spend != 100 {
		t.Fatalf("record after the first settlement: %d %v, want 100", spend, err)
	}

	// The control plane whose reads after the commit fail: its ledger commits through
	// the live database, its writer reads through a pool that is closed.
	broken, err := store.Open(e.Ctx, storetest.URLFor(storetest.Database(e.Store)))
	if err != nil {
		t.Fatal(err)
	}
	broken.Close()
	w := mirrorsync.New(mirrorsync.Deps{Store: broken, Redis: e.Redis, Layout: e.Layout, Clock: e.Clock, Log: e.Log})
	l := ledger.New(ledger.Deps{Store: e.Store, Clock: e.Clock, Log: e.Log, Mirror: w})
	runCtx, stop := context.WithCancel(e.Ctx)
	done := make(chan error, 1)
	go func() { done <- l.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	now := e.Clock.Now()
	id := at.ReqID()
	if res, err := l.Start(e.Ctx, []*internalv1.StartItem{at.StartItem(id, org, m, now, 0)}); err != nil ||
		res[0].GetOutcome() != internalv1.StartOutcome_START_OUTCOME_RECORDED {
		t.Fatalf("start: %v %v", res, err)
	}
	res, err := l.Settle(e.Ctx, []*internalv1.SettleItem{{RequestId: id, UpstreamCostMicroUsd: at.Cost(250), Complete: true}})
	if err != nil || res[0].GetOutcome() != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED {
		t.Fatalf("settle: %v %v", res, err)
	}
	if n, _ := w.Remembered(); n != 1 {
		t.Fatalf("%d members remembered for repair, want 1: the record's read did not fail", n)
	}
	spend, _, err := monthSpend(t, e, m)
	if !errors.Is(err, mirror.ErrUnknown) {
		t.Fatalf("Redis still has a record of %d (err %v) after a settlement of 250 whose record could not be read; want none", spend, err)
	}
}

// An operator's resync (`controlplane resync`, another process) installs a new
// generation, moves every member's version in Postgres past Redis's, and then writes the
// records. The enforcers see the new generation at once and send their last settlements
// again, which this control plane, still on the old generation until its next check,
// answers duplicate: the member's record is older than Postgres's version there, so
// RefreshOlder rewrote it, under the old generation and at the very version the resync
// was about to write, which then kept the resync's record out (an equal version is
// refused): the member had no record readable under the new generation until their
// next change. A writer whose generation is no longer Redis's leaves the record to the
// rebuild, which reads Postgres after the settlement's commit.
func TestRefreshOlderLeavesARebuildsRecordsToTheRebuild(t *testing.T) {
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 1)
	m := ms[0]
	settleOne(t, e, org, m, 100)
	before, errs := e.Layout.ReadVersions(e.Ctx, e.Redis, []string{m})
	if errs[0] != nil || before[0] == 0 {
		t.Fatalf("record version %d: %v", before[0], errs[0])
	}

	// The resync, halfway: a new generation, and the version moved past Redis's.
	old := e.Mirror.Generation()
	if _, ok, err := e.Layout.ReplaceGeneration(e.Ctx, e.Redis, old, "resync-generation"); err != nil || !ok {
		t.Fatalf("replace generation: %v %v", ok, err)
	}
	var moved int64
	if err := e.Store.Pool.QueryRow(e.Ctx, `UPDATE usage_mirror_versions SET version = version + 10 WHERE member_id = $1 RETURNING version`, m).Scan(&moved); err != nil {
		t.Fatal(err)
	}

	e.Mirror.RefreshOlder(e.Ctx, map[string]int64{m: moved})

	after, errs := e.Layout.ReadVersions(e.Ctx, e.Redis, []string{m})
	if errs[0] != nil || after[0] != before[0] {
		t.Fatalf("a writer of the old generation wrote the record at version %d (was %d, the rebuild's is %d): %v", after[0], before[0], moved, errs[0])
	}
}
