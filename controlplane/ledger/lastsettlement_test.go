package ledger_test

import (
	"context"
	"testing"
	"time"

	at "github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	"github.com/tollgate-dev/tollgate/controlplane/ledger"
	"github.com/tollgate-dev/tollgate/pkg/clock"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// Two settlement batches of one member commit in the other order than they began (two
// control plane replicas, or two lanes of one: the later batch took the member's
// tracking row first, and the earlier one waited for it). lastSettlementAt and
// lastSettlementRequestId must still name the most recent settled receipt: the batch
// that committed last wrote its own, older instant and request over the newer ones, so
// the status went back in time and named a receipt settled before the one it had shown.
func TestLastSettlementNeverGoesBackInTime(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 1)
	m := ms[0]
	began := e.Clock.Now()
	older, newer := at.ReqID(), at.ReqID()
	for _, id := range []string{older, newer} {
		if r := start1(t, e, at.StartItem(id, org, m, began, 0)); r.GetOutcome() != internalv1.StartOutcome_START_OUTCOME_RECORDED {
			t.Fatalf("start %s: %v", id, r)
		}
	}

	// The replica whose batch began a second later commits first.
	later := clock.NewManual(began.Add(time.Second))
	l := ledger.New(ledger.Deps{Store: e.Store, Clock: later, Log: e.Log, Mirror: e.Mirror})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- l.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	settle := func(l *ledger.Ledger, id string) {
		t.Helper()
		res, err := l.Settle(ctx, []*internalv1.SettleItem{{RequestId: id, UpstreamCostMicroUsd: at.Cost(10), Complete: true}})
		if err != nil || res[0].GetOutcome() != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED {
			t.Fatalf("settle %s: %v %v", id, res, err)
		}
	}
	settle(l, newer)
	settle(e.Ledger, older) // began at `began`, committed after

	var lastAt time.Time
	var last string
	if err := e.Store.Pool.QueryRow(ctx, `SELECT last_settlement_at, last_settlement_request_id FROM usage_member_tracking
		WHERE member_id = $1`, m).Scan(&lastAt, &last); err != nil {
		t.Fatal(err)
	}
	if last != newer || !lastAt.Equal(began.Add(time.Second)) {
		t.Fatalf("last settlement %s at %s, want %s at %s (the most recent receipt)", last, lastAt, newer, began.Add(time.Second))
	}
	at.Check(t, e.Store)
}
