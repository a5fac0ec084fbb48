package httpapi_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	at "github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	"github.com/tollgate-dev/tollgate/internal/apitest"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

func TestUsageStatusStates(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	bob := e.AddMember(t, o, "bob", "member")

	// No policy: unlimited, but spend is still shown for all three windows.
	setUsed(t, e, bob, window.Month, 42)
	s := getStatus(t, e, bob)
	if s.State != "unlimited" || len(s.Buckets) != 0 || len(s.Windows) != 3 || s.Windows[2].UsedMicroUsd != 42 || s.Windows[0].UsedMicroUsd != 0 {
		t.Fatalf("unlimited status %+v", s)
	}
	if s.OrganizationID != o.OrgID || s.MemberID != bob.MemberID {
		t.Fatalf("ids %+v", s)
	}

	soft := createPolicy(t, e, o, map[string]any{"name": "Soft", "hardLimit": false, "limits": []map[string]any{{"timeframe": "month", "costUsd": "0.0001"}}})
	hard := createPolicy(t, e, o, map[string]any{"name": "Hard", "limits": []map[string]any{{"timeframe": "day", "costUsd": "0.00005"}}})
	assign(t, e, o, soft.ID, map[string]any{"memberId": bob.MemberID})
	assign(t, e, o, hard.ID, map[string]any{"organization": true})

	// Missing day counter reads as zero.
	s = getStatus(t, e, bob)
	d, m := s.Buckets[s.bucketOf(t, "day")], s.Buckets[s.bucketOf(t, "month")]
	if s.State != "within_limit" || d.UsedMicroUsd != 0 || d.RemainingMicroUsd != 50 || m.UsedMicroUsd != 42 || m.RemainingMicroUsd != 58 {
		t.Fatalf("within status %+v", s)
	}
	if !d.HardLimit || m.HardLimit || d.CanRequestReset || d.ResetRequestStatus != nil || d.ID != bucketID(e, bob, window.Day) {
		t.Fatalf("buckets %+v", s.Buckets)
	}
	// Soft bucket exhausted: over_limit.
	setUsed(t, e, bob, window.Month, 100)
	if s = getStatus(t, e, bob); s.State != "over_limit" {
		t.Fatalf("state %s", s.State)
	}
	// Hard bucket exhausted too: blocked (outranks over_limit), remaining negative on overshoot.
	setUsed(t, e, bob, window.Day, 70)
	s = getStatus(t, e, bob)
	d = s.Buckets[s.bucketOf(t, "day")]
	if s.State != "blocked" || d.RemainingMicroUsd != -20 || d.AllowanceMicroUsd != 50 || !d.CanRequestReset {
		t.Fatalf("blocked status %+v", s)
	}
	// Another member is unaffected by bob's counters.
	if os := getStatus(t, e, o); os.State != "within_limit" {
		t.Fatalf("owner state %s", os.State)
	}
}

