package ledger_test

import (
	"context"
	"testing"
	"time"

	at "github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

var ctx = context.Background()

func start1(t *testing.T, e *at.Env, it *internalv1.StartItem) *internalv1.StartResult {
	t.Helper()
	res, err := e.Ledger.Start(ctx, []*internalv1.StartItem{it})
	if err != nil {
		t.Fatal(err)
	}
	return res[0]
}

func settle1(t *testing.T, e *at.Env, it *internalv1.SettleItem) *internalv1.SettleResult {
	t.Helper()
	res, err := e.Ledger.Settle(ctx, []*internalv1.SettleItem{it})
	if err != nil {
		t.Fatal(err)
	}
	return res[0]
}

func TestStartThenSettleChargesAllThreeWindowsOnce(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 1)
	m := ms[0]
	now := e.Clock.Now()
	id := at.ReqID()
	if r := start1(t, e, at.StartItem(id, org, m, now, 0)); r.Outcome != internalv1.StartOutcome_START_OUTCOME_RECORDED || r.TrackingVersion != 1 {
		t.Fatalf("start: %v", r)
	}
	if r := start1(t, e, at.StartItem(id, org, m, now, 0)); r.Outcome != internalv1.StartOutcome_START_OUTCOME_DUPLICATE {
		t.Fatalf("repeated start: %v", r)
	}
	if _, pending, _, _, _ := e.Tracking(t, m); pending != 1 {
		t.Fatalf("pending %d", pending)
	}
	steps := []struct {
		name string
		cost int64
		want internalv1.SettleOutcome
	}{
		{"first settlement", 1500, internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED},
		{"repeat", 1500, internalv1.SettleOutcome_SETTLE_OUTCOME_DUPLICATE},
		{"lower cost", 1000, internalv1.SettleOutcome_SETTLE_OUTCOME_COST_CONFLICT},
		{"higher cost on a final receipt", 2000, internalv1.SettleOutcome_SETTLE_OUTCOME_COST_CONFLICT},
	}
	for _, s := range steps {
		r := settle1(t, e, &internalv1.SettleItem{RequestId: id, UpstreamCostMicroUsd: at.Cost(s.cost), Complete: true, Model: "m"})
		if r.Outcome != s.want || r.CostMicroUsd != 1500 || r.CostSource != "upstream" {
			t.Fatalf("%s: %v", s.name, r)
		}
	}
	for _, tf := range window.Timeframes {
		if used := e.Used(t, org, m, tf, now); used != 1500 {
			t.Fatalf("%s used %d", tf, used)
		}
	}
	if _, pending, unpriced, incomplete, _ := e.Tracking(t, m); pending != 0 || unpriced != 0 || incomplete != 0 {
		t.Fatalf("tracking pending %d unpriced %d incomplete %d", pending, unpriced, incomplete)
	}
	rec, err := e.Layout.Read(ctx, e.Redis, m, e.Mirror.Generation())
	if err != nil {
		t.Fatalf("mirror record: %v", err)
	}
	if len(rec.GetSpend()) != 3 || rec.GetSpend()[0].GetUsedMicroUsd() != 1500 || rec.GetEntitlement().GetTrackingVersion() != 1 {
		t.Fatalf("mirror record %v", rec)
	}
	at.Check(t, e.Store)
}

// A request admitted one millisecond before the 05:00 UTC reset and settled after it
// is charged to the day, week and month it was admitted in.
func TestSettlementChargesTheAdmissionWindows(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 1)
	m := ms[0]
	admitted := time.Date(2026, 9, 14, 4, 59, 59, 999_000_000, time.UTC) // a Monday: the week and day both roll over
	e.Clock.Set(admitted)
	id := at.ReqID()
	start1(t, e, at.StartItem(id, org, m, admitted, 0))
	e.Clock.Set(time.Date(2026, 9, 14, 5, 0, 0, 500_000_000, time.UTC))
	if r := settle1(t, e, &internalv1.SettleItem{RequestId: id, UpstreamCostMicroUsd: at.Cost(700), Complete: true}); r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED {
		t.Fatalf("settle %v", r)
	}
	after := e.Clock.Now()
	for _, tf := range []window.Timeframe{window.Day, window.Week} {
		if old, cur := e.Used(t, org, m, tf, admitted), e.Used(t, org, m, tf, after); old != 700 || cur != 0 {
			t.Fatalf("%s: old window %d, new window %d", tf, old, cur)
		}
	}
	if used := e.Used(t, org, m, window.Month, admitted); used != 700 {
		t.Fatalf("month %d", used)
	}
	at.Check(t, e.Store)
}

