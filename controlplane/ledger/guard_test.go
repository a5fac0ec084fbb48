package ledger_test

import (
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/controlplane/accounting"
	at "github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// guardedStart is a start under the in-flight guard: a 0.10 USD hard day limit whose
// policy reserves, each request reserving reservation, with the member's cap maxInFlight.
func guardedStart(id, org, member string, now time.Time, reservation int64, maxInFlight int32) *internalv1.StartItem {
	it := at.StartItem(id, org, member, now, 0)
	day := it.Snapshot.Buckets[0]
	day.PolicyId, day.PolicyRevision, day.BaseMicroUsd, day.HardLimit, day.ReserveInFlight = "ulp_guarded", 1, 100_000, true, true
	it.ReservationMicroUsd, it.MaxInFlight = reservation, maxInFlight
	return it
}

// startAll starts the items from as many goroutines (the ledger batches what arrives
// together, so some are decided in one transaction) and returns the results by id.
func startAll(t *testing.T, e *at.Env, items []*internalv1.StartItem) map[string]*internalv1.StartResult {
	t.Helper()
	var mu sync.Mutex
	out := map[string]*internalv1.StartResult{}
	var wg sync.WaitGroup
	for _, it := range items {
		wg.Go(func() {
			res, err := e.Ledger.Start(ctx, []*internalv1.StartItem{it})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			out[it.GetRequestId()] = res[0]
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

func outcomes(rs map[string]*internalv1.StartResult) (recorded []string, byOutcome map[internalv1.StartOutcome]int) {
	byOutcome = map[internalv1.StartOutcome]int{}
	for id, r := range rs {
		byOutcome[r.GetOutcome()]++
		if r.GetOutcome() == internalv1.StartOutcome_START_OUTCOME_RECORDED {
			recorded = append(recorded, id)
		}
	}
	return recorded, byOutcome
}

// TestGuardReservesInFlightSpend: 20 concurrent starts reserving 0.03 USD each at a 0.10
// USD hard limit: exactly four are recorded (0, 0.03, 0.06 and 0.09 reserved before them
// are below the limit; 0.12 is not), and the refusals say what they saw. A settlement
// replaces its reservation with the real charge, once: after two settle at 0.01 USD,
// 0.02 is settled and 0.06 reserved, so one more start fits, then no more.
func TestGuardReservesInFlightSpend(t *testing.T) {
	t.Parallel()
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 1)
	m := ms[0]
	now := e.Clock.Now()
	var items []*internalv1.StartItem
	for range 20 {
		items = append(items, guardedStart(at.ReqID(), org, m, now, 30_000, 0))
	}
	recorded, by := outcomes(startAll(t, e, items))
	if len(recorded) != 4 || by[internalv1.StartOutcome_START_OUTCOME_LIMIT_RESERVED] != 16 {
		t.Fatalf("outcomes %v: want 4 recorded and 16 refused for reservations", by)
	}
	r := start1(t, e, guardedStart(at.ReqID(), org, m, now, 30_000, 0))
	g := r.GetGuard()
	if r.GetOutcome() != internalv1.StartOutcome_START_OUTCOME_LIMIT_RESERVED || g.GetTimeframe() != "day" || g.GetUsedMicroUsd() != 0 ||
		g.GetReservedMicroUsd() != 120_000 || g.GetAllowanceMicroUsd() != 100_000 || g.GetInFlight() != 4 {
		t.Fatalf("refusal %v", r)
	}
	for _, id := range recorded[:2] {
		if s := settle1(t, e, &internalv1.SettleItem{RequestId: id, UpstreamCostMicroUsd: at.Cost(10_000), Complete: true, Model: "m"}); s.GetOutcome() != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED {
			t.Fatalf("settle %v", s)
		}
	}
	// 20,000 settled + 60,000 reserved = 80,000: one more start, then 110,000 refuses.
	if r := start1(t, e, guardedStart(at.ReqID(), org, m, now, 30_000, 0)); r.GetOutcome() != internalv1.StartOutcome_START_OUTCOME_RECORDED {
		t.Fatalf("after two settlements: %v", r)
	}
	r = start1(t, e, guardedStart(at.ReqID(), org, m, now, 30_000, 0))
	if g := r.GetGuard(); r.GetOutcome() != internalv1.StartOutcome_START_OUTCOME_LIMIT_RESERVED || g.GetUsedMicroUsd() != 20_000 || g.GetReservedMicroUsd() != 90_000 {
		t.Fatalf("the next start: %v", r)
	}
	// A start without the guard (a soft policy, say) is never refused for reservations.
	if r := start1(t, e, at.StartItem(at.ReqID(), org, m, now, 0)); r.GetOutcome() != internalv1.StartOutcome_START_OUTCOME_RECORDED {
		t.Fatalf("an unguarded start: %v", r)
	}
	if n := e.Int64s(t, `SELECT 'starts', count(*) FROM usage_request_starts WHERE member_id = $1`, m)["starts"]; n != 6 {
		t.Fatalf("%d starts stored; refused starts must leave nothing behind (want 4 + 1 + 1)", n)
	}
	at.Check(t, e.Store)
}

// TestGuardRefusesASpentLimitAsExceeded: a guarded start made on a record that does not
// hold the last settlement yet (the enforcer admitted it), when settled spend alone has
// reached the allowance, is refused LIMIT_EXCEEDED (the enforcer answers the usage-limit
// block), not LIMIT_RESERVED (a 429 that says retry in a second, until the record catches
// up); a start that only reservations refuse stays LIMIT_RESERVED.
func TestGuardRefusesASpentLimitAsExceeded(t *testing.T) {
	t.Parallel()
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 1)
	m := ms[0]
	now := e.Clock.Now()
	first, second := guardedStart(at.ReqID(), org, m, now, 30_000, 0), guardedStart(at.ReqID(), org, m, now, 30_000, 0)
	for _, it := range []*internalv1.StartItem{first, second} {
		if r := start1(t, e, it); r.GetOutcome() != internalv1.StartOutcome_START_OUTCOME_RECORDED {
			t.Fatalf("start %v", r)
		}
	}
	// 90,000 settled + 30,000 reserved: the reservations refuse, settled spend alone does not.
	if s := settle1(t, e, &internalv1.SettleItem{RequestId: first.GetRequestId(), UpstreamCostMicroUsd: at.Cost(90_000), Complete: true, Model: "m"}); s.GetOutcome() != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED {
		t.Fatalf("settle %v", s)
	}
	if r := start1(t, e, guardedStart(at.ReqID(), org, m, now, 30_000, 0)); r.GetOutcome() != internalv1.StartOutcome_START_OUTCOME_LIMIT_RESERVED {
		t.Fatalf("at 90,000 settled and 30,000 reserved: %v", r)
	}
	// 100,000 settled: the limit is spent.
	if s := settle1(t, e, &internalv1.SettleItem{RequestId: second.GetRequestId(), UpstreamCostMicroUsd: at.Cost(10_000), Complete: true, Model: "m"}); s.GetOutcome() != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED {
		t.Fatalf("settle %v", s)
	}
	r := start1(t, e, guardedStart(at.ReqID(), org, m, now, 30_000, 0))
	g := r.GetGuard()
	if r.GetOutcome() != internalv1.StartOutcome_START_OUTCOME_LIMIT_RESERVED || g.GetTimeframe() != "day" || g.GetUsedMicroUsd() != 100_000 ||
		g.GetAllowanceMicroUsd() != 100_000 || g.GetWindowEndUnixMs() == 0 {
		t.Fatalf("at 100,000 settled: %v, want LIMIT_EXCEEDED for the day at 100,000 of 100,000", r)
	}
	at.Check(t, e.Store)
}

// TestGuardCapsRequestsInFlight: at most maxInFlight starts of a member pending at once,
// whatever the concurrency; a settlement frees a place.
func TestGuardCapsRequestsInFlight(t *testing.T) {
	t.Parallel()
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 1)
	m := ms[0]
	now := e.Clock.Now()
	capped := func() *internalv1.StartItem {
		it := at.StartItem(at.ReqID(), org, m, now, 0)
		it.MaxInFlight = 3
		return it
	}
	var items []*internalv1.StartItem
	for range 12 {
		items = append(items, capped())
	}
	recorded, by := outcomes(startAll(t, e, items))
	if len(recorded) != 3 || by[internalv1.StartOutcome_START_OUTCOME_CONCURRENCY_LIMITED] != 9 {
		t.Fatalf("outcomes %v: want 3 recorded and 9 refused at the cap", by)
	}
	r := start1(t, e, capped())
	if g := r.GetGuard(); r.GetOutcome() != internalv1.StartOutcome_START_OUTCOME_CONCURRENCY_LIMITED || g.GetInFlight() != 3 || g.GetMaxInFlight() != 3 {
		t.Fatalf("at the cap: %v", r)
	}
	settle1(t, e, &internalv1.SettleItem{RequestId: recorded[0], UpstreamCostMicroUsd: at.Cost(1), Complete: true, Model: "m"})
	if r := start1(t, e, capped()); r.GetOutcome() != internalv1.StartOutcome_START_OUTCOME_RECORDED {
		t.Fatalf("after a settlement: %v", r)
	}
	if r := start1(t, e, capped()); r.GetOutcome() != internalv1.StartOutcome_START_OUTCOME_CONCURRENCY_LIMITED {
		t.Fatalf("at the cap again: %v", r)
	}
	// Starts nobody settled for longer than the guard's horizon (a crashed enforcer's)
	// stop holding places under the cap, though they stay pending.
	e.Clock.Advance(accounting.GuardHorizon + time.Second)
	now = e.Clock.Now()
	if r := start1(t, e, capped()); r.GetOutcome() != internalv1.StartOutcome_START_OUTCOME_RECORDED {
		t.Fatalf("past the horizon: %v", r)
	}
	if _, pending, _, _, _ := e.Tracking(t, m); pending != 4 {
		t.Fatalf("%d pending, want the 3 abandoned and the new one", pending)
	}
	at.Check(t, e.Store)
}
