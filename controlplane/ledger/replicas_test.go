package ledger_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	at "github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	"github.com/tollgate-dev/tollgate/controlplane/ledger"
	"github.com/tollgate-dev/tollgate/controlplane/metrics"
	"github.com/tollgate-dev/tollgate/controlplane/recovery"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// TestTwoLedgersDuplicateEverythingAcrossTheDayReset: two control planes' ledgers on one
// database, every request's start and settlement sent to both at once (as two enforcers
// retrying on each other's control plane do), from 16 goroutines, for requests admitted
// in the 40 seconds around the 05:00 UTC reset while the clock crosses it. At the end
// every request has one receipt at its cost, nothing is pending, every counter equals
// its receipts, and each request was charged to the day of its admission, not of its
// settlement.
func TestTwoLedgersDuplicateEverythingAcrossTheDayReset(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	requests, workers := 3_000, 8
	if testing.Short() {
		requests = 600
	}
	e := at.New(t, at.Options{})
	reset := time.Date(2026, 9, 15, 5, 0, 0, 0, time.UTC)
	e.Clock.Set(reset.Add(-5 * time.Second))
	ledgers := []*ledger.Ledger{e.Ledger, secondLedger(t, e)}

	org, members := e.Org(t, 12)
	rng := rand.New(rand.NewPCG(7, 11))
	want := map[string]int64{}
	type key struct {
		member string
		before bool
	}
	perDay := map[key]int64{}
	plans := make([][][]op, 2)
	for i := range plans {
		plans[i] = make([][]op, workers)
	}
	for range requests {
		id, m := at.ReqID(), members[rng.IntN(len(members))]
		// Admitted from 20 s before the reset to 20 s after (at most 25 s ahead of the
		// clock when sent: within accounting.MaxClockSkew).
		admitted := reset.Add(time.Duration(rng.IntN(40_000)-20_000) * time.Millisecond)
		snap := at.Snapshot(org, m, admitted, 0)
		cost := int64(1 + rng.IntN(10_000))
		want[id] = cost
		perDay[key{m, admitted.Before(reset)}] += cost
		start := &internalv1.StartItem{RequestId: id, OrganizationId: org, MemberId: m, Snapshot: snap}
		settle := &internalv1.SettleItem{RequestId: id, OrganizationId: org, MemberId: m, Snapshot: snap,
			UpstreamCostMicroUsd: at.Cost(cost), Complete: true}
		for l := range ledgers {
			w := rng.IntN(workers)
			if rng.IntN(4) == 0 {
				// This copy's settlement overtakes its start.
				plans[l][w] = append(plans[l][w], op{settle: settle}, op{start: start})
			} else {
				plans[l][w] = append(plans[l][w], op{start: start}, op{settle: settle})
			}
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*workers)
	for l, ld := range ledgers {
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := runOn(ctx, ld, plans[l][w]); err != nil {
					errs <- err
				}
			}()
		}
	}
	// The clock crosses the reset while the requests are in flight.
	for range 50 {
		time.Sleep(2 * time.Millisecond)
		e.Clock.Advance(500 * time.Millisecond)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	at.Check(t, e.Store)
	var pending int64
	if err := e.Store.Pool.QueryRow(ctx, `SELECT count(*) FROM usage_request_starts WHERE state = 'pending'`).Scan(&pending); err != nil || pending != 0 {
		t.Fatalf("pending %d (%v)", pending, err)
	}
	got := e.Int64s(t, `SELECT request_id, cost_micro_usd FROM usage_receipts`)
	if len(got) != len(want) {
		t.Fatalf("%d receipts for %d requests", len(got), len(want))
	}
	for id, c := range want {
		if got[id] != c {
			t.Fatalf("request %s charged %d, want %d", id, got[id], c)
		}
	}
	for _, m := range members {
		for _, before := range []bool{true, false} {
			day := reset
			if before {
				day = reset.Add(-time.Hour)
			}
			if used := e.Used(t, org, m, window.Day, day); used != perDay[key{m, before}] {
				t.Errorf("member %s, day of %s: used %d, admitted there %d", m, window.Of(window.Day, day).Start, used, perDay[key{m, before}])
			}
		}
	}
	for _, m := range members {
		if _, p, _, _, _ := e.Tracking(t, m); p != 0 {
			t.Errorf("member %s: pending %d", m, p)
		}
	}
}

// runOn is run on a given ledger: consecutive operations of one kind go in calls of up
// to 8 items.
func runOn(ctx context.Context, l *ledger.Ledger, plan []op) error {
	for i := 0; i < len(plan); {
		j := i
		if plan[i].start != nil {
			var items []*internalv1.StartItem
			for ; j < len(plan) && j-i < 8 && plan[j].start != nil; j++ {
				items = append(items, plan[j].start)
			}
			res, err := l.Start(ctx, items)
			if err != nil {
				return err
			}
			for _, r := range res {
				if r.Outcome != internalv1.StartOutcome_START_OUTCOME_RECORDED && r.Outcome != internalv1.StartOutcome_START_OUTCOME_DUPLICATE {
					return fmt.Errorf("start %s: %v %s", r.RequestId, r.Outcome, r.Message)
				}
			}
		} else {
			var items []*internalv1.SettleItem
			for ; j < len(plan) && j-i < 8 && plan[j].settle != nil; j++ {
				items = append(items, plan[j].settle)
			}
			res, err := l.Settle(ctx, items)
			if err != nil {
				return err
			}
			for _, r := range res {
				switch r.Outcome {
				case internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED, internalv1.SettleOutcome_SETTLE_OUTCOME_DUPLICATE:
				default:
					return fmt.Errorf("settle %s: %v %s", r.RequestId, r.Outcome, r.Message)
				}
			}
		}
		i = j
	}
	return nil
}

