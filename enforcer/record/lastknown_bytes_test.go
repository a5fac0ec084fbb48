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
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// readRecord is member i's record as a read from Redis leaves it kept: a policy of
// three timeframes (a name of 40 characters), the spend of the three windows, the
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
			PolicyName: strings.Repeat("p", 40), PolicyRevision: 3, BaseMicroUsd: 5_000_000, HardLimit: true, AllowRequestReset: true})
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

// BenchmarkLastKnownRecordBytes measures the heap the reader holds for each member it
// has read, at its bound of DefaultConfig.LastKnown members: the record kept for open
// failure mode and speculative starts, with the fields it was decoded from
// (docs/enforcer.md, "Memory"); of an organization without prices of its own, and of
// one with 100 (each member's record carries their match keys).
//
//	go test -run '^$' -bench LastKnownRecordBytes -benchtime 1x ./enforcer/record
func BenchmarkLastKnownRecordBytes(b *testing.B) {
	for _, ownPrices := range []int{0, 100} {
		b.Run(fmt.Sprintf("own-prices-%d", ownPrices), func(b *testing.B) { lastKnownRecordBytes(b, ownPrices) })
	}
}

func lastKnownRecordBytes(b *testing.B, ownPrices int) {
	for b.Loop() {
		r := New(nil, mirror.Layout{Prefix: "tg:"}, noResolver{}, Config{}, metrics.New(prometheus.NewRegistry()),
			slog.New(slog.NewTextHandler(io.Discard, nil)))
		n := DefaultConfig.LastKnown
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i := range n {
			r.store(readRecord(b, r, i, ownPrices))
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		kept := r.lastKnownLen()
		if kept < n*9/10 {
			b.Fatalf("%d records kept of %d members", kept, n)
		}
		b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(kept), "B/member")
		b.ReportMetric(float64(kept), "members")
		runtime.KeepAlive(r)
	}
}
