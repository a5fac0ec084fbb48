package ledger_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	at "github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// void is the settlement a gate sends for a speculative start whose check then refused.
func void(id, org, member string) *internalv1.SettleItem {
	return &internalv1.SettleItem{RequestId: id, OrganizationId: org, MemberId: member, Voided: true}
}

// TestVoidRemovesAPendingStartUncharged: a voided start leaves nothing behind (no start,
// no receipt, no charge, no pending count), again and again; a start already settled
// keeps its charge; an unknown id is nothing to do and is not quarantined.
func TestVoidRemovesAPendingStartUncharged(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 1)
	m := ms[0]
	now := e.Clock.Now()
	voidedID, settledID := at.ReqID(), at.ReqID()
	for _, id := range []string{voidedID, settledID} {
		if r := start1(t, e, at.StartItem(id, org, m, now, 0)); r.Outcome != internalv1.StartOutcome_START_OUTCOME_RECORDED {
			t.Fatalf("start: %v", r)
		}
	}
	if r := settle1(t, e, &internalv1.SettleItem{RequestId: settledID, UpstreamCostMicroUsd: at.Cost(1500), Complete: true}); r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED {
		t.Fatalf("settle: %v", r)
	}
	for i := range 2 {
		r := settle1(t, e, void(voidedID, org, m))
		if r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_VOIDED || r.CostMicroUsd != 0 || r.Message != "" {
			t.Fatalf("void %d: %v", i, r)
		}
	}
	if r := settle1(t, e, void(settledID, org, m)); r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_VOIDED || r.Message == "" {
		t.Fatalf("void of a settled start: %v (want voided, with a message that its charge stands)", r)
	}
	if r := settle1(t, e, void(at.ReqID(), org, m)); r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_VOIDED {
		t.Fatalf("void of an unknown id: %v", r)
	}

	rows := e.Int64s(t, `SELECT 'starts', count(*) FROM usage_request_starts WHERE request_id = $1
		UNION ALL SELECT 'receipts', count(*) FROM usage_receipts WHERE request_id = $1
		UNION ALL SELECT 'quarantined', count(*) FROM usage_quarantined_settlements`, voidedID)
	if rows["starts"] != 0 || rows["receipts"] != 0 || rows["quarantined"] != 0 {
		t.Fatalf("after the void: %v (want no start, no receipt, nothing quarantined)", rows)
	}
	for _, tf := range window.Timeframes {
		if used := e.Used(t, org, m, tf, now); used != 1500 {
			t.Fatalf("%s used %d, want the settled request's 1500 only", tf, used)
		}
	}
	if _, pending, unpriced, incomplete, _ := e.Tracking(t, m); pending != 0 || unpriced != 0 || incomplete != 0 {
		t.Fatalf("tracking pending %d unpriced %d incomplete %d", pending, unpriced, incomplete)
	}
	if n := testutil.ToFloat64(e.Metrics.Settlements.WithLabelValues("voided")); n != 4 {
		t.Fatalf("settlements_total{result=\"voided\"} = %v, want the 4 voids", n)
	}
	at.Check(t, e.Store)
}

// TestVoidCarriesNothing: a void that reports usage, a cost, a status or a snapshot
// contradicts itself, and one naming someone else than its start's member is wrong;
// each is refused and the start stays pending for its settlement.
func TestVoidCarriesNothing(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 1)
	m := ms[0]
	now := e.Clock.Now()
	id := at.ReqID()
	start1(t, e, at.StartItem(id, org, m, now, 0))
	for name, it := range map[string]*internalv1.SettleItem{
		"tokens":   {InputTokens: 5},
		"cost":     {UpstreamCostMicroUsd: at.Cost(0)},
		"complete": {Complete: true},
		"status":   {UpstreamStatus: 200},
		"model":    {Model: "gpt-4o"},
		"snapshot": {Snapshot: at.Snapshot(org, m, now, 0)},
	} {
		it.RequestId, it.OrganizationId, it.MemberId, it.Voided = id, org, m, true
		if r := settle1(t, e, it); r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_INVALID {
			t.Errorf("void with %s: %v, want invalid", name, r)
		}
	}
	// A void naming another member (or organization) than the start's is refused too.
	org2, others := e.Org(t, 1)
	for name, it := range map[string]*internalv1.SettleItem{"another member": void(id, org, others[0]), "another organization": void(id, org2, m)} {
		if r := settle1(t, e, it); r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_INVALID {
			t.Errorf("void for %s: %v, want invalid", name, r)
		}
	}
	if _, pending, _, _, _ := e.Tracking(t, m); pending != 1 {
		t.Fatalf("pending %d after refused voids, want the start still pending", pending)
	}
	at.Check(t, e.Store)
}

// TestVoidGivesBackTheInFlightPlace: a voided start no longer counts against the
// member's in-flight cap or reserves spend, so the next request is admitted at once.
func TestVoidGivesBackTheInFlightPlace(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 1)
	m := ms[0]
	now := e.Clock.Now()
	first, second, third := at.ReqID(), at.ReqID(), at.ReqID()
	if r := start1(t, e, guardedStart(first, org, m, now, 90_000, 1)); r.Outcome != internalv1.StartOutcome_START_OUTCOME_RECORDED {
		t.Fatalf("first start: %v", r)
	}
	if r := start1(t, e, guardedStart(second, org, m, now, 5_000, 1)); r.Outcome != internalv1.StartOutcome_START_OUTCOME_CONCURRENCY_LIMITED {
		t.Fatalf("second start while the first is in flight: %v, want concurrency_limited", r)
	}
	if r := settle1(t, e, void(first, org, m)); r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_VOIDED {
		t.Fatalf("void: %v", r)
	}
	if r := start1(t, e, guardedStart(third, org, m, now, 90_000, 1)); r.Outcome != internalv1.StartOutcome_START_OUTCOME_RECORDED {
		t.Fatalf("start after the void: %v, want recorded (the place and the 0.09 USD reserved are given back)", r)
	}
	at.Check(t, e.Store)
}
