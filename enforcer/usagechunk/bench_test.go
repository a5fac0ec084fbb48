package usagechunk_test

import (
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/usagechunk"
)

// BenchmarkFilter passes a 200-token answer's stream through a Filter as the gateway
// reads it: an event a read (a provider's chunks as they come), and in 1 KiB reads
// (chunks that came together, events split over reads). The cost a stream the gateway
// asked for its usage pays on its way to the client; compare BenchmarkSSE
// (enforcer/responseusage), which reads the same stream's usage.
func BenchmarkFilter(b *testing.B) {
	events := []string{roleEvent}
	for range 200 {
		events = append(events, wordEvent)
	}
	events = append(events, finishEvent, usageEvent, doneEvent)
	stream := strings.Join(events, "")
	kilobytes := []string{}
	for s := stream; len(s) > 0; s = s[min(len(s), 1<<10):] {
		kilobytes = append(kilobytes, s[:min(len(s), 1<<10)])
	}
	for name, reads := range map[string][]string{"event a read": events, "1 KiB reads": kilobytes} {
		b.Run(name, func(b *testing.B) {
			buf := make([]byte, 1<<10)
			b.SetBytes(int64(len(stream)))
			b.ReportAllocs()
			for b.Loop() {
				var f usagechunk.Filter
				for _, r := range reads {
					_ = f.Pass(buf[:copy(buf, r)])
				}
				if !f.Dropped() {
					b.Fatal("the usage event passed")
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(events)), "ns/event")
		})
	}
}
