package record

import (
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
)

func (r *Reader) lastKnownLen() int {
	n := 0
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}

// However many distinct members are read, the last-known records kept are at most
// Config.LastKnown (docs/admin.md: 100,000 members): the 32 shards' shares add up to
// exactly that.
func TestLastKnownRecordsNeverGrowPastTheirBound(t *testing.T) {
	for _, max := range []int{32, 320, 1000, 1001} {
		r := New(nil, mirror.Layout{}, noResolver{}, Config{LastKnown: max}, metrics.New(prometheus.NewRegistry()),
			slog.New(slog.NewTextHandler(io.Discard, nil)))
		for i := range 20 * max {
			r.store(fmt.Sprintf("om_%d", i), &known{rec: rec(1, 1, "g1")})
			if n := r.lastKnownLen(); n > max {
				t.Fatalf("LastKnown %d: %d records kept after %d distinct members", max, n, i+1)
			}
		}
	}
}
