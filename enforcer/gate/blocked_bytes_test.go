package gate

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/enforcer/decision"
	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/internal/heapsize"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// blockedEverywhere is a decision refusing a member whose three hard limits are all
// exhausted: the longest 429 body, with three buckets listed.
func blockedEverywhere(tb testing.TB, now time.Time) decision.Decision {
	tb.Helper()
	rec := &mirror.Record{Entitlement: &internalv1.Entitlement{OrganizationId: "org_01m90a2n1pedwt723k5h025e2f", MemberId: "om_01m90a2n1pedwt723k5h025e2f",
		MemberActive: true, CaptureEnabled: true}}
	for _, w := range window.Current(now) {
		rec.Entitlement.Limits = append(rec.Entitlement.Limits, &internalv1.Limit{Timeframe: string(w.Timeframe), PolicyId: "up_01m90a2n1pedwt723k5h025e2f",
			BaseMicroUsd: 1_000_000_000, HardLimit: true, AllowRequestReset: true})
		rec.Spend = append(rec.Spend, &internalv1.WindowSpend{Timeframe: string(w.Timeframe), WindowStartUnixMs: w.Start.UnixMilli(), UsedMicroUsd: 1_234_567_890})
	}
	d := decision.Decide(rec, now, false)
	if d.Result != decision.Blocked {
		tb.Fatalf("not blocked: %v", d.Result)
	}
	return d
}

// keptBlockBytes is the heap the gate holds for each of n members it refused (at most
// its bound of n), per member.
func keptBlockBytes(tb testing.TB, n int) float64 {
	now := time.Date(2026, 9, 16, 12, 0, 0, 0, time.UTC)
	d := blockedEverywhere(tb, now)
	c := newBlockedMembers(n, time.Second, metrics.Discard())
	per := heapsize.PerKept(tb, n, func(i int) {
		c.body(&d, limitsOf(&d), "org_01m90a2n1pedwt723k5h025e2f", fmt.Sprintf("om_01m90a2n1pedwt723k%08d", i), now, keep{})
	}, func() int {
		kept := 0
		for i := range c.shards {
			kept += len(c.shards[i].m)
		}
		return kept
	})
	runtime.KeepAlive(c)
	return per
}

// A kept block costs no more than its budget, which the enforcer's sizing counts for
// each member of its member capacity.
func TestAKeptBlockFitsItsBudget(t *testing.T) {
	heapsize.WithinBudget(t, "kept block", "HeapBytesPerKeptBlock", []int{5_000, 15_000, 30_000},
		func(n int) float64 { return keptBlockBytes(t, n) }, 500, HeapBytesPerKeptBlock)
}

// BenchmarkKeptBlockBytes measures the heap the gate holds for each member it refused
// for an exhausted hard limit (all three here), at the cache's default bound of
// 100,000 members: the 429 body rendered once, and its key (docs/enforcer.md, "Memory").
//
//	go test -run '^$' -bench KeptBlockBytes -benchtime 1x ./enforcer/gate
func BenchmarkKeptBlockBytes(b *testing.B) {
	for b.Loop() {
		b.ReportMetric(keptBlockBytes(b, DefaultBlockedCapacity), "B/member")
	}
}
