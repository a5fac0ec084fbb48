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
