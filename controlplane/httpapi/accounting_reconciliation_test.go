package httpapi_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	at "github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	"github.com/tollgate-dev/tollgate/internal/apitest"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

const (
	quarantinedPath = "/v1/gateway/usage-reconciliation/quarantined"
	reconcilePath   = "/v1/gateway/usage-reconciliation/reconcile"
)

type quarantinePage struct {
	Quarantined []struct {
		RequestID      string
		Reason         string
		MemberID       *string
		Settlement     map[string]any
		Reconciliation *struct {
			ReviewReference string
			CostMicroUsd    int64
		}
	}
	HasMore    bool
	NextCursor *string
}

type reconcileAnswer struct {
	Applied bool
	Results []struct {
		RequestID string
		Outcome   string
		Message   *string
		Buckets   []struct{ Timeframe, WindowStart string }
	}
}

// The review list pages the organization's quarantined settlements (owners and admins
// only); a reconciliation with proof charges the admission windows once, shows in the
// member's status and in the list, and a second try is refused.
func TestReviewedReconciliation(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	alice := e.AddMember(t, owner, "alice", "member")
	l := ledgerFor(t, e)
	ids := []string{"req_q1", "req_q2", "req_q3"}
	for _, id := range ids {
		res, err := l.Settle(context.Background(), []*internalv1.SettleItem{{RequestId: id, OrganizationId: owner.OrgID, MemberId: alice.MemberID,
			UpstreamCostMicroUsd: at.Cost(400), Complete: true}})
		if err != nil || res[0].GetOutcome() != internalv1.SettleOutcome_SETTLE_OUTCOME_NO_SNAPSHOT {
			t.Fatalf("quarantine %s: %v %v", id, res, err)
		}
		e.Clock.Advance(time.Second)
	}

	e.Do(t, "GET", quarantinedPath, nil, alice.As()...).ExpectError(t, http.StatusForbidden, "forbidden")
	e.Do(t, "GET", quarantinedPath+"?state=closed", nil, owner.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
	var page quarantinePage
	e.Do(t, "GET", quarantinedPath+"?limit=2", nil, owner.As()...).Expect(t, http.StatusOK).Decode(t, &page)
	if len(page.Quarantined) != 2 || !page.HasMore || page.Quarantined[0].RequestID != "req_q1" || page.Quarantined[0].Reason != "no_snapshot" ||
		page.Quarantined[0].Settlement["requestId"] != "req_q1" || page.Quarantined[0].Reconciliation != nil {
		t.Fatalf("first page %+v", page)
	}
	e.Do(t, "GET", quarantinedPath+"?limit=2&cursor="+url.QueryEscape(*page.NextCursor), nil, owner.As()...).Expect(t, http.StatusOK).Decode(t, &page)
	if len(page.Quarantined) != 1 || page.HasMore || page.Quarantined[0].RequestID != "req_q3" {
		t.Fatalf("second page %+v", page)
	}
	e.Do(t, "GET", quarantinedPath+"?state=all&cursor="+"bm9wZQ", nil, owner.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")

	admitted := e.Clock.Now().Add(-time.Hour)
	body := func(apply bool, cost int64) map[string]any {
		return map[string]any{"items": []map[string]any{{"requestId": "req_q2", "memberId": alice.MemberID,
			"admittedAt": admitted.Format(time.RFC3339Nano), "costMicroUsd": cost}}, "reviewReference": "INC-7", "apply": apply}
	}
	e.Do(t, "POST", reconcilePath, body(true, 400), alice.As()...).ExpectError(t, http.StatusForbidden, "forbidden")
	e.Do(t, "POST", reconcilePath, body(true, 1_000_000_001), owner.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
	e.Do(t, "POST", reconcilePath, map[string]any{"items": []map[string]any{{"requestId": "req_q2", "memberId": alice.MemberID,
		"admittedAt": "yesterday", "costMicroUsd": 1}}, "reviewReference": "x"}, owner.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")

	var ans reconcileAnswer
	e.Do(t, "POST", reconcilePath, body(false, 400), owner.As()...).Expect(t, http.StatusOK).Decode(t, &ans)
	if ans.Applied || ans.Results[0].Outcome != "would_reconcile" || len(ans.Results[0].Buckets) != 3 {
		t.Fatalf("preview %+v", ans)
	}
	if used := getStatus(t, e, alice).Windows[0].UsedMicroUsd; used != 0 {
		t.Fatalf("a preview charged %d", used)
	}
	e.Do(t, "POST", reconcilePath, body(true, 400), owner.As()...).Expect(t, http.StatusOK).Decode(t, &ans)
	if !ans.Applied || ans.Results[0].Outcome != "reconciled" || ans.Results[0].Message != nil {
		t.Fatalf("apply %+v", ans)
	}
	for _, w := range getStatus(t, e, alice).Windows {
		if w.UsedMicroUsd != 400 {
			t.Errorf("%s used %d after reconciliation, want 400", w.Timeframe, w.UsedMicroUsd)
		}
	}
	e.Do(t, "POST", reconcilePath, body(true, 400), owner.As()...).Expect(t, http.StatusOK).Decode(t, &ans)
	if ans.Applied || ans.Results[0].Outcome != "already_reconciled" || ans.Results[0].Message == nil {
		t.Fatalf("second try %+v", ans)
	}
	if used := getStatus(t, e, alice).Windows[0].UsedMicroUsd; used != 400 {
		t.Fatalf("after a second try: used %d", used)
	}
	e.Do(t, "GET", quarantinedPath+"?state=reconciled", nil, owner.As()...).Expect(t, http.StatusOK).Decode(t, &page)
	if len(page.Quarantined) != 1 || page.Quarantined[0].Reconciliation == nil || page.Quarantined[0].Reconciliation.ReviewReference != "INC-7" ||
		page.Quarantined[0].Reconciliation.CostMicroUsd != 400 {
		t.Fatalf("reconciled view %+v", page)
	}
	e.Do(t, "GET", quarantinedPath, nil, owner.As()...).Expect(t, http.StatusOK).Decode(t, &page)
	if len(page.Quarantined) != 2 {
		t.Fatalf("open records after one reconciliation: %d, want 2", len(page.Quarantined))
	}
	if n := usageCount(t, e, `SELECT count(*) FROM audit_events WHERE action = 'usage.reconciliation.reconcile'`); n != 1 {
		t.Fatalf("%d reconciliation audit events, want 1", n)
	}
}
