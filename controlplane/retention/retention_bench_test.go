package retention_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	"github.com/tollgate-dev/tollgate/controlplane/retention"
)

// BenchmarkRetention times an applied run over 20,000 old closed requests (a start and
// a receipt each) and 2,000 pending starts, in batches of 1,000: rows/s is starts plus
// receipts examined per second. Each iteration first restores the pruned detail (not
// timed), so every run removes the same.
func BenchmarkRetention(b *testing.B) {
	e := accountingtest.New(b, accountingtest.Options{})
	org, ms := e.Org(b, 1)
	ctx := context.Background()
	old := e.Clock.Now()
	const closed, pending = 20000, 2000
	if _, err := e.Store.Pool.Exec(ctx, `INSERT INTO usage_request_starts (request_id, organization_id, member_id, tracking_version,
			admitted_at, snapshot, state, counted, created_at, closed_at)
		SELECT 'req_' || lpad(i::text, 8, '0'), $1, $2, 1, $3, '{"version": 2, "buckets": []}', CASE WHEN i <= $4::int THEN 'settled' ELSE 'pending' END,
			true, $3, CASE WHEN i <= $4::int THEN $3::timestamptz END
		FROM generate_series(1, $4::int + $5::int) AS i`, org, ms[0], old, closed, pending); err != nil {
		b.Fatal(err)
	}
	if _, err := e.Store.Pool.Exec(ctx, `INSERT INTO usage_receipts (request_id, organization_id, member_id, cost_micro_usd, cost_source,
			model, input_tokens, complete, outcome, settled_at, updated_at, cost_basis)
		SELECT request_id, organization_id, member_id, 1, 'upstream', 'gpt-4o', 10, true, 'settled', $1, $1, 'upstream_cost'
		FROM usage_request_starts WHERE state = 'settled'`, old); err != nil {
		b.Fatal(err)
	}
	if _, err := e.Store.Pool.Exec(ctx, `ANALYZE usage_request_starts; ANALYZE usage_receipts`); err != nil {
		b.Fatal(err)
	}
	e.Clock.Set(old.Add(100 * 24 * time.Hour))
	d := retention.Deps{Store: e.Store, Clock: e.Clock, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	var examined int64
	var took time.Duration
	for b.Loop() {
		b.StopTimer()
		if _, err := e.Store.Pool.Exec(ctx, `UPDATE usage_request_starts SET snapshot = '{"version": 2, "buckets": []}' WHERE snapshot IS NULL`); err != nil {
			b.Fatal(err)
		}
		if _, err := e.Store.Pool.Exec(ctx, `UPDATE usage_receipts SET detail_pruned_at = NULL, model = 'gpt-4o' WHERE detail_pruned_at IS NOT NULL`); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		r, err := retention.Run(ctx, d, retention.Options{Age: retention.DefaultAge, Batch: retention.DefaultBatch, Apply: true})
		took += time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		if r.Starts.Removed != closed || r.Receipts.Removed != closed || r.Starts.Kept[retention.KeptPending] != pending {
			b.Fatalf("run %+v", r)
		}
		examined += r.Starts.Examined + r.Receipts.Examined
	}
	b.ReportMetric(float64(examined)/took.Seconds(), "rows/s")
}
