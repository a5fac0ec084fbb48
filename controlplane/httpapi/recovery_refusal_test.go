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

// A request closed by abandonment recovery, then reported refused by a front door
// (Envoy's request-body filter, whose late refusal Envoy ignored), then answered: the
// answer is the request's cost and is charged to its admission day. The refusal resolved
// the recovered receipt as a final known 0 (promoted), so the answer met a final
// receipt, COST_CONFLICT, and a request served upstream was free.
func TestAnswerAfterARefusalOfARecoveredStartIsCharged(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	alice := e.AddMember(t, owner, "alice", "member")
	org := owner.OrgID
	l := ledgerFor(t, e)
	old := e.Clock.Now().Add(-2 * time.Hour)
	startAs(t, l, org, alice.MemberID, "req_r", old, 0)
	var res struct{ Results []struct{ Outcome string } }
	e.Do(t, "POST", recoverPath, map[string]any{"requestIds": []string{"req_r"}, "reviewReference": "INC-8", "apply": true},
		owner.As()...).Expect(t, http.StatusOK).Decode(t, &res)
	if res.Results[0].Outcome != "recovered" {
		t.Fatalf("recover %+v", res)
	}
	settle := func(it *internalv1.SettleItem) *internalv1.SettleResult {
		t.Helper()
		it.RequestId = "req_r"
		r, err := l.Settle(context.Background(), []*internalv1.SettleItem{it})
		if err != nil {
			t.Fatal(err)
		}
		return r[0]
	}
	if r := settle(&internalv1.SettleItem{Refused: true, Complete: true, UpstreamCostMicroUsd: at.Cost(0)}); r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_PROMOTED {
		t.Fatalf("refusal after recovery: %v", r)
	}
	if r := settle(&internalv1.SettleItem{UpstreamCostMicroUsd: at.Cost(700), Complete: true}); r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_PROMOTED ||
		r.CostMicroUsd != 700 {
		t.Fatalf("the answer after the refusal: %v %q, want PROMOTED at 700", r.Outcome, r.Message)
	}
	var used int64
	if err := e.Store.Pool.QueryRow(context.Background(), `SELECT used_micro_usd FROM usage_buckets WHERE id = $1`,
		window.BucketID(org, alice.MemberID, window.Day, window.Of(window.Day, old).Start)).Scan(&used); err != nil || used != 700 {
		t.Fatalf("admission day used %d (%v), want 700", used, err)
	}
	if r := settle(&internalv1.SettleItem{UpstreamCostMicroUsd: at.Cost(900), Complete: true}); r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_COST_CONFLICT {
		t.Fatalf("a second answer: %v, want COST_CONFLICT (promoted once)", r.Outcome)
	}
	cv := getStatus(t, e, alice).Coverage
	if cv["pendingRequests"] != float64(0) || cv["unpricedRequests"] != float64(0) || cv["incompleteRequests"] != float64(0) {
		t.Fatalf("coverage %v", cv)
	}
	at.Check(t, e.Store)
}

// Guard (ACCOUNTING.md, "Recovery and retention"): a start admitted at 04:59:59.9 and
// recovered after the 05:00 reset counts its unknown, incomplete request on the old
// day, and its late real settlement charges the old day, not the day it arrived in.
func TestRecoveryAndLateSettlementKeepTheAdmissionDay(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	alice := e.AddMember(t, owner, "alice", "member")
	org := owner.OrgID
	l := ledgerFor(t, e)
	today := window.Of(window.Day, e.Clock.Now())
	if e.Clock.Now().Sub(today.Start) < time.Hour {
		e.Clock.Advance(time.Hour)
	}
	admitted := today.Start.Add(-100 * time.Millisecond) // 04:59:59.900, the day before
	startAs(t, l, org, alice.MemberID, "req_edge", admitted, 0)
	var page struct{ Pending []struct{ RequestID string } }
	e.Do(t, "GET", pendingPath, nil, owner.As()...).Expect(t, http.StatusOK).Decode(t, &page)
	if len(page.Pending) != 1 || page.Pending[0].RequestID != "req_edge" {
		t.Fatalf("pending %+v", page)
	}
	e.Do(t, "POST", recoverPath, map[string]any{"requestIds": []string{"req_edge"}, "reviewReference": "INC-9", "apply": true},
		owner.As()...).Expect(t, http.StatusOK)
	bucket := func(start time.Time) (used, unpriced, incomplete int64) {
		t.Helper()
		err := e.Store.Pool.QueryRow(context.Background(), `SELECT coalesce(sum(used_micro_usd), 0), coalesce(sum(unpriced_requests), 0),
			coalesce(sum(incomplete_requests), 0) FROM usage_buckets WHERE id = $1`, window.BucketID(org, alice.MemberID, window.Day, start)).
			Scan(&used, &unpriced, &incomplete)
		if err != nil {
			t.Fatal(err)
		}
		return used, unpriced, incomplete
	}
	oldDay := window.Of(window.Day, admitted).Start
	if u, up, inc := bucket(oldDay); u != 0 || up != 1 || inc != 1 {
		t.Fatalf("old day after recovery: used %d, unpriced %d, incomplete %d; want 0, 1, 1", u, up, inc)
	}
	if u, up, inc := bucket(today.Start); u != 0 || up != 0 || inc != 0 {
		t.Fatalf("the day of the recovery: used %d, unpriced %d, incomplete %d; want nothing", u, up, inc)
	}
	r, err := l.Settle(context.Background(), []*internalv1.SettleItem{{RequestId: "req_edge", UpstreamCostMicroUsd: at.Cost(500), Complete: true}})
	if err != nil || r[0].Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_PROMOTED {
		t.Fatalf("late settlement %v %v", r, err)
	}
	if u, up, inc := bucket(oldDay); u != 500 || up != 0 || inc != 0 {
		t.Fatalf("old day after the late settlement: used %d, unpriced %d, incomplete %d; want 500, 0, 0", u, up, inc)
	}
	if u, _, _ := bucket(today.Start); u != 0 {
		t.Fatalf("the day the settlement arrived was charged %d", u)
	}
	at.Check(t, e.Store)
}