// A front door's refusal (SettleItem.refused) is settled at 0, complete; should the
// proxy not have applied it (Envoy's request-body filter, failure_mode_allow, past its
// message_timeout), the settlement of the upstream's answer promotes it once: the
// answer's cost is charged to the admission windows and the mirror, the receipt is no
// refusal any more and is final. A refusal that comes after the answer, or again, changes
// nothing. Before 2026-12-03 the refusal was a final receipt of a known 0 (the answer a
// DUPLICATE): a request served upstream was free.
func TestRefusalIsPromotedByTheAnswer(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 1)
	m := ms[0]
	now := e.Clock.Now()
	refusal := func(id string) *internalv1.SettleItem {
		return &internalv1.SettleItem{RequestId: id, UpstreamCostMicroUsd: at.Cost(0), Complete: true, UpstreamStatus: 403, Refused: true}
	}
	answer := func(id string) *internalv1.SettleItem {
		return &internalv1.SettleItem{RequestId: id, Model: "gpt-4o-mini", InputTokens: 1000, OutputTokens: 1000, Complete: true, UpstreamStatus: 200}
	}
	const cost = 150 + 600 // gpt-4o-mini: 0.15 and 0.60 USD per million

	// Refused, Envoy went on: the answer promotes the refusal.
	ignored := at.ReqID()
	start1(t, e, at.StartItem(ignored, org, m, now, 0))
	if r := settle1(t, e, refusal(ignored)); r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED || r.CostMicroUsd != 0 {
		t.Fatalf("refusal: %v", r)
	}
	if r := settle1(t, e, answer(ignored)); r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_PROMOTED || r.CostMicroUsd != cost ||
		r.CostSource != "catalog_estimate" {
		t.Fatalf("the answer after a refusal: %v", r)
	}
	for _, again := range []*internalv1.SettleItem{refusal(ignored), answer(ignored)} {
		if r := settle1(t, e, again); r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_DUPLICATE || r.CostMicroUsd != cost {
			t.Fatalf("again (refused %v): %v", again.GetRefused(), r)
		}
	}
	// Answered first (the refusal's settlement in its retry backoff): the refusal says
	// nothing.
	late := at.ReqID()
	start1(t, e, at.StartItem(late, org, m, now, 0))
	settle1(t, e, answer(late))
	if r := settle1(t, e, refusal(late)); r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_DUPLICATE || r.CostMicroUsd != cost {
		t.Fatalf("a refusal after the answer: %v", r)
	}
	// Refused and applied: 0.
	applied := at.ReqID()
	start1(t, e, at.StartItem(applied, org, m, now, 0))
	settle1(t, e, refusal(applied))

	var refused bool
	if err := e.Store.Pool.QueryRow(ctx, `SELECT refused FROM usage_receipts WHERE request_id = $1`, applied).Scan(&refused); err != nil || !refused {
		t.Fatalf("the applied refusal's receipt: refused %v, %v", refused, err)
	}
	if err := e.Store.Pool.QueryRow(ctx, `SELECT refused FROM usage_receipts WHERE request_id = $1`, ignored).Scan(&refused); err != nil || refused {
		t.Fatalf("the promoted refusal's receipt: refused %v, %v", refused, err)
	}
	for _, tf := range window.Timeframes {
		if used := e.Used(t, org, m, tf, now); used != 2*cost {
			t.Fatalf("%s used %d, want %d", tf, used, 2*cost)
		}
	}
	if _, pending, unpriced, incomplete, _ := e.Tracking(t, m); pending != 0 || unpriced != 0 || incomplete != 0 {
		t.Fatalf("tracking pending %d unpriced %d incomplete %d", pending, unpriced, incomplete)
	}
	rec, err := e.Layout.Read(ctx, e.Redis, m, e.Mirror.Generation())
	if err != nil {
		t.Fatalf("mirror record: %v", err)
	}
	if len(rec.GetSpend()) != 3 || rec.GetSpend()[0].GetUsedMicroUsd() != 2*cost {
		t.Fatalf("mirror record %v", rec)
	}
	at.Check(t, e.Store)
}
