package recovery_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	"github.com/tollgate-dev/tollgate/controlplane/recovery"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

type noAudit struct{}

func (noAudit) Audit(pgx.Tx, string, string, any) error { return nil }

// Guard (rule 15): two recoveries of the same pending starts at once (two operators, two
// control planes) and their real settlements arriving meanwhile close each start once
// and charge its known cost once: the pending count drops by exactly the number of
// starts, every request ends charged its cost on its admission day, and the counters
// and counts agree with the receipts (accountingtest.Check).
func TestConcurrentRecoveriesAndSettlementsCloseEachStartOnce(t *testing.T) {
	e := accountingtest.New(t, accountingtest.Options{})
	org, ms := e.Org(t, 1)
	member := ms[0]
	admitted := e.Clock.Now().Add(-2 * time.Hour)
	const n = 40
	ids := make([]string, n)
	var starts []*internalv1.StartItem
	for i := range ids {
		ids[i] = fmt.Sprintf("req_%02d", i)
		starts = append(starts, accountingtest.StartItem(ids[i], org, member, admitted, 0))
	}
	if _, err := e.Ledger.Start(e.Ctx, starts); err != nil {
		t.Fatal(err)
	}
	if _, pending, _, _, _ := e.Tracking(t, member); pending != n {
		t.Fatalf("%d pending, want %d", pending, n)
	}
	recovered := make([]int, 2)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for k := range 2 {
		wg.Go(func() {
			err := e.Store.InTx(context.Background(), func(tx pgx.Tx) error {
				rs, err := recovery.Recover(context.Background(), tx, noAudit{}, recovery.Request{OrganizationID: org, RequestIDs: ids,
					ReviewReference: fmt.Sprintf("INC-%d", k), Apply: true}, e.Clock.Now())
				recovered[k] = 0
				for _, r := range rs {
					if r.Outcome == recovery.Recovered {
						recovered[k]++
					}
				}
				return err
			})
			errs <- err
		})
	}
	for half := range 2 {
		wg.Go(func() {
			var items []*internalv1.SettleItem
			for i := half; i < n; i += 2 {
				items = append(items, &internalv1.SettleItem{RequestId: ids[i], UpstreamCostMicroUsd: accountingtest.Cost(100), Complete: true})
			}
			res, err := e.Ledger.Settle(context.Background(), items)
			for _, r := range res {
				if o := r.GetOutcome(); o != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED && o != internalv1.SettleOutcome_SETTLE_OUTCOME_PROMOTED {
					err = fmt.Errorf("%s: %v", r.GetRequestId(), o)
				}
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, pending, unpriced, incomplete, _ := e.Tracking(t, member); pending != 0 || unpriced != 0 || incomplete != 0 {
		t.Fatalf("pending %d, unpriced %d, incomplete %d; want 0, 0, 0", pending, unpriced, incomplete)
	}
	if recovered[0]+recovered[1] > n {
		t.Fatalf("recovered %d + %d of %d starts", recovered[0], recovered[1], n)
	}
	if got := e.Used(t, org, member, window.Day, admitted); got != 100*n {
		t.Fatalf("admission day used %d, want %d", got, 100*n)
	}
	accountingtest.Check(t, e.Store)
}

// Rule 15: recovery allows a late known-cost promotion. A recovered start whose real
// settlements then arrive as they would have without the recovery (an incomplete one,
// the enforcer's cut stream or its reaper's, then the complete answer) ends charged the
// complete cost, as it is without the recovery: the incomplete report resolves the
// unknown receipt without taking its one promotion. Until 2026-12-07 it did take it, so
// the complete answer met a final receipt, COST_CONFLICT, and the request stayed charged
// its partial cost (100 of 500 here).
func TestRecoveredStartIsPromotedToItsCompleteCostAfterAnIncompleteOne(t *testing.T) {
	e, org, member, id, admitted := recoveredStart(t)
	settle := func(cost int64, complete bool) internalv1.SettleOutcome {
		res, err := e.Ledger.Settle(e.Ctx, []*internalv1.SettleItem{{RequestId: id, UpstreamCostMicroUsd: accountingtest.Cost(cost), Complete: complete}})
		if err != nil {
			t.Fatal(err)
		}
		return res[0].GetOutcome()
	}
	if o := settle(100, false); o != internalv1.SettleOutcome_SETTLE_OUTCOME_PROMOTED {
		t.Fatalf("the incomplete settlement after recovery: %v", o)
	}
	if o := settle(500, true); o != internalv1.SettleOutcome_SETTLE_OUTCOME_PROMOTED {
		t.Fatalf("the complete settlement after the incomplete one: %v, want PROMOTED", o)
	}
	if o := settle(600, true); o != internalv1.SettleOutcome_SETTLE_OUTCOME_COST_CONFLICT {
		t.Fatalf("another cost after the complete one: %v, want COST_CONFLICT (promoted once)", o)
	}
	if got := e.Used(t, org, member, window.Day, admitted); got != 500 {
		t.Fatalf("admission day used %d, want the complete cost 500", got)
	}
	if _, pending, unpriced, incomplete, _ := e.Tracking(t, member); pending != 0 || unpriced != 0 || incomplete != 0 {
		t.Fatalf("pending %d, unpriced %d, incomplete %d; want 0, 0, 0", pending, unpriced, incomplete)
	}
	accountingtest.Check(t, e.Store)
}

// A recovered start whose void arrives late (its enforcer's spool delivered it after the
// recovery): the void proves the request was never forwarded, a known cost of 0, so it
// resolves the recovered unknown receipt, as a front door's refusal does: the request no
// longer counts unpriced or incomplete (rule 18: those count tracked receipts whose cost
// is not known), and nothing is charged. Until 2026-12-07 the void was answered "its
// charge stands" and the request counted unpriced and incomplete for good.
func TestLateVoidResolvesARecoveredStart(t *testing.T) {
	e, org, member, id, admitted := recoveredStart(t)
	for range 2 { // a void is final and idempotent
		res, err := e.Ledger.Settle(e.Ctx, []*internalv1.SettleItem{{RequestId: id, OrganizationId: org, MemberId: member, Voided: true}})
		if err != nil {
			t.Fatal(err)
		}
		if o := res[0].GetOutcome(); o != internalv1.SettleOutcome_SETTLE_OUTCOME_VOIDED {
			t.Fatalf("the late void: %v", res[0])
		}
	}
	if _, pending, unpriced, incomplete, _ := e.Tracking(t, member); pending != 0 || unpriced != 0 || incomplete != 0 {
		t.Fatalf("pending %d, unpriced %d, incomplete %d after the void; want 0, 0, 0", pending, unpriced, incomplete)
	}
	day := e.Int64s(t, `SELECT 'day', unpriced_requests + incomplete_requests + used_micro_usd FROM usage_buckets WHERE id = $1`,
		window.BucketID(org, member, window.Day, window.Of(window.Day, admitted).Start))
	if day["day"] != 0 {
		t.Fatalf("the admission day still counts %d (unpriced + incomplete + used)", day["day"])
	}
	if n := e.Int64s(t, `SELECT 'n', count(*) FROM usage_member_tracking WHERE member_id = $1 AND last_settlement_request_id IS NOT NULL`, member); n["n"] != 0 {
		t.Fatal("the void moved the last settlement fields: nothing was settled")
	}
	accountingtest.Check(t, e.Store)
}

// recoveredStart is one start admitted two hours ago and closed by abandonment recovery
// (an unknown, incomplete receipt), with its organization, member and request id.
func recoveredStart(t *testing.T) (e *accountingtest.Env, org, member, id string, admitted time.Time) {
	t.Helper()
	e = accountingtest.New(t, accountingtest.Options{})
	org, ms := e.Org(t, 1)
	member = ms[0]
	admitted = e.Clock.Now().Add(-2 * time.Hour)
	id = accountingtest.ReqID()
	if _, err := e.Ledger.Start(e.Ctx, []*internalv1.StartItem{accountingtest.StartItem(id, org, member, admitted, 0)}); err != nil {
		t.Fatal(err)
	}
	err := e.Store.InTx(e.Ctx, func(tx pgx.Tx) error {
		_, err := recovery.Recover(e.Ctx, tx, noAudit{}, recovery.Request{OrganizationID: org, RequestIDs: []string{id},
			ReviewReference: "INC-1", Apply: true}, e.Clock.Now())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return e, org, member, id, admitted
}
