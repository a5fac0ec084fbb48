package record

import (
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/internal/heapsize"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// readRecord is member i's record as a read from Redis leaves it kept: a policy of
// three timeframes (a name of 120 characters, the longest allowed), the spend of the three windows, the
// match keys of its organization's own prices (ownPrices of them), and the fields it
// was decoded from.
func readRecord(tb testing.TB, r *Reader, i, ownPrices int) (string, *known) {
	member := fmt.Sprintf("om_01m90a2n1pedwt723k%08d", i)
	ent := &internalv1.Entitlement{OrganizationId: "org_01m90a2n1pedwt723k5h025e2f", MemberId: member, MemberActive: true,
		CaptureEnabled: true, TrackingVersion: 3}
	for k := range ownPrices {
		ent.PricedModelKeys = append(ent.PricedModelKeys, fmt.Sprintf("ft:gpt-4.1-mini-2025-04-14:acme::%04d", k))
	}
	rec := &mirror.Record{Entitlement: ent, Version: 12, Generation: "01m90a2n1pedwt723k5h025e2f"}
	for _, tf := range window.Timeframes {
		ent.Limits = append(ent.Limits, &internalv1.Limit{Timeframe: string(tf), PolicyId: "up_01m90a2n1pedwt723k5h025e2f",
			PolicyName: strings.Repeat("p", 120), PolicyRevision: 3, BaseMicroUsd: 5_000_000, HardLimit: true, AllowRequestReset: true})
		rec.Spend = append(rec.Spend, &internalv1.WindowSpend{Timeframe: string(tf), WindowStartUnixMs: 1_796_000_000_000, UsedMicroUsd: 1_234_567})
	}
	blob, err := proto.Marshal(rec)
	if err != nil {
		tb.Fatal(err)
	}
	f := mirror.Fields{Generation: strings.Clone(rec.Generation), Blob: string(blob)}
	dec, err := f.Decode(rec.Generation)
	if err != nil {
		tb.Fatal(err)
	}
	r.ownPrices.share(dec, r.cfg.LastKnown)
	return member, &known{key: r.layout.MemberKey(member), generation: f.Generation, size: len(f.Blob), sum: r.sumOf(f), rec: dec}
}

// lastKnownBytes is the heap the reader holds for each of n members it read (at most
// its bound of n), of an organization with ownPrices prices of its own.
func lastKnownBytes(tb testing.TB, n, ownPrices int) float64 {
	r := New(nil, mirror.Layout{Prefix: "tg:"}, noResolver{}, Config{LastKnown: n}, metrics.New(prometheus.NewRegistry()),
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	per := heapsize.PerKept(tb, n, func(i int) { r.store(readRecord(tb, r, i, ownPrices)) }, r.LastKnownLen)
	runtime.KeepAlive(r)
	return per
}

// A kept record costs no more than its budget, which the enforcer's sizing counts for
// each member of its member capacity, whatever its organization's own prices.
func TestAKeptRecordFitsItsBudget(t *testing.T) {
	for _, ownPrices := range []int{0, 100} {
		heapsize.WithinBudget(t, fmt.Sprintf("kept record (%d own prices)", ownPrices), "HeapBytesPerKnownRecord", []int{5_000, 15_000, 30_000},
			func(n int) float64 { return lastKnownBytes(t, n, ownPrices) }, 800, HeapBytesPerKnownRecord)
	}
}

// BenchmarkLastKnownRecordBytes measures the heap the reader holds for each member it
// has read, at its default bound of DefaultConfig.LastKnown members: the record kept
// for open failure mode and speculative starts, and what tells it unchanged
// (docs/enforcer.md, "Memory"); of an organization without prices of its own, and of
// one with 100 (each member's record carries their match keys).
//
//	go test -run '^$' -bench LastKnownRecordBytes -benchtime 1x ./enforcer/record
func BenchmarkLastKnownRecordBytes(b *testing.B) {
	for _, ownPrices := range []int{0, 100} {
		b.Run(fmt.Sprintf("own-prices-%d", ownPrices), func(b *testing.B) {
			for b.Loop() {
				b.ReportMetric(lastKnownBytes(b, DefaultConfig.LastKnown, ownPrices), "B/member")
			}
		})
	}
}
