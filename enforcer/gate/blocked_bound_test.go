package gate

import (
	"fmt"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/enforcer/metrics"
)

func (c *BlockedMembers) len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.RLock()
		n += len(s.m)
		s.mu.RUnlock()
	}
	return n
}

// However many distinct members are blocked, the cache holds at most the entries it
// was given (docs/admin.md: 100,000 members): the 16 shards' shares add up to exactly
// that, as the identity cache's do.
func TestBlockedMembersNeverGrowPastTheirBound(t *testing.T) {
	now := time.Date(2026, 9, 16, 12, 0, 0, 0, time.UTC)
	d := blockedDecision(t, now, 150, 10)
	for _, max := range []int{16, 160, 1000, 1001} {
		c := newBlockedMembers(max, time.Second, metrics.Discard().BlockedCacheHits)
		for i := range 20 * max {
			c.body(&d, "org_x", fmt.Sprintf("om_%d", i), now, keep{})
			if n := c.len(); n > max {
				t.Fatalf("bound %d: %d entries after %d distinct blocked members", max, n, i+1)
			}
		}
	}
}
