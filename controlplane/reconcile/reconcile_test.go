package reconcile_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/accounting"
	"github.com/tollgate-dev/tollgate/controlplane/fault"
	"github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	"github.com/tollgate-dev/tollgate/controlplane/reconcile"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// auditor records audit events like the REST API's, unattributed.
type auditor struct{ ctx context.Context }

func (a auditor) Audit(tx pgx.Tx, action, target string, details any) error {
	return store.RecordAudit(a.ctx, tx, store.AuditEvent{ID: typeid.New(typeid.AuditEvent), OccurredAt: time.Now(), Action: action,
		TargetID: target, Details: details})
}

type fixture struct {
	e      *accountingtest.Env
	org    string
	member string
	other  string
}

func setup(t *testing.T) fixture {
	t.Helper()
	e := accountingtest.New(t, accountingtest.Options{})
	org, ms := e.Org(t, 2)
	return fixture{e: e, org: org, member: ms[0], other: ms[1]}
}

// quarantine settles a request that has no start and no snapshot: NO_SNAPSHOT, kept
// for review, charged nothing.
func (f fixture) quarantine(t *testing.T, id string, cost int64) {
	t.Helper()
	res, err := f.e.Ledger.Settle(f.e.Ctx, []*internalv1.SettleItem{{RequestId: id, OrganizationId: f.org, MemberId: f.member,
		UpstreamCostMicroUsd: accountingtest.Cost(cost), Complete: true}})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].GetOutcome() != internalv1.SettleOutcome_SETTLE_OUTCOME_NO_SNAPSHOT {
		t.Fatalf("settlement without start or snapshot: %v, want NO_SNAPSHOT", res[0])
	}
}

// quarantineWithSnapshot stores a quarantined epoch_changed settlement first seen at
// seen whose snapshot says it was admitted at admitted (the enforcer's clock).
func (f fixture) quarantineWithSnapshot(t *testing.T, id string, seen, admitted time.Time) {
	t.Helper()
	if _, err := f.e.Store.Pool.Exec(f.e.Ctx, `INSERT INTO usage_quarantined_settlements (request_id, reason, organization_id, member_id, payload,
		first_seen_at, last_seen_at) VALUES ($1, 'epoch_changed', $2, $3, jsonb_build_object('snapshot', jsonb_build_object('admittedAtUnixMs', $5::bigint::text)), $4, $4)`,
		id, f.org, f.member, seen, admitted.UnixMilli()); err != nil {
		t.Fatal(err)
	}
}

