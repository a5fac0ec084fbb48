package retention_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	"github.com/tollgate-dev/tollgate/controlplane/recovery"
	"github.com/tollgate-dev/tollgate/controlplane/retention"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// A receipt retention pruned, then promoted by a late real settlement (a recovered
// request whose answer a spool or a gateway's /settle brought much later), holds that
// settlement's detail anew: it is request-level data like any other, pruned once its
// last change is older than the cutoff. The promotion kept the receipt's old
// detail_pruned_at, so retention counted it already_pruned and kept the new model name
// and token counts for good.
func TestRetentionPrunesTheDetailOfAReceiptPromotedAfterItWasPruned(t *testing.T) {
	e := accountingtest.New(t, accountingtest.Options{})
	org, ms := e.Org(t, 1)
	f := fixture{e: e, org: org, member: ms[0]}
	old := e.Clock.Now()
	f.start(t, "req_late", old)
	err := e.Store.InTx(e.Ctx, func(tx pgx.Tx) error {
		_, err := recovery.Recover(e.Ctx, tx, noAudit{}, recovery.Request{OrganizationID: org, RequestIDs: []string{"req_late"},
			ReviewReference: "R-0", Apply: true}, old)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	e.Clock.Set(old.Add(100 * 24 * time.Hour))
	if r := f.run(t, true, 1000); r.Receipts.Removed != 1 {
		t.Fatalf("first run %+v", r.Receipts)
	}
	if o := f.settle(t, &internalv1.SettleItem{RequestId: "req_late", Model: "gpt-4o", InputTokens: 1000, OutputTokens: 200,
		UpstreamCostMicroUsd: accountingtest.Cost(4000), Complete: true}); o != internalv1.SettleOutcome_SETTLE_OUTCOME_PROMOTED {
		t.Fatalf("late settlement: %v", o)
	}
	e.Clock.Set(old.Add(200 * 24 * time.Hour))
	r := f.run(t, true, 1000)
	if n := f.count(t, `SELECT count(*) FROM usage_receipts WHERE request_id = 'req_late' AND model = '' AND input_tokens = 0
		AND output_tokens = 0 AND detail_pruned_at IS NOT NULL AND cost_micro_usd = 4000`); n != 1 || r.Receipts.Removed != 1 {
		t.Fatalf("the promoted receipt's detail was kept (removed %d, kept %v)", r.Receipts.Removed, r.Receipts.Kept)
	}
	if again := f.run(t, true, 1000); again.Receipts.Removed != 0 || again.Receipts.Kept[retention.KeptAlreadyPruned] != 1 {
		t.Fatalf("third run %+v", again.Receipts)
	}
	accountingtest.Check(t, e.Store)
}
