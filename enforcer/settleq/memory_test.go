package settleq_test

import (
	"fmt"
	"log/slog"
	"runtime"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/enforcer/settleq"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// gatewaySettlement is a settlement as the gateway sends one for a durable start:
// ids, model and host of its own, usage and cost; member i%1000's.
func gatewaySettlement(i int) *internalv1.SettleItem {
	cost := int64(1234 + i)
	return &internalv1.SettleItem{RequestId: fmt.Sprintf("req_01m90a2nrwf4mt6nfv%08d", i),
		OrganizationId: "org_01m90a2n1pedwt723k5h025e2f", MemberId: fmt.Sprintf("om_01m90a2n1pedwt723k%08d", i%1000),
		Model: "gpt-4.1-mini-2025-04-14", InputTokens: 1200, OutputTokens: 350, CachedInputTokens: 1024,
		UpstreamCostMicroUsd: &cost, Complete: true, FinishedAtUnixMs: 1_796_000_000_000 + int64(i),
		UpstreamStatus: 200, UpstreamHost: "api.openai.com"}
}

// heapPer is the heap that n calls of add hold once collected, per call.
func heapPer(n int, add func(i int)) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range n {
		add(i)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
}

// queuedBytes is the heap a settlement holds while it waits unanswered in a queue
// (the control plane down): its item, its entry, its share of the queue's slices and
// its kept start.
func queuedBytes(tb testing.TB, n int) float64 {
	q := settleq.New(newLedger(), settleq.Config{Capacity: n}, metrics.Discard(), slog.New(slog.DiscardHandler))
	snap := admissionSnapshot(1_796_000_000_000)
	per := heapPer(n, func(i int) {
		res, ok := q.Reserve()
		if !ok {
			tb.Fatal("no reservation")
		}
		res.KeepStart(snap)
		if err := q.Enqueue(gatewaySettlement(i), res, nil); err != nil {
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
func keptBytes(n int) float64 {
	q := settleq.New(newLedger(), settleq.Config{Capacity: n}, metrics.Discard(), slog.New(slog.DiscardHandler))
	items := make([]*internalv1.SettleItem, n)
	for i := range items {
		items[i] = gatewaySettlement(i)
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
	queued, kept := queuedBytes(t, n), keptBytes(n)
	if queued < 300 || kept < 200 {
		t.Fatalf("%.0f bytes a queued settlement, %.0f a kept one: the measurement is broken", queued, kept)
	}
	if queued+kept > settleq.HeapBytesPerSettlement {
		t.Errorf("a settlement holds %.0f bytes queued and %.0f kept, over settleq.HeapBytesPerSettlement %d: raise it (the chart's memory check uses it)",
			queued, kept, settleq.HeapBytesPerSettlement)
	}
	t.Logf("%.0f bytes a queued settlement, %.0f a kept one, budgeted %d", queued, kept, settleq.HeapBytesPerSettlement)
}

// BenchmarkQueuedSettlementBytes measures the heap one settlement holds while it waits
// unanswered in the queue (the control plane down or slow).
//
//	go test -run '^$' -bench QueuedSettlementBytes -benchtime 1x ./enforcer/settleq
func BenchmarkQueuedSettlementBytes(b *testing.B) {
	for b.Loop() {
		b.ReportMetric(queuedBytes(b, 100_000), "B/queued")
	}
}
