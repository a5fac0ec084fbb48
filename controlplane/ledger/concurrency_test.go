package ledger_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/controlplane/accounting"
	at "github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// op is one call of the concurrency test.
type op struct {
	start  *internalv1.StartItem
	settle *internalv1.SettleItem
}

// TestConcurrentSettlementsChargeEachReceiptOnce: 200 members, 20,000 settlements from
// 16 goroutines, with durable starts, settlements that bring their own snapshot (no
// start), catalog-priced and upstream-priced costs, unknown costs promoted later, and
// duplicates sent from other goroutines at any moment (even before the start). At the
// end every counter equals the sum of its receipts' charges, pending is back to zero
// for everyone, and every request was charged its cost exactly once.
func TestConcurrentSettlementsChargeEachReceiptOnce(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	settlements, workers := 20_000, 16
	if testing.Short() {
		settlements = 2_000
	}
	e := at.New(t, at.Options{Log: os.Stderr})
	// The prices took effect a day before the test clock's now: an organization's price
	// is the version in effect when the request is priced (migration 0036), and the
	// settlements here are priced at the test clock's now.
	pricedSince := e.Clock.Now().Add(-24 * time.Hour)
	var members [][2]string
	for range 4 {
		org, ms := e.Org(t, 50)
		if _, err := e.Store.Pool.Exec(ctx, `INSERT INTO usage_model_prices (organization_id, model, match_key, input_micro_usd_per_million,
				output_micro_usd_per_million, cached_input_micro_usd_per_million, created_at, updated_at)
			VALUES ($1, 'priced', 'priced', 3000000, 15000000, 300000, $2, $2)`, org, pricedSince); err != nil {
			t.Fatal(err)
		}
		// A zero fallback price: the model nobody priced is charged 0 at first (a
		// fallback-priced, unpriced receipt), so a later upstream cost can promote it.
		if _, err := e.Store.Pool.Exec(ctx, `INSERT INTO usage_fallback_prices (organization_id, input_micro_usd_per_million,
				output_micro_usd_per_million, cached_input_micro_usd_per_million, created_at, updated_at)
			VALUES ($1, 0, 0, 0, $2, $2)`, org, pricedSince); err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			members = append(members, [2]string{org, m})
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	now := e.Clock.Now()
	price := accounting.Price{InputPerMillion: 3_000_000, OutputPerMillion: 15_000_000, CachedInputPerMillion: 300_000}
	want := map[string]int64{}      // request id -> final cost
	memberOf := map[string]string{} // request id -> member
	plans := make([][]op, workers)
	count := 0
	for count < settlements {
		om := members[rng.IntN(len(members))]
		org, m := om[0], om[1]
		id := at.ReqID()
		memberOf[id] = m
		w := rng.IntN(workers)
		snap := at.Snapshot(org, m, now.Add(-time.Duration(rng.IntN(3600))*time.Second), 0)
		in, out, cached := int64(rng.IntN(5000)), int64(rng.IntN(2000)), int64(0)
		cached = in / 3
		catalog, err := accounting.CatalogCost(accounting.Usage{InputTokens: in, OutputTokens: out, CachedInputTokens: cached}, price)
		if err != nil {
			t.Fatal(err)
		}
		upstream := int64(rng.IntN(100_000))
		var final *internalv1.SettleItem
		var seq []op
		switch kind := rng.IntN(10); {
		case kind < 4: // durable start, catalog price
			seq = append(seq, op{start: &internalv1.StartItem{RequestId: id, OrganizationId: org, MemberId: m, Snapshot: snap}})
			final = &internalv1.SettleItem{RequestId: id, Model: "priced", InputTokens: in, OutputTokens: out, CachedInputTokens: cached, Complete: true}
			want[id] = catalog
		case kind < 6: // durable start, upstream cost
			seq = append(seq, op{start: &internalv1.StartItem{RequestId: id, OrganizationId: org, MemberId: m, Snapshot: snap}})
			final = &internalv1.SettleItem{RequestId: id, UpstreamCostMicroUsd: at.Cost(upstream), Complete: true}
			want[id] = upstream
		case kind < 8: // durable start, unknown model first (fallback price 0), promoted later
			seq = append(seq, op{start: &internalv1.StartItem{RequestId: id, OrganizationId: org, MemberId: m, Snapshot: snap}})
			seq = append(seq, op{settle: &internalv1.SettleItem{RequestId: id, Model: "unpriced", InputTokens: in, Complete: false}})
			count++
			final = &internalv1.SettleItem{RequestId: id, UpstreamCostMicroUsd: at.Cost(upstream), Complete: true}
			want[id] = upstream
		default: // no start (fail-open admission): the settlement brings its snapshot
			final = &internalv1.SettleItem{RequestId: id, OrganizationId: org, MemberId: m, Snapshot: snap,
				UpstreamCostMicroUsd: at.Cost(upstream), Complete: true}
			want[id] = upstream
		}
		seq = append(seq, op{settle: final})
		count++
		plans[w] = append(plans[w], seq...)
		if rng.IntN(10) == 0 && count < settlements {
			// A duplicate from another goroutine, carrying the snapshot so that it is
			// valid even when it overtakes the start.
			dup := &internalv1.SettleItem{RequestId: id, OrganizationId: org, MemberId: m, Snapshot: snap,
				UpstreamCostMicroUsd: final.UpstreamCostMicroUsd, Model: final.Model, InputTokens: final.InputTokens,
				OutputTokens: final.OutputTokens, CachedInputTokens: final.CachedInputTokens, Complete: true}
			other := (w + 1 + rng.IntN(workers-1)) % workers
			p := plans[other]
			pos := rng.IntN(len(p) + 1)
			plans[other] = append(p[:pos], append([]op{{settle: dup}}, p[pos:]...)...)
			count++
		}
	}
	began := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run(ctx, e, plans[w]); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d settlements (and their starts) from %d goroutines in %v", count, workers, time.Since(began).Round(time.Millisecond))
	logBatches(t, e)

	at.Check(t, e.Store)
	var pending int64
	if err := e.Store.Pool.QueryRow(ctx, `SELECT count(*) FROM usage_request_starts WHERE state = 'pending'`).Scan(&pending); err != nil || pending != 0 {
		t.Fatalf("pending %d (%v)", pending, err)
	}
	got := e.Int64s(t, `SELECT request_id, cost_micro_usd FROM usage_receipts`)
	if len(got) != len(want) {
		t.Fatalf("%d receipts for %d requests", len(got), len(want))
	}
	perMember := map[string]int64{}
	for id, c := range want {
		if got[id] != c {
			t.Fatalf("request %s charged %d, want %d", id, got[id], c)
		}
		perMember[memberOf[id]] += c
	}
	for _, om := range members {
		var sum int64
		if err := e.Store.Pool.QueryRow(ctx, `SELECT coalesce(sum(used_micro_usd), 0) FROM usage_buckets WHERE member_id = $1 AND timeframe = 'month'`,
			om[1]).Scan(&sum); err != nil {
			t.Fatal(err)
		}
		if sum != perMember[om[1]] {
			t.Fatalf("member %s: month counters %d, receipts %d", om[1], sum, perMember[om[1]])
		}
	}
	_ = window.Month
}

// run sends a goroutine's plan, grouping consecutive operations of one kind into calls
// of up to 8 items, as an enforcer's queues do.
func run(ctx context.Context, e *at.Env, plan []op) error {
	for i := 0; i < len(plan); {
		j := i
		if plan[i].start != nil {
			var items []*internalv1.StartItem
			for ; j < len(plan) && j-i < 8 && plan[j].start != nil; j++ {
				items = append(items, plan[j].start)
			}
			res, err := e.Ledger.Start(ctx, items)
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
			res, err := e.Ledger.Settle(ctx, items)
			if err != nil {
				return err
			}
			for _, r := range res {
				switch r.Outcome {
				case internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED, internalv1.SettleOutcome_SETTLE_OUTCOME_DUPLICATE,
					internalv1.SettleOutcome_SETTLE_OUTCOME_PROMOTED:
				default:
					return fmt.Errorf("settle %s: %v %s", r.RequestId, r.Outcome, r.Message)
				}
			}
		}
		i = j
	}
	return nil
}

// logBatches reports the batching the test saw.
func logBatches(t *testing.T, e *at.Env) {
	mfs, err := e.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "tollgate_controlplane_accounting_batch_size" && mf.GetName() != "tollgate_controlplane_accounting_batch_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			h := m.GetHistogram()
			t.Logf("%s%v: %d batches, mean %.4g", mf.GetName(), m.GetLabel()[0].GetValue(), h.GetSampleCount(), h.GetSampleSum()/float64(h.GetSampleCount()))
		}
	}
}
