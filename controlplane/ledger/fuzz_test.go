package ledger_test

import (
	"math"
	"strings"
	"testing"

	at "github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// FuzzSettle drives the settlement path from a SettleItem to its receipt, through the
// ledger and a real Postgres, with whatever an upstream may answer: every item with a
// durable start ends with a receipt (its start closed), and with a cost above zero when
// it counted tokens. The seeds are the values that used to leave a request pending and
// uncharged: a NUL in the model, invalid UTF-8, a 300-byte model, max int64 tokens, a
// cost that overflows.
func FuzzSettle(f *testing.F) {
	f.Add("gpt-4o-mini\x00", int64(1000), int64(1000), int64(0), int64(0), int64(-1), false, true)
	f.Add("gpt-4o-\xff\xfe", int64(1), int64(0), int64(0), int64(0), int64(-1), false, true)
	f.Add(strings.Repeat("claude-3-5-sonnet-", 17), int64(10), int64(10), int64(5), int64(5), int64(-1), true, false)
	f.Add("o1-pro", int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MaxInt64), int64(-1), false, true)
	f.Add("m", int64(0), int64(0), int64(0), int64(0), int64(math.MaxInt64), false, true)
	f.Add("", int64(-7), int64(3), int64(-1), int64(2), int64(-1), true, true)
	f.Add("unknown-model\r\n", int64(0), int64(0), int64(0), int64(0), int64(-1), false, false)
	e := at.New(f, at.Options{})
	org, ms := e.Org(f, 1)
	m := ms[0]
	f.Fuzz(func(t *testing.T, model string, in, out, cached, written, upstream int64, estimated, complete bool) {
		id := at.ReqID()
		now := e.Clock.Now()
		if r := start1(t, e, at.StartItem(id, org, m, now, 0)); r.Outcome != internalv1.StartOutcome_START_OUTCOME_RECORDED {
			t.Fatalf("start: %v", r)
		}
		it := &internalv1.SettleItem{RequestId: id, Model: model, InputTokens: in, OutputTokens: out, CachedInputTokens: cached,
			CacheCreationInputTokens: written, UsageEstimated: estimated, Complete: complete}
		if upstream >= 0 {
			it.UpstreamCostMicroUsd = &upstream
		}
		r := settle1(t, e, it)
		if r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED {
			t.Fatalf("settle %+v: %v", it, r)
		}
		tokens := in > 0 || out > 0 || cached > 0 || written > 0
		if upstream < 0 && tokens && r.CostMicroUsd <= 0 {
			t.Fatalf("tokens charged %d: %v", r.CostMicroUsd, r)
		}
		var state string
		var cost int64
		if err := e.Store.Pool.QueryRow(ctx, `SELECT s.state, r.cost_micro_usd FROM usage_request_starts s JOIN usage_receipts r USING (request_id)
			WHERE s.request_id = $1`, id).Scan(&state, &cost); err != nil || state != "settled" || cost != r.CostMicroUsd {
			t.Fatalf("start %q, receipt cost %d (%v); answered %v", state, cost, err, r)
		}
	})
}