// TestGuardHoldsAcrossTwoLedgers: the in-flight guard decides in Postgres, so two
// control planes' ledgers share it. Fresh members (no tracking row yet: the first starts
// race to create it), 24 guarded starts each released together and sent to either
// ledger: reserving 0.03 USD at a 0.10 USD hard limit, exactly four are recorded; at a
// cap of three requests in flight, exactly three.
func TestGuardHoldsAcrossTwoLedgers(t *testing.T) {
	t.Parallel()
	e := at.New(t, at.Options{})
	ledgers := []*ledger.Ledger{e.Ledger, secondLedger(t, e)}
	for round := range 6 {
		org, ms := e.Org(t, 2)
		now := e.Clock.Now()
		for k, c := range []struct {
			reservation int64
			max         int32
			want        int
		}{{30_000, 0, 4}, {0, 3, 3}} {
			m := ms[k]
			release := make(chan struct{})
			var wg sync.WaitGroup
			var mu sync.Mutex
			recorded := 0
			for i := range 24 {
				wg.Go(func() {
					it := guardedStart(at.ReqID(), org, m, now, c.reservation, c.max)
					<-release
					res, err := ledgers[i%2].Start(ctx, []*internalv1.StartItem{it})
					if err != nil {
						t.Error(err)
						return
					}
					if res[0].GetOutcome() == internalv1.StartOutcome_START_OUTCOME_RECORDED {
						mu.Lock()
						recorded++
						mu.Unlock()
					}
				})
			}
			close(release)
			wg.Wait()
			if recorded != c.want {
				t.Fatalf("round %d, reservation %d, cap %d: %d of 24 recorded, want %d", round, c.reservation, c.max, recorded, c.want)
			}
		}
	}
	at.Check(t, e.Store)
}

// TestRecoveryRacingSettlements: an operator's abandonment recovery and the requests'
// real settlements (on two ledgers) reach the same pending starts at once. Whichever
// comes first, each request ends with one receipt at its real cost (a settlement after
// the recovery promotes the unknown cost once), nothing is pending, and every counter
// equals its receipts.
func TestRecoveryRacingSettlements(t *testing.T) {
	t.Parallel()
	e := at.New(t, at.Options{})
	ledgers := []*ledger.Ledger{e.Ledger, secondLedger(t, e)}
	org, ms := e.Org(t, 3)
	now := e.Clock.Now()
	want := map[string]int64{}
	var ids []string
	for i := range 120 {
		id := at.ReqID()
		if r := start1(t, e, at.StartItem(id, org, ms[i%3], now, 0)); r.GetOutcome() != internalv1.StartOutcome_START_OUTCOME_RECORDED {
			t.Fatalf("start: %v", r)
		}
		ids = append(ids, id)
		want[id] = int64(100 + i)
	}
	e.Clock.Advance(2 * time.Hour)
	release := make(chan struct{})
	var wg sync.WaitGroup
	for k := range 4 { // recoveries of 30 ids each
		wg.Go(func() {
			<-release
			err := e.Store.InTx(ctx, func(tx pgx.Tx) error {
				_, err := recovery.Recover(ctx, tx, noAudit{}, recovery.Request{OrganizationID: org, RequestIDs: ids[k*30 : (k+1)*30],
					ReviewReference: "INC-1", Apply: true}, e.Clock.Now())
				return err
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	for i, id := range ids {
		wg.Go(func() {
			<-release
			res, err := ledgers[i%2].Settle(ctx, []*internalv1.SettleItem{{RequestId: id, UpstreamCostMicroUsd: at.Cost(want[id]), Complete: true}})
			if err != nil {
				t.Error(err)
				return
			}
			if o := res[0].GetOutcome(); o != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED && o != internalv1.SettleOutcome_SETTLE_OUTCOME_PROMOTED {
				t.Errorf("settle %s: %v", id, res[0])
			}
		})
	}
	close(release)
	wg.Wait()
	at.Check(t, e.Store)
	got := e.Int64s(t, `SELECT request_id, cost_micro_usd FROM usage_receipts`)
	for id, c := range want {
		if got[id] != c {
			t.Fatalf("request %s charged %d, want %d", id, got[id], c)
		}
	}
	for _, m := range ms {
		if _, p, _, _, _ := e.Tracking(t, m); p != 0 {
			t.Fatalf("member %s: %d pending", m, p)
		}
	}
}

type noAudit struct{}

func (noAudit) Audit(pgx.Tx, string, string, any) error { return nil }

// secondLedger runs a second control plane's ledger on e's database, clock and mirror,
// stopped when the test ends.
func secondLedger(t *testing.T, e *at.Env) *ledger.Ledger {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := ledger.New(ledger.Deps{Store: e.Store, Clock: e.Clock, Log: e.Log, Metrics: metrics.New(prometheus.NewRegistry()), Mirror: e.Mirror})
	stopped := make(chan error, 1)
	go func() { stopped <- l.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-stopped; err != nil {
			t.Errorf("second ledger: %v", err)
		}
	})
	return l
}
