package record

import (
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
)

// However many distinct members are read, the last-known records kept are at most
// Config.LastKnown (docs/admin.md: 100,000 members): the 32 shards' shares add up to
// exactly that. Each member kept past it cost another its place, and
// tollgate_enforcer_member_cache_evictions_total{cache="records"} counts each.
func TestLastKnownRecordsNeverGrowPastTheirBound(t *testing.T) {
	for _, max := range []int{32, 320, 1000, 1001} {
		m := metrics.New(prometheus.NewRegistry())
		r := New(nil, mirror.Layout{}, noResolver{}, Config{LastKnown: max}, m, slog.New(slog.NewTextHandler(io.Discard, nil)))
		evicted := m.MemberCacheEvictions.WithLabelValues("records")
		// A quarter of the bound leaves room in every shard (their shares are far
		// larger than a quarter's spread among them, from 1000 on).
		for i := range max / 4 {
			r.store(fmt.Sprintf("om_first_%d", i), &known{rec: rec(1, 1, "g1")})
		}
		if n := testutil.ToFloat64(evicted); max >= 1000 && n != 0 {
			t.Fatalf("LastKnown %d: %v evictions with the cache a quarter full", max, n)
		}
		for i := range 20 * max {
			r.store(fmt.Sprintf("om_%d", i), &known{rec: rec(1, 1, "g1")})
			if n := r.LastKnownLen(); n > max {
				t.Fatalf("LastKnown %d: %d records kept after %d distinct members", max, n, i+1)
			}
		}
		if n, want := testutil.ToFloat64(evicted), float64(max/4+20*max-r.LastKnownLen()); n != want {
			t.Errorf("LastKnown %d: %v evictions counted, want %v (%d members kept of %d)", max, n, want, r.LastKnownLen(), max/4+20*max)
		}
		if n := m.MemberCacheLen("records"); n != r.LastKnownLen() {
			t.Errorf("tollgate_enforcer_member_cache_entries{cache=\"records\"} says %d, the cache holds %d", n, r.LastKnownLen())
		}
	}
}