func TestUsageStatusCoverage(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	bob := e.AddMember(t, o, "bob", "member")
	ctx := context.Background()

	cov := getStatus(t, e, bob).Coverage
	want := map[string]any{"trackingVersion": float64(0), "captureEnabled": true, "pendingRequests": nil, "settlementReady": false,
		"trackingStartedAt": nil, "historicalCoverage": "unknown", "historicalUnknownReason": "tracking_not_started",
		"lastSettlementAt": nil, "lastSettlementRequestId": nil, "lastSettlementCostBasis": nil, "unpricedRequests": float64(0),
		"incompleteRequests": float64(0), "estimatedRequests": float64(0), "complete": false}
	for k, v := range want {
		if cov[k] != v {
			t.Fatalf("coverage[%s] = %v, want %v (%v)", k, cov[k], v, cov)
		}
	}
	if len(cov) != len(want) {
		t.Fatalf("coverage has %d fields: %v", len(cov), cov)
	}

	// Tracking began today: the current periods predate it.
	_, err := e.Store.Pool.Exec(ctx, `INSERT INTO usage_member_tracking (member_id, organization_id, tracking_version, capture_enabled,
			tracking_started_at, last_settlement_at, last_settlement_request_id, last_settlement_cost_basis, unpriced_requests,
			incomplete_requests, estimated_requests, created_at, updated_at)
		VALUES ($1, $2, 2, true, $3, $3, 'req_7', 'estimate', 1, 0, 3, $3, $3)`, bob.MemberID, o.OrgID, apitest.Start.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// One request admitted and not settled yet: pending.
	_, err = e.Store.Pool.Exec(ctx, `INSERT INTO usage_request_starts (request_id, organization_id, member_id, tracking_version, admitted_at,
			snapshot, state, counted, created_at)
		VALUES ('req_8', $1, $2, 2, $3, '{}', 'pending', true, $3)`, o.OrgID, bob.MemberID, apitest.Start.Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	cov = getStatus(t, e, bob).Coverage
	if cov["trackingVersion"] != float64(2) || cov["pendingRequests"] != float64(1) || cov["settlementReady"] != false ||
		cov["historicalUnknownReason"] != "period_predates_tracking" || cov["trackingStartedAt"] != "2026-09-14T11:00:00.000Z" ||
		cov["lastSettlementRequestId"] != "req_7" || cov["unpricedRequests"] != float64(1) || cov["complete"] != false ||
		cov["lastSettlementCostBasis"] != "estimate" || cov["estimatedRequests"] != float64(3) {
		t.Fatalf("coverage %v", cov)
	}
	// Tracking since before every current window, nothing pending: complete.
	_, err = e.Store.Pool.Exec(ctx, `UPDATE usage_member_tracking SET tracking_started_at = '2026-08-01T00:00:00Z'`)
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.Store.Pool.Exec(ctx, `DELETE FROM usage_request_starts WHERE request_id = 'req_8'`)
	if err != nil {
		t.Fatal(err)
	}
	cov = getStatus(t, e, bob).Coverage
	if cov["settlementReady"] != true || cov["historicalCoverage"] != "tracked_since_epoch" || cov["historicalUnknownReason"] != nil || cov["complete"] != true {
		t.Fatalf("coverage %v", cov)
	}
	// A legacy counter makes history unknown again.
	setUsed(t, e, bob, window.Week, 1)
	if _, err := e.Store.Pool.Exec(ctx, `UPDATE usage_buckets SET legacy = true`); err != nil {
		t.Fatal(err)
	}
	cov = getStatus(t, e, bob).Coverage
	if cov["historicalUnknownReason"] != "legacy_counter" || cov["complete"] != false || cov["settlementReady"] != true {
		t.Fatalf("coverage %v", cov)
	}
}

// TestUsageStatusReadsNeverWrite: a status read of a member with no counters and no
// tracking row creates neither.
func TestUsageStatusReadsNeverWrite(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	bob := e.AddMember(t, o, "bob", "member")
	p := dayPolicy(t, e, o, "Daily", "1", nil)
	assign(t, e, o, p.ID, map[string]any{"organization": true})
	before := usageCount(t, e, `SELECT count(*) FROM audit_events`)
	for i := 0; i < 3; i++ {
		getStatus(t, e, bob)
		e.Do(t, "GET", "/v1/gateway/usage-limits/members/"+bob.MemberID, nil, o.As()...).Expect(t, http.StatusOK)
		e.Do(t, "GET", resetsPath+"/me", nil, bob.As()...).Expect(t, http.StatusOK)
		e.Do(t, "GET", resetsPath+"?view=history", nil, o.As()...).Expect(t, http.StatusOK)
	}
	if n := usageCount(t, e, `SELECT count(*) FROM usage_buckets`) + usageCount(t, e, `SELECT count(*) FROM usage_member_tracking`) +
		usageCount(t, e, `SELECT count(*) FROM audit_events`) - before; n != 0 {
		t.Fatalf("reads wrote %d rows", n)
	}
}

// TestUsageWindowBoundary: the day resets at 05:00:00 UTC to the second; the bucket of
// 04:59:59 is the previous day's, and a new window's missing counter reads as zero.
func TestUsageWindowBoundary(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	p := createPolicy(t, e, o, map[string]any{"name": "All", "limits": []map[string]any{
		{"timeframe": "day", "costUsd": "1"}, {"timeframe": "week", "costUsd": "5"}, {"timeframe": "month", "costUsd": "20"}}})
	assign(t, e, o, p.ID, map[string]any{"organization": true})

	e.Clock.Set(time.Date(2026, 9, 15, 4, 59, 59, 0, time.UTC))
	setUsed(t, e, o, window.Day, 1_000_000)
	s := getStatus(t, e, o)
	d := s.Buckets[s.bucketOf(t, "day")]
	w := s.Buckets[s.bucketOf(t, "week")]
	if d.WindowStart != "2026-09-14T05:00:00.000Z" || d.ResetAt != "2026-09-15T05:00:00.000Z" || d.UsedMicroUsd != 1_000_000 || s.State != "blocked" {
		t.Fatalf("before reset: %+v", d)
	}
	if w.WindowStart != "2026-09-14T05:00:00.000Z" || w.ResetAt != "2026-09-21T05:00:00.000Z" {
		t.Fatalf("week %+v", w)
	}
	e.Clock.Set(time.Date(2026, 9, 15, 5, 0, 0, 0, time.UTC))
	s = getStatus(t, e, o)
	d2 := s.Buckets[s.bucketOf(t, "day")]
	if d2.WindowStart != "2026-09-15T05:00:00.000Z" || d2.ResetAt != "2026-09-16T05:00:00.000Z" || d2.UsedMicroUsd != 0 || d2.ID == d.ID || s.State != "within_limit" {
		t.Fatalf("after reset: %+v", d2)
	}
	if s.Buckets[s.bucketOf(t, "week")].ID != w.ID {
		t.Fatal("the week changed at a daily reset")
	}
	// The month containing 2026-10-01T04:00Z started 2026-09-01T05:00Z.
	e.Clock.Set(time.Date(2026, 10, 1, 4, 0, 0, 0, time.UTC))
	// Sessions last a week: sign in again at the new instant.
	var in struct{ Token string }
	e.Do(t, "POST", "/v1/auth/sign-in", map[string]string{"email": o.Email, "password": apitest.Password}).Expect(t, http.StatusOK).Decode(t, &in)
	o.Token = in.Token
	s = getStatus(t, e, o)
	if m := s.Buckets[s.bucketOf(t, "month")]; m.WindowStart != "2026-09-01T05:00:00.000Z" || m.ResetAt != "2026-10-01T05:00:00.000Z" {
		t.Fatalf("month %+v", m)
	}
}

// TestUsageStatusCoverageCompleteInLaterPeriods: spec rule 13, "Later fully tracked periods
// become complete only when no pending or incomplete receipts remain". An incomplete
// receipt keeps the periods it was charged to incomplete, not every later one; the
// incompleteRequests count still counts every tracked settled receipt (rule 18).
func TestUsageStatusCoverageCompleteInLaterPeriods(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	alice := e.AddMember(t, owner, "alice", "member")
	l := ledgerFor(t, e)
	settle := func(complete bool) {
		t.Helper()
		id := at.ReqID()
		if o := startAs(t, l, alice.OrgID, alice.MemberID, id, e.Clock.Now(), 0); o != internalv1.StartOutcome_START_OUTCOME_RECORDED {
			t.Fatalf("start %v", o)
		}
		res, err := l.Settle(context.Background(), []*internalv1.SettleItem{{RequestId: id, Model: "gpt-4o-mini",
			InputTokens: 1000, OutputTokens: 1000, Complete: complete}})
		if err != nil || res[0].Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED {
			t.Fatalf("settle %v %v", res, err)
		}
	}
	// September: a stream cut short, an incomplete receipt of September's periods.
	settle(false)
	if cov := getStatus(t, e, alice).Coverage; cov["complete"] != false || cov["incompleteRequests"] != float64(1) {
		t.Fatalf("September: coverage %v", cov)
	}
	// November: every current period began after tracking did, and holds complete
	// receipts only.
	e.Clock.Set(time.Date(2026, 11, 18, 12, 0, 0, 0, time.UTC))
	alice.User = e.SignIn(t, alice.User) // the September session expired
	settle(true)
	cov := getStatus(t, e, alice).Coverage
	if cov["historicalCoverage"] != "tracked_since_epoch" || cov["historicalUnknownReason"] != nil ||
		cov["settlementReady"] != true || cov["pendingRequests"] != float64(0) {
		t.Fatalf("November: coverage %v", cov)
	}
	if cov["complete"] != true || cov["incompleteRequests"] != float64(1) {
		t.Fatalf("November's periods are fully tracked, settled and hold no incomplete receipt: coverage %v, "+
			"want complete true and incompleteRequests 1 (September's receipt, still counted)", cov)
	}
	// An incomplete receipt of November makes November's periods incomplete.
	settle(false)
	if cov := getStatus(t, e, alice).Coverage; cov["complete"] != false || cov["incompleteRequests"] != float64(2) {
		t.Fatalf("after an incomplete receipt in November: coverage %v", cov)
	}
}

// TestUsageStatusCoverageWhileSuspended: spec rules 13 and 14. A suspension is how an
// operator lets a writer without durable tracking (a rollback, a legacy writer) charge
// a member's counters, so no period is fully tracked while capture is suspended, not
// even one that began after the suspend: its history is unknown, as it reads once
// capture resumes (resume restarts trackingStartedAt). Before, such a period read
// tracked_since_epoch and complete while suspended, and unknown after the resume.
func TestUsageStatusCoverageWhileSuspended(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	bob := e.AddMember(t, owner, "bob", "member")
	e.Clock.Set(time.Date(2026, 9, 28, 12, 0, 0, 0, time.UTC))
	owner.User, bob.User = e.SignIn(t, owner.User), e.SignIn(t, bob.User)
	e.Do(t, "POST", suspendPath, captureBody(bob.MemberID, 0, true), owner.As()...).Expect(t, http.StatusOK)
	unknown := func(when string) {
		t.Helper()
		cov := getStatus(t, e, bob).Coverage
		if cov["historicalCoverage"] != "unknown" || cov["historicalUnknownReason"] != "period_predates_tracking" ||
			cov["complete"] != false {
			t.Fatalf("%s: coverage %v, want unknown history (period_predates_tracking), not complete", when, cov)
		}
	}
	unknown("at the suspend")
	// Monday 2026-10-05 06:00Z: the day, the week and October all began after the
	// suspend, while capture stayed suspended.
	e.Clock.Set(time.Date(2026, 10, 5, 6, 0, 0, 0, time.UTC))
	owner.User, bob.User = e.SignIn(t, owner.User), e.SignIn(t, bob.User) // the sessions expired
	if cov := getStatus(t, e, bob).Coverage; cov["captureEnabled"] != false || cov["settlementReady"] != true {
		t.Fatalf("suspended: coverage %v", cov)
	}
	unknown("periods begun during the suspension")
	e.Do(t, "POST", resumePath, captureBody(bob.MemberID, 2, true), owner.As()...).Expect(t, http.StatusOK)
	unknown("after the resume")
}

// TestUsageStatusAfterGuardRefusal: when the in-flight guard refuses a start, the status
// read for the same member at the same instant says within_limit (settled spend is below
// the allowance) and shows the reservation. So the enforcer's refusal carries
// service_gateway_in_flight_reserved and this state, never the specification's block
// (service_gateway_usage_limit_exceeded with blocked), which a client corroborates with
// this read and could never corroborate here (enforcer/gate/reason.go).
func TestUsageStatusAfterGuardRefusal(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	alice := e.AddMember(t, owner, "alice", "member")
	p := dayPolicy(t, e, owner, "Five cents", "0.05", map[string]any{"inFlight": map[string]any{"reserve": true, "reservationCostUsd": "0.01"}})
	assign(t, e, owner, p.ID, map[string]any{"memberId": alice.MemberID})
	setUsed(t, e, alice, window.Day, 40_000)
	l := ledgerFor(t, e)
	start := func() internalv1.StartOutcome {
		t.Helper()
		it := at.StartItem(at.ReqID(), alice.OrgID, alice.MemberID, e.Clock.Now(), 0)
		day := it.Snapshot.Buckets[0]
		day.PolicyId, day.PolicyRevision, day.BaseMicroUsd, day.HardLimit, day.ReserveInFlight = p.ID, p.Revision, 50_000, true, true
		it.ReservationMicroUsd = 10_000
		res, err := l.Start(context.Background(), []*internalv1.StartItem{it})
		if err != nil {
			t.Fatal(err)
		}
		return res[0].Outcome
	}
	if o := start(); o != internalv1.StartOutcome_START_OUTCOME_RECORDED {
		t.Fatalf("first start %v", o)
	}
	if o := start(); o != internalv1.StartOutcome_START_OUTCOME_LIMIT_RESERVED {
		t.Fatalf("second start %v, want limit_reserved", o)
	}
	s := getStatus(t, e, alice)
	if s.State != "within_limit" || len(s.Buckets) != 1 || s.Buckets[0].UsedMicroUsd != 40_000 ||
		s.Buckets[0].ReservedMicroUsd != 10_000 || s.Buckets[0].AllowanceMicroUsd != 50_000 {
		t.Fatalf("status after the guard's refusal: %+v", s)
	}
}

// TestUsageStatusReservedOnlyWhereTheWinnerReserves: a bucket shows the reservations in
// flight only where its winning policy's in-flight guard reserves, since only there does
// the guard count them against the allowance. A month won by a policy without a guard
// showed the day policy's reservations (40,000 used and 10,000 reserved of 50,000), which
// reads as a month at its limit, while the guard admitted the next request. The window
// view still shows every reservation admitted in the window.
func TestUsageStatusReservedOnlyWhereTheWinnerReserves(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	alice := e.AddMember(t, owner, "alice", "member")
	day := dayPolicy(t, e, owner, "Daily", "0.05", map[string]any{"inFlight": map[string]any{"reserve": true, "reservationCostUsd": "0.01"}})
	month := createPolicy(t, e, owner, map[string]any{"name": "Monthly", "limits": []map[string]any{{"timeframe": "month", "costUsd": "0.05"}}})
	assign(t, e, owner, day.ID, map[string]any{"memberId": alice.MemberID})
	assign(t, e, owner, month.ID, map[string]any{"memberId": alice.MemberID})
	setUsed(t, e, alice, window.Day, 10_000)
	setUsed(t, e, alice, window.Month, 40_000)
	l := ledgerFor(t, e)
	start := func(version int64) internalv1.StartOutcome {
		t.Helper()
		it := at.StartItem(at.ReqID(), alice.OrgID, alice.MemberID, e.Clock.Now(), version)
		d, m := it.Snapshot.Buckets[0], it.Snapshot.Buckets[2]
		d.PolicyId, d.PolicyRevision, d.BaseMicroUsd, d.HardLimit, d.ReserveInFlight = day.ID, day.Revision, 50_000, true, true
		m.PolicyId, m.PolicyRevision, m.BaseMicroUsd, m.HardLimit = month.ID, month.Revision, 50_000, true
		it.ReservationMicroUsd = 10_000
		res, err := l.Start(context.Background(), []*internalv1.StartItem{it})
		if err != nil {
			t.Fatal(err)
		}
		return res[0].Outcome
	}
	if o := start(0); o != internalv1.StartOutcome_START_OUTCOME_RECORDED {
		t.Fatalf("start %v", o)
	}
	s := getStatus(t, e, alice)
	if r := s.Buckets[s.bucketOf(t, "day")].ReservedMicroUsd; r != 10_000 {
		t.Fatalf("day bucket reserved %d, want 10000 (its policy reserves)", r)
	}
	if r := s.Buckets[s.bucketOf(t, "month")].ReservedMicroUsd; r != 0 {
		t.Fatalf("month bucket reserved %d, want 0 (its policy has no guard; the guard does not count it there)", r)
	}
	var raw struct {
		Windows []struct {
			ReservedMicroUsd int64 `json:"reservedMicroUsd"`
		} `json:"windows"`
	}
	e.Do(t, "GET", mePath, nil, alice.As()...).Expect(t, http.StatusOK).Decode(t, &raw)
	if raw.Windows[2].ReservedMicroUsd != 10_000 {
		t.Fatalf("month window reserved %d, want 10000 (every reservation admitted in it)", raw.Windows[2].ReservedMicroUsd)
	}
	// The guard agrees: the month (40,000 used, 10,000 reserved, of 50,000) does not
	// refuse the next start; the day (10,000 used, 10,000 reserved) does not either.
	if o := start(1); o != internalv1.StartOutcome_START_OUTCOME_RECORDED {
		t.Fatalf("second start %v, want recorded", o)
	}
}