func (f fixture) reconcile(t *testing.T, apply bool, items ...reconcile.Item) reconcile.Answer {
	t.Helper()
	var ans reconcile.Answer
	err := f.e.Store.InTx(f.e.Ctx, func(tx pgx.Tx) error {
		var err error
		ans, err = reconcile.Reconcile(f.e.Ctx, tx, auditor{f.e.Ctx}, reconcile.Request{OrganizationID: f.org, Items: items,
			ReviewReference: "TICKET-1", Apply: apply}, f.e.Clock.Now())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return ans
}

func (f fixture) count(t *testing.T, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := f.e.Store.Pool.QueryRow(f.e.Ctx, sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// The charge lands once on the windows of the proven admission instant: a request
// admitted at 04:59:59 whose settlement arrived after the 05:00 reset charges the old
// day. A preview writes nothing; the second try is refused; a late settlement of the
// same request charges nothing more; the quarantine record stays, marked.
func TestReconcileChargesOnceOnTheAdmissionWindows(t *testing.T) {
	f := setup(t)
	admitted := time.Date(2026, 9, 15, 4, 59, 59, 0, time.UTC)
	f.e.Clock.Set(time.Date(2026, 9, 15, 5, 10, 0, 0, time.UTC))
	id := accountingtest.ReqID()
	f.quarantine(t, id, 700)
	after := f.e.Clock.Now()
	item := reconcile.Item{RequestID: id, MemberID: f.member, AdmittedAt: admitted, Cost: 700}

	preview := f.reconcile(t, false, item)
	if preview.Applied || preview.Results[0].Outcome != reconcile.WouldReconcile {
		t.Fatalf("preview: %+v", preview)
	}
	if got := f.e.Used(t, f.org, f.member, window.Day, admitted); got != 0 {
		t.Fatalf("a preview charged %d", got)
	}
	if n := f.count(t, `SELECT count(*) FROM usage_request_starts WHERE request_id = $1`, id); n != 0 {
		t.Fatalf("a preview left %d start(s)", n)
	}

	ans := f.reconcile(t, true, item)
	if !ans.Applied || ans.Results[0].Outcome != reconcile.Reconciled || len(ans.Members) != 1 {
		t.Fatalf("apply: %+v", ans)
	}
	for _, tf := range []window.Timeframe{window.Day, window.Week, window.Month} {
		if got := f.e.Used(t, f.org, f.member, tf, admitted); got != 700 {
			t.Errorf("%s of the admission: used %d, want 700", tf, got)
		}
	}
	if got := f.e.Used(t, f.org, f.member, window.Day, after); got != 0 {
		t.Errorf("the day of the settlement was charged %d; the admission's day must be", got)
	}
	accountingtest.Check(t, f.e.Store)

	again := f.reconcile(t, true, item)
	if again.Applied || again.Results[0].Outcome != reconcile.AlreadyReconciled {
		t.Fatalf("second try: %+v, want already_reconciled", again)
	}
	res, err := f.e.Ledger.Settle(f.e.Ctx, []*internalv1.SettleItem{{RequestId: id, UpstreamCostMicroUsd: accountingtest.Cost(900), Complete: true}})
	if err != nil {
		t.Fatal(err)
	}
	if o := res[0].GetOutcome(); o != internalv1.SettleOutcome_SETTLE_OUTCOME_COST_CONFLICT {
		t.Fatalf("late settlement of a reconciled request: %v, want COST_CONFLICT", res[0])
	}
	if got := f.e.Used(t, f.org, f.member, window.Month, admitted); got != 700 {
		t.Fatalf("after a second try and a late settlement the month holds %d, want 700", got)
	}
	if n := f.count(t, `SELECT count(*) FROM usage_quarantined_settlements WHERE request_id = $1 AND reconciled_at IS NOT NULL
		AND review_reference = 'TICKET-1' AND proven_cost_micro_usd = 700 AND proven_member_id = $2`, id, f.member); n != 1 {
		t.Fatalf("quarantine record after reconciliation: %d marked rows, want 1", n)
	}
	if n := f.count(t, `SELECT count(*) FROM audit_events WHERE action = 'usage.reconciliation.reconcile' AND target_id = $1`, f.org); n != 1 {
		t.Fatalf("%d audit events, want 1 (previews and refusals are not audited)", n)
	}
	if n := f.count(t, `SELECT count(*) FROM usage_receipts WHERE request_id = $1 AND outcome = 'reconciled' AND cost_source = 'reconciled'
		AND cost_basis = 'reviewed' AND complete`, id); n != 1 {
		t.Fatalf("receipt of the reconciliation: %d rows of the reconciled kind", n)
	}
	accountingtest.Check(t, f.e.Store)
}

// Two operators reconciling the same request at once: exactly one charge.
func TestConcurrentReconciliationsChargeOnce(t *testing.T) {
	f := setup(t)
	id := accountingtest.ReqID()
	f.quarantine(t, id, 50)
	item := reconcile.Item{RequestID: id, MemberID: f.member, AdmittedAt: f.e.Clock.Now().Add(-time.Minute), Cost: 50}
	var wg sync.WaitGroup
	outcomes := make([]string, 4)
	for i := range outcomes {
		wg.Go(func() { outcomes[i] = f.reconcile(t, true, item).Results[0].Outcome })
	}
	wg.Wait()
	n := 0
	for _, o := range outcomes {
		if o == reconcile.Reconciled {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("outcomes %v: %d reconciled, want exactly 1", outcomes, n)
	}
	if got := f.e.Used(t, f.org, f.member, window.Day, item.AdmittedAt); got != 50 {
		t.Fatalf("day used %d, want 50", got)
	}
	accountingtest.Check(t, f.e.Store)
}

// Every refusal writes nothing, and one refused request refuses the whole call.
func TestReconcileRefusals(t *testing.T) {
	f := setup(t)
	now := f.e.Clock.Now()
	ok := accountingtest.ReqID()
	f.quarantine(t, ok, 10)
	good := reconcile.Item{RequestID: ok, MemberID: f.member, AdmittedAt: now.Add(-time.Hour), Cost: 10}
	bad := accountingtest.ReqID()
	f.quarantine(t, bad, 10)

	// A counter with spend no receipt explains (a legacy counter): the request may be in it.
	overlapID := accountingtest.ReqID()
	f.quarantine(t, overlapID, 10)
	legacyAt := now.Add(-48 * time.Hour)
	w := window.Of(window.Week, legacyAt)
	if _, err := f.e.Store.Pool.Exec(f.e.Ctx, `INSERT INTO usage_buckets (id, organization_id, member_id, timeframe, window_start, window_end,
			used_micro_usd, legacy, created_at, updated_at) VALUES ($1, $2, $3, 'week', $4, $5, 5000, true, $6, $6)`,
		window.BucketID(f.org, f.member, window.Week, w.Start), f.org, f.member, w.Start, w.End, now); err != nil {
		t.Fatal(err)
	}
	// A pending start of the request: it will be settled, it must not be charged twice.
	pendingID := accountingtest.ReqID()
	if _, err := f.e.Ledger.Start(f.e.Ctx, []*internalv1.StartItem{accountingtest.StartItem(pendingID, f.org, f.member, now.Add(-time.Minute), 0)}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.e.Store.Pool.Exec(f.e.Ctx, `INSERT INTO usage_quarantined_settlements (request_id, reason, organization_id, member_id, payload,
		first_seen_at, last_seen_at) VALUES ($1, 'no_snapshot', $2, $3, '{}', $4, $4)`, pendingID, f.org, f.member, now); err != nil {
		t.Fatal(err)
	}
	// A record whose snapshot names its admission instant.
	snapID := accountingtest.ReqID()
	snapAt := now.Add(-10 * time.Minute).Truncate(time.Millisecond)
	if _, err := f.e.Store.Pool.Exec(f.e.Ctx, `INSERT INTO usage_quarantined_settlements (request_id, reason, organization_id, member_id, payload,
		first_seen_at, last_seen_at) VALUES ($1, 'epoch_changed', $2, $3, jsonb_build_object('snapshot', jsonb_build_object('admittedAtUnixMs', $5::bigint::text)), $4, $4)`,
		snapID, f.org, f.member, now, snapAt.UnixMilli()); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		item reconcile.Item
		want string
	}{
		{"not quarantined", reconcile.Item{RequestID: "nobody-quarantined-this", MemberID: f.member, AdmittedAt: now.Add(-time.Hour), Cost: 1}, reconcile.NotQuarantined},
		{"another member than the record's", reconcile.Item{RequestID: bad, MemberID: f.other, AdmittedAt: now.Add(-time.Hour), Cost: 1}, reconcile.MemberMismatch},
		{"a member of no organization of ours", reconcile.Item{RequestID: bad, MemberID: "om_nobody", AdmittedAt: now.Add(-time.Hour), Cost: 1}, reconcile.UnknownMember},
		{"admitted after the settlement was seen", reconcile.Item{RequestID: bad, MemberID: f.member, AdmittedAt: now.Add(accounting.MaxClockSkew + time.Second), Cost: 1}, reconcile.AdmissionOutOfBounds},
		{"admitted too long before", reconcile.Item{RequestID: bad, MemberID: f.member, AdmittedAt: now.Add(-reconcile.MaxAdmissionLead - time.Second), Cost: 1}, reconcile.AdmissionOutOfBounds},
		{"contradicts the record's snapshot", reconcile.Item{RequestID: snapID, MemberID: f.member, AdmittedAt: snapAt.Add(time.Second), Cost: 1}, reconcile.AdmissionMismatch},
		{"the request has a pending start", reconcile.Item{RequestID: pendingID, MemberID: f.member, AdmittedAt: now.Add(-time.Minute), Cost: 1}, reconcile.AlreadyRecorded},
		{"a legacy counter overlaps", reconcile.Item{RequestID: overlapID, MemberID: f.member, AdmittedAt: legacyAt, Cost: 1}, reconcile.CounterOverlap},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ans := f.reconcile(t, true, tc.item, good)
			if ans.Applied || ans.Results[0].Outcome != tc.want || ans.Results[0].Message == "" {
				t.Fatalf("got %+v, want %s and nothing applied", ans, tc.want)
			}
			if ans.Results[1].Outcome != reconcile.WouldReconcile {
				t.Fatalf("the good request beside it: %s", ans.Results[1].Outcome)
			}
			if got := f.e.Used(t, f.org, f.member, window.Day, good.AdmittedAt); got != 0 {
				t.Fatalf("a refused call charged %d", got)
			}
			if n := f.count(t, `SELECT count(*) FROM usage_quarantined_settlements WHERE reconciled_at IS NOT NULL`); n != 0 {
				t.Fatalf("a refused call marked %d record(s)", n)
			}
		})
	}
	// A legacy empty snapshot names no admission instant: the proof stands alone.
	emptyID := accountingtest.ReqID()
	if _, err := f.e.Store.Pool.Exec(f.e.Ctx, `INSERT INTO usage_quarantined_settlements (request_id, reason, organization_id, member_id, payload,
		first_seen_at, last_seen_at) VALUES ($1, 'epoch_changed', $2, $3, '{"snapshot": {}}', $4, $4)`, emptyID, f.org, f.member, now); err != nil {
		t.Fatal(err)
	}
	if ans := f.reconcile(t, true, reconcile.Item{RequestID: emptyID, MemberID: f.member, AdmittedAt: now.Add(-3 * time.Minute), Cost: 2}); !ans.Applied {
		t.Fatalf("a legacy empty snapshot: %+v", ans)
	}
	// The right proof of the snapshot record is accepted.
	if ans := f.reconcile(t, true, reconcile.Item{RequestID: snapID, MemberID: f.member, AdmittedAt: snapAt, Cost: 3}); !ans.Applied {
		t.Fatalf("the snapshot's own admission instant: %+v", ans)
	}
	if n := f.count(t, `SELECT count(*) FROM usage_request_starts WHERE request_id = $1 AND state = 'pending'`, pendingID); n != 1 {
		t.Fatal("the pending start was touched")
	}
	// The legacy counter breaks the invariant on purpose (no receipt explains it).
	if _, err := f.e.Store.Pool.Exec(f.e.Ctx, `DELETE FROM usage_buckets WHERE legacy`); err != nil {
		t.Fatal(err)
	}
	accountingtest.Check(t, f.e.Store)
}

// One request twice in a call is refused before anything is read or written.
func TestReconcileRefusesARequestTwice(t *testing.T) {
	f := setup(t)
	id := accountingtest.ReqID()
	f.quarantine(t, id, 10)
	it := reconcile.Item{RequestID: id, MemberID: f.member, AdmittedAt: f.e.Clock.Now().Add(-time.Minute), Cost: 10}
	err := f.e.Store.InTx(f.e.Ctx, func(tx pgx.Tx) error {
		_, err := reconcile.Reconcile(f.e.Ctx, tx, auditor{f.e.Ctx}, reconcile.Request{OrganizationID: f.org, Items: []reconcile.Item{it, it},
			ReviewReference: "R", Apply: true}, f.e.Clock.Now())
		return err
	})
	if fe, ok := fault.As(err); !ok || fe.Kind != fault.Invalid {
		t.Fatalf("the same request twice: %v, want an invalid-request error", err)
	}
	if got := f.e.Used(t, f.org, f.member, window.Day, it.AdmittedAt); got != 0 {
		t.Fatalf("charged %d", got)
	}
}

// A fail-open admission (no durable start; its snapshot only in the admitting
// enforcer's memory) reported first through another path (another enforcer replica's
// POST /settle, or a fresh report that overtook the admitting enforcer's settlement
// sitting in retry backoff) is quarantined NO_SNAPSHOT with its real cost. The admitting
// enforcer's own settlement, with the snapshot but nothing measured, then creates the
// event: the quarantined report is applied to it in that transaction, so the real cost
// is charged without an operator, and the record is marked resolved. A reconciliation
// of it afterwards is refused and charges nothing more. Before, the event was charged 0,
// reconciliation refused the record as already_recorded, and nothing re-sent it: the
// member kept 5,000 micro-USD of spend nobody charged.
func TestQuarantinedCostIsChargedWhenTheSnapshotCreatesTheEvent(t *testing.T) {
	f := setup(t)
	admitted := f.e.Clock.Now()
	id := accountingtest.ReqID()
	f.quarantine(t, id, 5000)
	res, err := f.e.Ledger.Settle(f.e.Ctx, []*internalv1.SettleItem{{RequestId: id, OrganizationId: f.org, MemberId: f.member,
		Snapshot: accountingtest.Snapshot(f.org, f.member, admitted, 0)}})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.e.Used(t, f.org, f.member, window.Day, admitted); got != 5000 {
		t.Fatalf("day used %d after the settlement with the snapshot (%v), want 5000: the quarantined real cost was not charged", got, res[0])
	}
	if n := f.count(t, `SELECT count(*) FROM usage_quarantined_settlements WHERE request_id = $1 AND reconciled_at IS NULL`, id); n != 0 {
		t.Fatal("the applied quarantine record is still open for review")
	}
	ans := f.reconcile(t, true, reconcile.Item{RequestID: id, MemberID: f.member, AdmittedAt: admitted, Cost: 5000})
	if ans.Applied || ans.Results[0].Outcome != reconcile.AlreadyReconciled {
		t.Fatalf("reconciliation of the applied record: %+v, want %s", ans.Results, reconcile.AlreadyReconciled)
	}
	if got := f.e.Used(t, f.org, f.member, window.Day, admitted); got != 5000 {
		t.Fatalf("day used %d after the reconciliation, want 5000", got)
	}
	accountingtest.Check(t, f.e.Store)
}

// A request id whose start belongs to another organization is refused as already
// recorded, but the message reads its state as unknown: the caller's organization
// learns nothing of the other's request (before, it read "pending").
func TestAlreadyRecordedHidesAnotherOrganizationsState(t *testing.T) {
	f := setup(t)
	now := f.e.Clock.Now()
	otherOrg, otherMembers := f.e.Org(t, 1)
	id := accountingtest.ReqID()
	if _, err := f.e.Ledger.Start(f.e.Ctx, []*internalv1.StartItem{accountingtest.StartItem(id, otherOrg, otherMembers[0], now.Add(-time.Minute), 0)}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.e.Store.Pool.Exec(f.e.Ctx, `INSERT INTO usage_quarantined_settlements (request_id, reason, organization_id, member_id, payload,
		first_seen_at, last_seen_at) VALUES ($1, 'no_snapshot', $2, $3, '{}', $4, $4)`, id, f.org, f.member, now); err != nil {
		t.Fatal(err)
	}
	ans := f.reconcile(t, false, reconcile.Item{RequestID: id, MemberID: f.member, AdmittedAt: now.Add(-time.Minute), Cost: 1})
	r := ans.Results[0]
	if r.Outcome != reconcile.AlreadyRecorded || !strings.Contains(r.Message, "(unknown)") || strings.Contains(r.Message, "(pending)") {
		t.Fatalf("another organization's start: %+v, want already_recorded with its state unknown", r)
	}
	// The caller's own start still says its state.
	ownID := accountingtest.ReqID()
	if _, err := f.e.Ledger.Start(f.e.Ctx, []*internalv1.StartItem{accountingtest.StartItem(ownID, f.org, f.member, now.Add(-time.Minute), 0)}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.e.Store.Pool.Exec(f.e.Ctx, `INSERT INTO usage_quarantined_settlements (request_id, reason, organization_id, member_id, payload,
		first_seen_at, last_seen_at) VALUES ($1, 'no_snapshot', $2, $3, '{}', $4, $4)`, ownID, f.org, f.member, now); err != nil {
		t.Fatal(err)
	}
	ans = f.reconcile(t, false, reconcile.Item{RequestID: ownID, MemberID: f.member, AdmittedAt: now.Add(-time.Minute), Cost: 1})
	if r := ans.Results[0]; r.Outcome != reconcile.AlreadyRecorded || !strings.Contains(r.Message, "(pending)") {
		t.Fatalf("the organization's own pending start: %+v", r)
	}
}
