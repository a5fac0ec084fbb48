package gate

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/enforcer/metrics"
)

// However many distinct members are blocked, the cache holds at most the entries it
// was given (docs/admin.md: 100,000 members): the 16 shards' shares add up to exactly
// that, as the identity cache's do. Each member kept past it cost another its place,
// and tollgate_enforcer_member_cache_evictions_total{cache="blocks"} counts each.
func TestBlockedMembersNeverGrowPastTheirBound(t *testing.T) {
	now := time.Date(2026, 9, 16, 12, 0, 0, 0, time.UTC)
	d := blockedDecision(t, now, 150, 10)
	for _, max := range []int{16, 160, 1000, 1001} {
		m := metrics.Discard()
		c := newBlockedMembers(max, time.Second, m)
		evicted := m.MemberCacheEvictions.WithLabelValues("blocks")
		// A quarter of the bound leaves room in every shard (their shares are far
		// larger than a quarter's spread among them, from 1000 on).
		for i := range max / 4 {
			c.body(&d, limitsOf(&d), "org_x", fmt.Sprintf("om_first_%d", i), now, keep{})
		}
		if n := testutil.ToFloat64(evicted); max >= 1000 && n != 0 {
			t.Fatalf("bound %d: %v evictions with the cache a quarter full", max, n)
		}
		for i := range 20 * max {
			c.body(&d, limitsOf(&d), "org_x", fmt.Sprintf("om_%d", i), now, keep{})
			if n := c.Len(); n > max {
				t.Fatalf("bound %d: %d entries after %d distinct blocked members", max, n, i+1)
			}
		}
		if n, want := testutil.ToFloat64(evicted), float64(max/4+20*max-c.Len()); n != want {
			t.Errorf("bound %d: %v evictions counted, want %v (%d members kept of %d)", max, n, want, c.Len(), max/4+20*max)
		}
		if n := m.MemberCacheLen("blocks"); n != c.Len() {
			t.Errorf("tollgate_enforcer_member_cache_entries{cache=\"blocks\"} says %d, the cache holds %d", n, c.Len())
		}
	}
}
