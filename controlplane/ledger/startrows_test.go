package ledger_test

import (
	"testing"

	at "github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// Closing a start at settlement writes a new version of its row; it lands on the page of
// the row it replaces (migration 0030 keeps the starts' pages half free for that), where
// Postgres logs only the bytes that changed rather than the whole row with its snapshot
// (docs/accounting.md, "What a request writes to Postgres's log"). Starts and settlements
// come in batches that overlap, as under traffic: each batch of starts is settled after
// the next one was recorded. With the pages filled by inserts (fillfactor 100) most closed
// versions move to another page.
func TestClosingAStartKeepsItsRowOnItsPage(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 4)
	const batches, perBatch = 8, 10
	pages := func() map[string]int64 {
		return e.Int64s(t, `SELECT request_id, (ctid::text::point)[0]::bigint FROM usage_request_starts`)
	}
	var ids [][]string
	admitted := map[string]int64{} // each start's page once recorded
	settle := func(batch []string) {
		items := make([]*internalv1.SettleItem, len(batch))
		for i, id := range batch {
			items[i] = &internalv1.SettleItem{RequestId: id, UpstreamCostMicroUsd: at.Cost(100), Complete: true, Model: "m"}
		}
		res, err := e.Ledger.Settle(ctx, items)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED {
				t.Fatalf("settle: %v", r)
			}
		}
	}
	for b := range batches {
		now := e.Clock.Now()
		batch := make([]string, perBatch)
		items := make([]*internalv1.StartItem, perBatch)
		for i := range batch {
			batch[i] = at.ReqID()
			items[i] = at.StartItem(batch[i], org, ms[i%len(ms)], now, 0)
		}
		res, err := e.Ledger.Start(ctx, items)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Outcome != internalv1.StartOutcome_START_OUTCOME_RECORDED {
				t.Fatalf("start: %v", r)
			}
		}
		for id, page := range pages() {
			if _, seen := admitted[id]; !seen {
				admitted[id] = page
			}
		}
		ids = append(ids, batch)
		if b > 0 {
			settle(ids[b-1])
		}
	}
	settle(ids[batches-1])

	closed := e.Int64s(t, `SELECT state, count(*) FROM usage_request_starts GROUP BY state`)
	if closed["settled"] != batches*perBatch || len(closed) != 1 {
		t.Fatalf("starts by state %v, want all %d settled", closed, batches*perBatch)
	}
	moved := 0
	after := pages()
	for id, page := range admitted {
		if after[id] != page {
			moved++
		}
	}
	if moved > 0 {
		t.Fatalf("%d of %d closed starts moved to another page (the table holds %d pages)", moved, len(admitted), distinct(after))
	}
	at.Check(t, e.Store)
}

// distinct counts the distinct values of m.
func distinct(m map[string]int64) int {
	seen := map[int64]bool{}
	for _, v := range m {
		seen[v] = true
	}
	return len(seen)
}
