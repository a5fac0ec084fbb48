package ledger_test

import (
	"testing"

	at "github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// Rule 12: a legacy request, one with an old empty snapshot included, is kept for
// explicit reviewed reconciliation, never dropped. A settlement from a legacy writer
// carries a snapshot of an older version (an empty one, or version 1): without a
// durable start it is quarantined no_snapshot (the snapshot it brought stays in the
// record as evidence); with a durable start it is charged on the start's admission
// windows, as any settlement of a durable start; and a settlement of the quarantined
// request with a version-2 snapshot applies the legacy report, as a report without one. Until 2026-12-07 both were answered
// INVALID ("only version 2 is accepted") and recorded nowhere: the first was lost to
// review, the second left its start pending, its cost never charged.
func TestLegacySnapshotSettlementsAreKeptForReview(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 1)
	m := ms[0]
	now := e.Clock.Now()

	orphan := at.ReqID()
	r := settle1(t, e, &internalv1.SettleItem{RequestId: orphan, OrganizationId: org, MemberId: m, Snapshot: &internalv1.Snapshot{},
		UpstreamCostMicroUsd: at.Cost(300), Complete: true})
	if r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_NO_SNAPSHOT {
		t.Fatalf("a settlement with an old empty snapshot and no start: %v, want NO_SNAPSHOT (kept for review)", r)
	}
	kept := e.Int64s(t, `SELECT reason, count(*) FROM usage_quarantined_settlements WHERE request_id = $1
		AND organization_id = $2 AND member_id = $3 AND payload ? 'snapshot' GROUP BY reason`, orphan, org, m)
	if kept["no_snapshot"] != 1 || len(kept) != 1 {
		t.Fatalf("quarantine records of the legacy request %v, want one no_snapshot record with its snapshot", kept)
	}
	if used := e.Used(t, org, m, window.Day, now); used != 0 {
		t.Fatalf("the quarantined legacy request was charged %d", used)
	}

	started := at.ReqID()
	if r := start1(t, e, at.StartItem(started, org, m, now, 0)); r.Outcome != internalv1.StartOutcome_START_OUTCOME_RECORDED {
		t.Fatalf("start: %v", r)
	}
	r = settle1(t, e, &internalv1.SettleItem{RequestId: started, OrganizationId: org, MemberId: m,
		Snapshot: &internalv1.Snapshot{Version: 1, AdmittedAtUnixMs: now.UnixMilli()}, UpstreamCostMicroUsd: at.Cost(500), Complete: true})
	if r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED || r.CostMicroUsd != 500 {
		t.Fatalf("a settlement of a durable start with a version-1 snapshot: %v, want SETTLED 500", r)
	}
	if _, pending, _, _, _ := e.Tracking(t, m); pending != 0 {
		t.Fatalf("%d pending after the settlement, want 0", pending)
	}
	if used := e.Used(t, org, m, window.Day, now); used != 500 {
		t.Fatalf("day used %d, want 500", used)
	}

	// The legacy request's own settlement with a version-2 snapshot creates its event
	// later: the quarantined report is applied to it, as a report without a snapshot is.
	r = settle1(t, e, &internalv1.SettleItem{RequestId: orphan, OrganizationId: org, MemberId: m, Snapshot: at.Snapshot(org, m, now, 1)})
	if r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED {
		t.Fatalf("the legacy request's settlement with its snapshot: %v", r)
	}
	if used := e.Used(t, org, m, window.Day, now); used != 800 {
		t.Fatalf("day used %d, want 800: the quarantined legacy report's 300 was not applied", used)
	}
	at.Check(t, e.Store)
}
