package settleq_test

import (
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/enforcer/requestbody"
	"github.com/tollgate-dev/tollgate/enforcer/responseusage"
	"github.com/tollgate-dev/tollgate/enforcer/settleq"
	"github.com/tollgate-dev/tollgate/internal/heapsize"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// longestModel is the longest model name a settlement carries from a request
// (requestbody.MaxModelBytes) or a response (responseusage.DefaultMaxModelBytes): a
// member chooses it, so the sizing budgets hold it (sizing.go).
var longestModel = strings.Repeat("m", max(requestbody.MaxModelBytes, responseusage.DefaultMaxModelBytes))

// gatewaySettlement is a settlement as the gateway sends one for a durable start:
// ids, the longest model name (a string of its own, read from its request) and host
// of its own, usage and cost; member i%1000's.
func gatewaySettlement(i int) *internalv1.SettleItem {
	cost := int64(1234 + i)
	return &internalv1.SettleItem{RequestId: fmt.Sprintf("req_01m90a2nrwf4mt6nfv%08d", i),
		OrganizationId: "org_01m90a2n1pedwt723k5h025e2f", MemberId: fmt.Sprintf("om_01m90a2n1pedwt723k%08d", i%1000),
		Model: strings.Clone(longestModel), InputTokens: 1200, OutputTokens: 350, CachedInputTokens: 1024,
		UpstreamCostMicroUsd: &cost, Complete: true, FinishedAtUnixMs: 1_796_000_000_000 + int64(i),
		UpstreamStatus: 200, UpstreamHost: "api.openai.com"}
}

// heapPer is the heap that n calls of add hold once collected, per call.
func heapPer(n int, add func(i int)) float64 {
	return float64(heapsize.Held(n, add)) / float64(n)
}

// failOpenSettlement is gatewaySettlement admitted without a durable start (fail-open):
// it carries its own admission snapshot, made for its request.
func failOpenSettlement(i int) *internalv1.SettleItem {
	item := gatewaySettlement(i)
	item.Snapshot = memberSnapshot(item.OrganizationId, item.MemberId, 1_796_000_000_000+int64(i))
	return item
}

// queuedBytes is the heap a settlement holds while it waits unanswered in a queue
// (the control plane down): its item, its entry, its share of the queue's slices and
// its kept start; failOpen: a settlement carrying its own snapshot instead.
func queuedBytes(tb testing.TB, n int, failOpen bool) float64 {
	q := settleq.New(newLedger(), settleq.Config{Capacity: n}, metrics.Discard(), slog.New(slog.DiscardHandler))
	snap := admissionSnapshot(1_796_000_000_000)
	per := heapPer(n, func(i int) {
		res, ok := q.Reserve()
		if !ok {
			tb.Fatal("no reservation")
		}
		item := gatewaySettlement(i)
		if failOpen {
			item = failOpenSettlement(i)
		} else {
			res.KeepStart(snap)
		}
		if err := q.Enqueue(item, res, nil); err != nil {
			tb.Fatal(err)
		}
	})
	if q.Depth() != n {
		tb.Fatalf("depth %d, want %d", q.Depth(), n)
	}
	runtime.KeepAlive(q)
	return per
}

// keptBytes is the heap a settlement answered and kept for a rebuild holds.
func keptBytes(n int, failOpen bool) float64 {
	q := settleq.New(newLedger(), settleq.Config{Capacity: n}, metrics.Discard(), slog.New(slog.DiscardHandler))
	items := make([]*internalv1.SettleItem, n)
	for i := range items {
		items[i] = gatewaySettlement(i)
		if failOpen {
			items[i] = failOpenSettlement(i)
		}
	}
	per := heapPer(n, func(i int) { q.KeepAnswered(items[i]) })
	runtime.KeepAlive(q)
	runtime.KeepAlive(items) // made before the count: only what keeping them added counts
	return per
}

// The sizing constants the Helm chart and the enforcer's start-up check use hold what
// a settlement really costs: the heap of one queued and one kept, and a spooled
// record (TestDefaultSpoolHoldsTheDefaultCapacityWithStarts measures that one).
func TestASettlementFitsItsSizing(t *testing.T) {
	const n = 20_000
	for _, c := range []struct {
		name     string
		failOpen bool
		budget   int
	}{{"durable start", false, settleq.HeapBytesPerSettlement}, {"fail-open", true, settleq.HeapBytesPerFailOpenSettlement}} {
		queued, kept := queuedBytes(t, n, c.failOpen), keptBytes(n, c.failOpen)
		if queued < 300 || kept < 200 {
			t.Fatalf("%s: %.0f bytes a queued settlement, %.0f a kept one: the measurement is broken", c.name, queued, kept)
		}
		if queued+kept > float64(c.budget) {
			t.Errorf("%s: a settlement holds %.0f bytes queued and %.0f kept, over its budget of %d: raise it (the chart's memory check uses it)",
				c.name, queued, kept, c.budget)
		}
		t.Logf("%s: %.0f bytes a queued settlement, %.0f a kept one, budgeted %d", c.name, queued, kept, c.budget)
	}
}

// BenchmarkQueuedSettlementBytes measures the heap one settlement holds while it waits
// unanswered in the queue (the control plane down or slow), of a durable start and
// fail-open.
//
//	go test -run '^$' -bench QueuedSettlementBytes -benchtime 1x ./enforcer/settleq
func BenchmarkQueuedSettlementBytes(b *testing.B) {
	for _, failOpen := range []bool{false, true} {
		b.Run(map[bool]string{false: "durable", true: "fail-open"}[failOpen], func(b *testing.B) {
			for b.Loop() {
				b.ReportMetric(queuedBytes(b, 100_000, failOpen), "B/queued")
			}
		})
	}
}
