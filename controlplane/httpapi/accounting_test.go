package httpapi_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	at "github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	"github.com/tollgate-dev/tollgate/controlplane/ledger"
	"github.com/tollgate-dev/tollgate/internal/apitest"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

const (
	suspendPath = "/v1/gateway/usage-capture/suspend"
	resumePath  = "/v1/gateway/usage-capture/resume"
	pendingPath = "/v1/gateway/usage-recovery/pending"
	recoverPath = "/v1/gateway/usage-recovery/recover"
)

// ledgerFor runs a ledger on the API's database and clock (no mirror).
func ledgerFor(t *testing.T, e *apitest.Env) *ledger.Ledger {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	l := ledger.New(ledger.Deps{Store: e.Store, Clock: e.Clock, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	go l.Run(ctx)
	return l
}

func startAs(t *testing.T, l *ledger.Ledger, org, member, id string, admitted time.Time, version int64) internalv1.StartOutcome {
	t.Helper()
	res, err := l.Start(context.Background(), []*internalv1.StartItem{at.StartItem(id, org, member, admitted, version)})
	if err != nil {
		t.Fatal(err)
	}
	return res[0].Outcome
}

func captureBody(member string, version int64, apply bool) map[string]any {
	return map[string]any{"members": []map[string]any{{"memberId": member, "trackingVersion": version}},
		"reviewReference": "CHG-42", "apply": apply}
}

func TestCaptureFence(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	alice := e.AddMember(t, owner, "alice", "member")
	org := owner.OrgID
	l := ledgerFor(t, e)
	setUsed(t, e, alice, window.Day, 900)

	e.Do(t, "POST", suspendPath, captureBody(alice.MemberID, 0, true), alice.As()...).ExpectError(t, http.StatusForbidden, "forbidden")
	e.Do(t, "POST", suspendPath, map[string]any{"members": []any{}, "reviewReference": ""}, owner.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
	many := make([]map[string]any, 101)
	for i := range many {
		many[i] = map[string]any{"memberId": alice.MemberID, "trackingVersion": 0}
	}
	e.Do(t, "POST", suspendPath, map[string]any{"members": many, "reviewReference": "x"}, owner.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
	e.Do(t, "POST", suspendPath, captureBody("om_nobody", 0, true), owner.As()...).ExpectError(t, http.StatusNotFound, "member_not_found")

	// A preview says what would happen and changes nothing.
	var preview struct {
		Applied bool
		Members []struct {
			TrackingVersion   int64
			CaptureEnabled    bool
			TrackingStartedAt *string
		}
	}
	e.Do(t, "POST", suspendPath, captureBody(alice.MemberID, 0, false), owner.As()...).Expect(t, http.StatusOK).Decode(t, &preview)
	if preview.Applied || preview.Members[0].TrackingVersion != 2 || preview.Members[0].CaptureEnabled || preview.Members[0].TrackingStartedAt != nil {
		t.Fatalf("preview %+v", preview)
	}
	if cv := getStatus(t, e, alice).Coverage; cv["trackingVersion"] != float64(0) || cv["captureEnabled"] != true {
		t.Fatalf("preview wrote: %v", cv)
	}
	e.Do(t, "POST", suspendPath, captureBody(alice.MemberID, 1, true), owner.As()...).ExpectError(t, http.StatusConflict, "capture_version_conflict")

	// Suspend: a new version and epoch, spend untouched, new starts refused.
	e.Clock.Advance(time.Minute)
	e.Do(t, "POST", suspendPath, captureBody(alice.MemberID, 0, true), owner.As()...).Expect(t, http.StatusOK)
	st := getStatus(t, e, alice)
	cv := st.Coverage
	if cv["trackingVersion"] != float64(2) || cv["captureEnabled"] != false || cv["historicalCoverage"] != "unknown" ||
		cv["historicalUnknownReason"] != "period_predates_tracking" || st.Windows[0].UsedMicroUsd != 900 {
		t.Fatalf("after suspend: %v, day used %d", cv, st.Windows[0].UsedMicroUsd)
	}
	now := e.Clock.Now()
	if o := startAs(t, l, org, alice.MemberID, at.ReqID(), now, 2); o != internalv1.StartOutcome_START_OUTCOME_CAPTURE_SUSPENDED {
		t.Fatalf("start while suspended: %v", o)
	}
	e.Do(t, "POST", suspendPath, captureBody(alice.MemberID, 2, true), owner.As()...).ExpectError(t, http.StatusConflict, "capture_already_suspended")

	// Resume: another version; admissions of older versions are stale.
	e.Do(t, "POST", resumePath, captureBody(alice.MemberID, 1, true), owner.As()...).ExpectError(t, http.StatusConflict, "capture_version_conflict")
	e.Do(t, "POST", resumePath, captureBody(alice.MemberID, 2, true), owner.As()...).Expect(t, http.StatusOK)
	if o := startAs(t, l, org, alice.MemberID, at.ReqID(), now, 2); o != internalv1.StartOutcome_START_OUTCOME_EPOCH_CHANGED {
		t.Fatalf("start from before the resume: %v", o)
	}
	if o := startAs(t, l, org, alice.MemberID, at.ReqID(), now, 0); o != internalv1.StartOutcome_START_OUTCOME_EPOCH_CHANGED {
		t.Fatalf("start from before tracking: %v", o)
	}
	if o := startAs(t, l, org, alice.MemberID, at.ReqID(), now, 3); o != internalv1.StartOutcome_START_OUTCOME_RECORDED {
		t.Fatalf("start at the current version: %v", o)
	}
	e.Do(t, "POST", resumePath, captureBody(alice.MemberID, 3, true), owner.As()...).ExpectError(t, http.StatusConflict, "capture_not_suspended")
	cv = getStatus(t, e, alice).Coverage
	if cv["trackingVersion"] != float64(3) || cv["captureEnabled"] != true || cv["pendingRequests"] != float64(1) || getStatus(t, e, alice).Windows[0].UsedMicroUsd != 900 {
		t.Fatalf("after resume: %v", cv)
	}
	if n := usageCount(t, e, `SELECT count(*) FROM audit_events WHERE action IN ('usage.capture.suspend', 'usage.capture.resume')`); n != 2 {
		t.Fatalf("%d capture audit events, want 2 (previews and refusals are not audited)", n)
	}
}

// A member whose tracking started with a first start (version 1) and was never fenced
// keeps accepting snapshots taken before the row existed (version 0): same epoch.
func TestFirstUseIsNotAnEpochChange(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	l := ledgerFor(t, e)
	now := e.Clock.Now()
	for i := range 3 {
		if o := startAs(t, l, owner.OrgID, owner.MemberID, at.ReqID(), now, int64(i%2)); o != internalv1.StartOutcome_START_OUTCOME_RECORDED {
			t.Fatalf("start %d: %v", i, o)
		}
	}
}

func TestAbandonmentRecovery(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	alice := e.AddMember(t, owner, "alice", "member")
	org := owner.OrgID
	l := ledgerFor(t, e)
	old := e.Clock.Now().Add(-2 * time.Hour)
	ids := []string{"req_a", "req_b", "req_c"}
	for i, id := range ids {
		startAs(t, l, org, alice.MemberID, id, old.Add(time.Duration(i)*time.Second), 0)
	}
	startAs(t, l, org, alice.MemberID, "req_recent", e.Clock.Now().Add(-10*time.Minute), 0)

	e.Do(t, "GET", pendingPath, nil, alice.As()...).ExpectError(t, http.StatusForbidden, "forbidden")
	var page struct {
		Pending []struct {
			RequestID string
			MemberID  string
			Buckets   []struct{ BucketID, Timeframe string }
		}
		HasMore    bool
		NextCursor *string
	}
	e.Do(t, "GET", pendingPath+"?limit=2", nil, owner.As()...).Expect(t, http.StatusOK).Decode(t, &page)
	if len(page.Pending) != 2 || page.Pending[0].RequestID != "req_a" || !page.HasMore || page.NextCursor == nil || len(page.Pending[0].Buckets) != 3 {
		t.Fatalf("first page %+v", page)
	}
	e.Do(t, "GET", pendingPath+"?limit=2&cursor="+url.QueryEscape(*page.NextCursor), nil, owner.As()...).Expect(t, http.StatusOK).Decode(t, &page)
	if len(page.Pending) != 1 || page.Pending[0].RequestID != "req_c" || page.HasMore {
		t.Fatalf("second page %+v", page)
	}
	e.Do(t, "GET", pendingPath+"?limit=2&memberId=x&cursor="+url.QueryEscape("bm9wZQ"), nil, owner.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
	before := url.QueryEscape(e.Clock.Now().Format(time.RFC3339))
	e.Do(t, "GET", pendingPath+"?before="+before, nil, owner.As()...).Expect(t, http.StatusOK).Decode(t, &page)
	if len(page.Pending) != 4 {
		t.Fatalf("with before=now: %d pending", len(page.Pending))
	}
	// A cutoff ahead of the clock takes requests still in flight: a typed year (2027 for
	// 2026) would have recover --apply close every one. Up to a minute ahead is taken,
	// for an operator's clock a little ahead of the control plane's (a restore's
	// runbook lists with now+1s).
	soon := url.QueryEscape(e.Clock.Now().Add(30 * time.Second).Format(time.RFC3339))
	e.Do(t, "GET", pendingPath+"?before="+soon, nil, owner.As()...).Expect(t, http.StatusOK)
	typo := url.QueryEscape(e.Clock.Now().AddDate(1, 0, 0).Format(time.RFC3339))
	e.Do(t, "GET", pendingPath+"?before="+typo, nil, owner.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")

	body := func(apply bool, ids ...string) map[string]any {
		return map[string]any{"requestIds": ids, "reviewReference": "INC-7", "apply": apply}
	}
	var res struct {
		Applied bool
		Results []struct {
			RequestID, Outcome string
			State              *string
		}
	}
	e.Do(t, "POST", recoverPath, body(false, "req_a"), owner.As()...).Expect(t, http.StatusOK).Decode(t, &res)
	if res.Applied || res.Results[0].Outcome != "would_recover" {
		t.Fatalf("preview %+v", res)
	}
	if getStatus(t, e, alice).Coverage["pendingRequests"] != float64(4) {
		t.Fatal("preview wrote")
	}
	e.Do(t, "POST", recoverPath, map[string]any{"requestIds": []string{strings.Repeat("x", 129)}, "reviewReference": "r"}, owner.As()...).
		ExpectError(t, http.StatusBadRequest, "invalid_request")
	e.Do(t, "POST", recoverPath, body(true, "req_a", "req_b", "req_missing"), owner.As()...).Expect(t, http.StatusOK).Decode(t, &res)
	if got := []string{res.Results[0].Outcome, res.Results[1].Outcome, res.Results[2].Outcome}; got[0] != "recovered" || got[1] != "recovered" || got[2] != "not_found" {
		t.Fatalf("recover %v", got)
	}
	e.Do(t, "POST", recoverPath, body(true, "req_a"), owner.As()...).Expect(t, http.StatusOK).Decode(t, &res)
	if res.Results[0].Outcome != "not_pending" || *res.Results[0].State != "recovered" {
		t.Fatalf("second recovery %+v", res.Results[0])
	}
	cv := getStatus(t, e, alice).Coverage
	if cv["pendingRequests"] != float64(2) || cv["unpricedRequests"] != float64(2) || cv["incompleteRequests"] != float64(2) {
		t.Fatalf("after recovery: %v", cv)
	}
	var oldDayUnpriced int64
	if err := e.Store.Pool.QueryRow(context.Background(), `SELECT unpriced_requests FROM usage_buckets WHERE id = $1`,
		window.BucketID(org, alice.MemberID, window.Day, window.Of(window.Day, old).Start)).Scan(&oldDayUnpriced); err != nil || oldDayUnpriced != 2 {
		t.Fatalf("the admission day counts %d unpriced (%v)", oldDayUnpriced, err)
	}

	// The real settlement arrives late: its known cost is promoted once.
	settle := func(cost int64) *internalv1.SettleResult {
		r, err := l.Settle(context.Background(), []*internalv1.SettleItem{{RequestId: "req_a", UpstreamCostMicroUsd: at.Cost(cost), Complete: true}})
		if err != nil {
			t.Fatal(err)
		}
		return r[0]
	}
	if r := settle(500); r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_PROMOTED || r.CostMicroUsd != 500 {
		t.Fatalf("late settlement %v", r)
	}
	if r := settle(500); r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_DUPLICATE {
		t.Fatalf("repeat %v", r)
	}
	if r := settle(900); r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_COST_CONFLICT {
		t.Fatalf("second promotion %v", r)
	}
	cv = getStatus(t, e, alice).Coverage
	if cv["pendingRequests"] != float64(2) || cv["unpricedRequests"] != float64(1) || cv["incompleteRequests"] != float64(1) {
		t.Fatalf("after promotion: %v", cv)
	}
	var used int64
	_ = e.Store.Pool.QueryRow(context.Background(), `SELECT used_micro_usd FROM usage_buckets WHERE id = $1`,
		window.BucketID(org, alice.MemberID, window.Day, window.Of(window.Day, old).Start)).Scan(&used)
	if used != 500 {
		t.Fatalf("admission day used %d", used)
	}
	if n := usageCount(t, e, `SELECT count(*) FROM audit_events WHERE action = 'usage.recovery.recover'`); n != 2 {
		t.Fatalf("%d recovery audit events", n)
	}
	at.Check(t, e.Store)
}

// The first finding, through the status read: eight gpt-4o-mini calls under a
// 0.05 USD hard limit, with no organization prices, used to read usedMicroUsd 0,
// unpricedRequests 8, within_limit. The shipped catalog prices them now; a model nobody
// priced is charged at the fallback and counted unpriced; an estimated receipt is
// counted and named by the coverage.
func TestStatusShowsCatalogPricesFallbackAndCostBasis(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	alice := e.AddMember(t, owner, "alice", "member")
	p := dayPolicy(t, e, owner, "Five cents", "0.05", nil)
	assign(t, e, owner, p.ID, map[string]any{"memberId": alice.MemberID})
	l := ledgerFor(t, e)
	settle := func(it *internalv1.SettleItem) *internalv1.SettleResult {
		t.Helper()
		it.RequestId = at.ReqID()
		if o := startAs(t, l, alice.OrgID, alice.MemberID, it.RequestId, e.Clock.Now(), 0); o != internalv1.StartOutcome_START_OUTCOME_RECORDED {
			t.Fatalf("start %v", o)
		}
		res, err := l.Settle(context.Background(), []*internalv1.SettleItem{it})
		if err != nil || res[0].Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED {
			t.Fatalf("settle %v %v", res, err)
		}
		return res[0]
	}
	for range 8 {
		// 20k input and 10k output tokens: 3000 + 6000 micro-USD at the catalog's price.
		settle(&internalv1.SettleItem{Model: "gpt-4o-mini-2024-07-18", InputTokens: 20_000, OutputTokens: 10_000, Complete: true})
	}
	s := getStatus(t, e, alice)
	if s.State != "blocked" || s.Buckets[s.bucketOf(t, "day")].UsedMicroUsd != 72_000 {
		t.Fatalf("status %s, used %d", s.State, s.Buckets[0].UsedMicroUsd)
	}
	cov := getStatus(t, e, alice).Coverage
	if cov["unpricedRequests"] != float64(0) || cov["lastSettlementCostBasis"] != "reported_usage" || cov["estimatedRequests"] != float64(0) {
		t.Fatalf("coverage %v", cov)
	}
	if r := settle(&internalv1.SettleItem{Model: "acme-next", OutputTokens: 1000, Complete: true}); r.CostSource != "fallback" || r.CostMicroUsd <= 0 {
		t.Fatalf("unknown model %v", r)
	}
	settle(&internalv1.SettleItem{Model: "gpt-4o-mini", OutputTokens: 1000, UsageEstimated: true, Complete: true})
	cov = getStatus(t, e, alice).Coverage
	if cov["unpricedRequests"] != float64(1) || cov["estimatedRequests"] != float64(1) || cov["incompleteRequests"] != float64(1) ||
		cov["lastSettlementCostBasis"] != "estimate" {
		t.Fatalf("coverage %v", cov)
	}
}
