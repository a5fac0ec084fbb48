package inflight_test

import (
	"io"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/enforcer/gate"
	"github.com/tollgate-dev/tollgate/enforcer/inflight"
	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/enforcer/settleq"
	"github.com/tollgate-dev/tollgate/pkg/clock"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
)

// BenchmarkUnreportedRequestBytes measures the heap one admitted request that nobody
// reports holds in the tracker (its record, its settlement reservation, what only it
// references), admitted as the gate admits a durable start: a fresh version-2
// snapshot of three buckets, typeid ids, a reservation of the settle queue.
//
//	go test -run '^$' -bench UnreportedRequestBytes -benchtime 1x ./enforcer/inflight
func BenchmarkUnreportedRequestBytes(b *testing.B) {
	const n = 100_000
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	org, member := typeid.New("org"), typeid.New("om")
	priced := []string{"gpt-4o", "gpt-4o-mini"} // the member record's, shared by its requests
	for b.Loop() {
		m := metrics.Discard()
		q := settleq.New(nil, settleq.Config{Capacity: 2 * n}, m, quiet)
		tr := inflight.New(q, clock.System{}, m, quiet)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for range n {
			now := time.Now()
			res, ok := q.Reserve()
			if !ok {
				b.Fatal("no reservation")
			}
			tr.Admitted(&inflight.Request{ID: typeid.New(gate.RequestPrefix), OrganizationID: org, MemberID: member,
				Snapshot: gate.NoRecordSnapshot(org, member, now), Durable: true, Reservation: res, AdmittedAt: now,
				PricedModelKeys: priced})
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if tr.Len() != n {
			b.Fatalf("tracked %d", tr.Len())
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/unreported")
		runtime.KeepAlive(tr)
		runtime.KeepAlive(q)
	}
}
