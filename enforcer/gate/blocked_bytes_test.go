package gate

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/enforcer/metrics"
)

// BenchmarkKeptBlockBytes measures the heap the gate holds for each member it refused
// for an exhausted hard limit, at the cache's bound of 100,000 members (gate.New): the
// 429 body rendered once, and its key (docs/enforcer.md, "Memory").
//
//	go test -run '^$' -bench KeptBlockBytes -benchtime 1x ./enforcer/gate
func BenchmarkKeptBlockBytes(b *testing.B) {
	const n = 100_000
	now := time.Date(2026, 9, 16, 12, 0, 0, 0, time.UTC)
	d := blockedDecision(b, now, 150, 2000) // both the day and the month listed
	for b.Loop() {
		c := newBlockedMembers(n, time.Second, metrics.Discard().BlockedCacheHits)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i := range n {
			c.body(&d, "org_01m90a2n1pedwt723k5h025e2f", fmt.Sprintf("om_01m90a2n1pedwt723k%08d", i), now, keep{})
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		kept := 0
		for i := range c.shards {
			kept += len(c.shards[i].m)
		}
		if kept < n*9/10 {
			b.Fatalf("%d members kept of %d", kept, n)
		}
		b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(kept), "B/member")
		runtime.KeepAlive(c)
	}
}
