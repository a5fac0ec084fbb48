package ledger_test

import (
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	at "github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// Migration 6 moved each receipt's charges from rows of usage_receipt_charges into two
// arrays on the receipt. Receipts written by the ledger must survive the way down (one
// row per charged bucket, with the bucket's timeframe and window) and up again (the same
// arrays), and settlement must go on from them: a repeat is still a duplicate and a
// promotion still charges only the difference.
func TestSettlementSpeedMigrationKeepsCharges(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 2)
	now := e.Clock.Now()
	var ids []string
	for i, m := range ms {
		id := at.ReqID()
		ids = append(ids, id)
		if r := start1(t, e, at.StartItem(id, org, m, now, 0)); r.Outcome != internalv1.StartOutcome_START_OUTCOME_RECORDED {
			t.Fatalf("start: %v", r)
		}
		// The first settles known, the second unknown (so it can be promoted later).
		it := &internalv1.SettleItem{RequestId: id, Complete: true}
		if i == 0 {
			it.UpstreamCostMicroUsd = at.Cost(700)
		}
		if r := settle1(t, e, it); r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED {
			t.Fatalf("settle: %v", r)
		}
	}
	arrays := func() map[string]string {
		rows, err := e.Store.Pool.Query(ctx, `SELECT request_id, charge_bucket_ids::text || charge_amounts_micro_usd::text
			FROM usage_receipts ORDER BY request_id`)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for rows.Next() {
			var id, v string
			if err := rows.Scan(&id, &v); err != nil {
				t.Fatal(err)
			}
			out[id] = v
		}
		return out
	}
	before := arrays()
	if len(before) != 2 {
		t.Fatalf("receipts %v", before)
	}

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if _, err := e.Store.MigrateTo(ctx, log, 5); err != nil {
		t.Fatalf("down to 5: %v", err)
	}
	var rowsDown, wrong int
	if err := e.Store.Pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE c.charged_micro_usd <> r.cost_micro_usd
			OR c.timeframe <> b.timeframe OR c.window_start <> b.window_start)
		FROM usage_receipt_charges c JOIN usage_receipts r USING (request_id) JOIN usage_buckets b ON b.id = c.bucket_id`).
		Scan(&rowsDown, &wrong); err != nil {
		t.Fatal(err)
	}
	if rowsDown != 6 || wrong != 0 {
		t.Fatalf("after the way down: %d charge rows (want 6), %d not matching their receipt and bucket", rowsDown, wrong)
	}

	if _, err := e.Store.Migrate(ctx, log); err != nil {
		t.Fatalf("up again: %v", err)
	}
	after := arrays()
	for id, v := range before {
		if after[id] != v {
			t.Fatalf("receipt %s charges %s before, %s after down and up", id, v, after[id])
		}
	}
	at.Check(t, e.Store)

	if r := settle1(t, e, &internalv1.SettleItem{RequestId: ids[0], UpstreamCostMicroUsd: at.Cost(700), Complete: true}); r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_DUPLICATE {
		t.Fatalf("repeat after migrating: %v", r)
	}
	if r := settle1(t, e, &internalv1.SettleItem{RequestId: ids[1], UpstreamCostMicroUsd: at.Cost(900), Complete: true}); r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_PROMOTED || r.CostMicroUsd != 900 {
		t.Fatalf("promotion after migrating: %v", r)
	}
	if used := e.Used(t, org, ms[1], "day", now); used != 900 {
		t.Fatalf("promoted member's day used %d, want 900", used)
	}
	at.Check(t, e.Store)
}

// Migration 7 replaced the pending counter on the tracking row with a count of pending
// starts. The way down must put the count back into the counter; the way up drops it,
// and the status read counts the starts again.
func TestPendingFromStartsMigration(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 2)
	now := e.Clock.Now()
	// Member 0 has two pending starts and one settled; member 1 has none pending.
	for i := range 4 {
		m, id := ms[0], at.ReqID()
		if i == 3 {
			m = ms[1]
		}
		if r := start1(t, e, at.StartItem(id, org, m, now, 0)); r.Outcome != internalv1.StartOutcome_START_OUTCOME_RECORDED {
			t.Fatalf("start: %v", r)
		}
		if i >= 2 {
			if r := settle1(t, e, &internalv1.SettleItem{RequestId: id, UpstreamCostMicroUsd: at.Cost(10), Complete: true}); r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED {
				t.Fatalf("settle: %v", r)
			}
		}
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if _, err := e.Store.MigrateTo(ctx, log, 6); err != nil {
		t.Fatalf("down to 6: %v", err)
	}
	counters := e.Int64s(t, `SELECT member_id, pending_requests FROM usage_member_tracking`)
	if counters[ms[0]] != 2 || counters[ms[1]] != 0 || len(counters) != 2 {
		t.Fatalf("pending counters after the way down %v, want 2 for %s and 0 for %s", counters, ms[0], ms[1])
	}
	if _, err := e.Store.Migrate(ctx, log); err != nil {
		t.Fatalf("up again: %v", err)
	}
	for i, want := range []int64{2, 0} {
		if _, pending, _, _, _ := e.Tracking(t, ms[i]); pending != want {
			t.Fatalf("member %d pending %d after down and up, want %d", i, pending, want)
		}
	}
	at.Check(t, e.Store)
}

// Migration 8 goes down and up again under receipts of every kind it introduced: a
// fallback-priced receipt (unpriced and charged) comes back as one, an estimated one
// as reported usage, and settlement goes on from them: a repeat is a duplicate, the
// invariants hold.
func TestPriceMigrationRoundTrip(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 1)
	now := e.Clock.Now()
	items := []*internalv1.SettleItem{
		{Model: "nobody-priced-this", InputTokens: 10, Complete: true},
		{Model: "gpt-4o-mini", OutputTokens: 1000, UsageEstimated: true},
		{Model: "gpt-4o-mini", OutputTokens: 1000, CacheCreationInputTokens: 0, Complete: true},
		{UpstreamCostMicroUsd: at.Cost(9), Complete: true},
		{Model: "x"},
	}
	first := map[string]*internalv1.SettleResult{}
	for _, it := range items {
		it.RequestId = at.ReqID()
		start1(t, e, at.StartItem(it.RequestId, org, ms[0], now, 0))
		r := settle1(t, e, it)
		if r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED {
			t.Fatalf("settle: %v", r)
		}
		first[it.RequestId] = r
	}
	at.Check(t, e.Store)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if _, err := e.Store.MigrateTo(ctx, log, 7); err != nil {
		t.Fatalf("down to 7: %v", err)
	}
	if _, err := e.Store.Migrate(ctx, log); err != nil {
		t.Fatalf("up again: %v", err)
	}
	at.Check(t, e.Store)
	for _, it := range items {
		r := settle1(t, e, it)
		want := first[it.RequestId]
		if r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_DUPLICATE || r.CostMicroUsd != want.CostMicroUsd || r.CostSource != want.CostSource ||
			(want.CostBasis != "estimate" && r.CostBasis != want.CostBasis) {
			t.Fatalf("after the round trip %v; before %v", r, want)
		}
	}
	if _, _, unpriced, _, _ := e.Tracking(t, ms[0]); unpriced != 2 {
		t.Fatalf("unpriced %d", unpriced)
	}
}

// Every down file down to the accounting tables' own (0005) and every up file again,
// under receipts of every kind settlement writes (an upstream cost, an unknown one, a
// fallback-priced, an estimated, a dear tier's, a flex one's, a refusal's, an event created by a
// settlement's snapshot), a pending start, a quarantined settlement, a void that found
// no start and a pruned snapshot: each receipt comes back with its cost, source and
// charges, each counter with its spend, the invariants hold, and settling the same
// requests again is a duplicate at the same cost. The tests above take the data of one
// migration each through; this one the whole way, so that a down file written later
// that loses rows, or fails on them, is found.
func TestEveryMigrationRoundTripsWithAccountingRows(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 2)
	now := e.Clock.Now()
	items := []*internalv1.SettleItem{
		{UpstreamCostMicroUsd: at.Cost(700), Complete: true},
		{Model: "x"},
		{Model: "nobody-priced-this", InputTokens: 10, Complete: true},
		{Model: "gpt-4o-mini", OutputTokens: 1000, UsageEstimated: true},
		{Model: "gpt-4o-mini", OutputTokens: 1000, Complete: true, ServiceTier: internalv1.ServiceTier_SERVICE_TIER_LATENCY_OPTIMIZED},
		{Model: "gpt-4o-mini", OutputTokens: 1000, Complete: true, DiscountTier: internalv1.DiscountTier_DISCOUNT_TIER_FLEX},
		{Refused: true, Complete: true, UpstreamCostMicroUsd: at.Cost(0)},
	}
	for _, it := range items {
		it.RequestId = at.ReqID()
		start1(t, e, at.StartItem(it.RequestId, org, ms[0], now, 0))
	}
	event := &internalv1.SettleItem{RequestId: at.ReqID(), OrganizationId: org, MemberId: ms[1], Snapshot: at.Snapshot(org, ms[1], now, 0),
		UpstreamCostMicroUsd: at.Cost(5), Complete: true}
	items = append(items, event)
	first := map[string]*internalv1.SettleResult{}
	for _, it := range items {
		r := settle1(t, e, it)
		if r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED {
			t.Fatalf("settle %v: %v", it, r)
		}
		first[it.RequestId] = r
	}
	if r := start1(t, e, at.StartItem(at.ReqID(), org, ms[1], now, 0)); r.Outcome != internalv1.StartOutcome_START_OUTCOME_RECORDED {
		t.Fatalf("pending start: %v", r)
	}
	if r := settle1(t, e, &internalv1.SettleItem{RequestId: at.ReqID(), OrganizationId: org, MemberId: ms[0],
		UpstreamCostMicroUsd: at.Cost(5), Complete: true}); r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_NO_SNAPSHOT {
		t.Fatalf("quarantined: %v", r)
	}
	if r := settle1(t, e, void(at.ReqID(), org, ms[0])); r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_VOIDED {
		t.Fatalf("void: %v", r)
	}
	if _, err := e.Store.Pool.Exec(ctx, `UPDATE usage_request_starts SET snapshot = NULL WHERE request_id = $1`, items[0].RequestId); err != nil {
		t.Fatal(err)
	}
	at.Check(t, e.Store)
	state := func() map[string]string {
		t.Helper()
		rows, err := e.Store.Pool.Query(ctx, `
			SELECT 'receipt ' || request_id, format('%s %s %s %s %s', cost_micro_usd, cost_source, complete, charge_bucket_ids,
					charge_amounts_micro_usd)
				FROM usage_receipts
			UNION ALL SELECT 'bucket ' || id, format('used %s unpriced %s incomplete %s', used_micro_usd, unpriced_requests, incomplete_requests)
				FROM usage_buckets
			UNION ALL SELECT 'start ' || request_id, format('%s %s', state, member_id) FROM usage_request_starts
			UNION ALL SELECT 'quarantined ' || request_id, reason FROM usage_quarantined_settlements`)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		var k, v string
		if _, err := pgx.ForEachRow(rows, []any{&k, &v}, func() error { out[k] = v; return nil }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	before := state()

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, m := range slices.Backward(mustMigrations(t)) {
		if m.Version <= 5 {
			break
		}
		if _, err := e.Store.MigrateTo(ctx, log, m.Version-1); err != nil {
			t.Fatalf("down from %04d_%s: %v", m.Version, m.Name, err)
		}
	}
	if _, err := e.Store.Migrate(ctx, log); err != nil {
		t.Fatalf("up again: %v", err)
	}
	if after := state(); !maps.Equal(before, after) {
		for k, v := range before {
			if after[k] != v {
				t.Errorf("%s: %q before the way down and up, %q after", k, v, after[k])
			}
		}
		t.FailNow()
	}
	at.Check(t, e.Store)
	for _, it := range items {
		r := settle1(t, e, it)
		if want := first[it.RequestId]; r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_DUPLICATE || r.CostMicroUsd != want.CostMicroUsd {
			t.Errorf("settling %s again after the way down and up: %v; first %v", it.RequestId, r, want)
		}
	}
}

func mustMigrations(t *testing.T) []store.Migration {
	t.Helper()
	ms, err := store.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// Rule 15: a legacy pending marker is never discarded before it is durably transferred.
// Migration 7 drops the tracking row's pending counter for a count of pending starts;
// a counter above that count (requests a legacy writer counted pending with no durable
// start) is such a marker, and the migration refuses, naming the member, instead of
// dropping it: the member's pendingRequests fell to the starts' count and
// settlementReady turned true with those requests unsettled. Once an operator has dealt
// with them (the counter matches the starts), the migration goes through.
func TestPendingFromStartsMigrationKeepsALegacyPendingMarker(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 1)
	if r := start1(t, e, at.StartItem(at.ReqID(), org, ms[0], e.Clock.Now(), 0)); r.Outcome != internalv1.StartOutcome_START_OUTCOME_RECORDED {
		t.Fatalf("start: %v", r)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if _, err := e.Store.MigrateTo(ctx, log, 6); err != nil {
		t.Fatalf("down to 6: %v", err)
	}
	// A legacy writer counted two more requests pending, with no durable start.
	if _, err := e.Store.Pool.Exec(ctx, `UPDATE usage_member_tracking SET pending_requests = 3 WHERE member_id = $1`, ms[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Store.Migrate(ctx, log); err == nil || !strings.Contains(err.Error(), ms[0]) {
		t.Fatalf("migrating over a legacy pending marker: %v, want a refusal naming the member", err)
	}
	if got := e.Int64s(t, `SELECT member_id, pending_requests FROM usage_member_tracking`); got[ms[0]] != 3 {
		t.Fatalf("pending counters after the refusal %v, want 3 kept for %s", got, ms[0])
	}
	if _, err := e.Store.Pool.Exec(ctx, `UPDATE usage_member_tracking SET pending_requests = 1 WHERE member_id = $1`, ms[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Store.Migrate(ctx, log); err != nil {
		t.Fatalf("migrating once the marker matches the starts: %v", err)
	}
	if _, pending, _, _, _ := e.Tracking(t, ms[0]); pending != 1 {
		t.Fatalf("pending %d, want 1", pending)
	}
}
