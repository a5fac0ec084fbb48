package ledger_test

import (
	"math"
	"testing"

	at "github.com/tollgate-dev/tollgate/controlplane/accountingtest"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// A settlement whose charge would overflow its counters is answered invalid on its own,
// charges nothing, and does not stop the other settlements sent with it.
func TestRefusedSettlementDoesNotTakeItsBatchDown(t *testing.T) {
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 2)
	a, b := ms[0], ms[1]
	now := e.Clock.Now()
	first, overflow, fine := at.ReqID(), at.ReqID(), at.ReqID()
	for _, s := range []struct{ id, member string }{{first, a}, {overflow, a}, {fine, b}} {
		if r := start1(t, e, at.StartItem(s.id, org, s.member, now, 0)); r.Outcome != internalv1.StartOutcome_START_OUTCOME_RECORDED {
			t.Fatalf("start: %v", r)
		}
	}
	if r := settle1(t, e, &internalv1.SettleItem{RequestId: first, UpstreamCostMicroUsd: at.Cost(1000), Complete: true, Model: "m"}); r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED {
		t.Fatalf("first: %v", r)
	}
	res, err := e.Ledger.Settle(ctx, []*internalv1.SettleItem{
		{RequestId: overflow, UpstreamCostMicroUsd: at.Cost(math.MaxInt64), Complete: true, Model: "m"},
		{RequestId: fine, UpstreamCostMicroUsd: at.Cost(700), Complete: true, Model: "m"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_INVALID {
		t.Fatalf("overflowing settlement: %v", res[0])
	}
	if res[1].Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED {
		t.Fatalf("the other settlement of the batch: %v", res[1])
	}
	if used := e.Used(t, org, a, window.Day, now); used != 1000 {
		t.Fatalf("member a used %d, want 1000 (the overflow left no trace)", used)
	}
	if used := e.Used(t, org, b, window.Day, now); used != 700 {
		t.Fatalf("member b used %d", used)
	}
	at.Check(t, e.Store)
}
