package ledger

import (
	"sync"

	"github.com/tollgate-dev/tollgate/controlplane/store"
)

// fenceCache remembers each member's capture fence (tracking version, capture on or off)
// as the last start batch found it under its lock. It is a guess, never the truth: a
// batch that trusts it records a start only if the locked row still holds exactly that
// fence (store.QueueFencedStarts), and runs the start again the slow way when not. It
// only spares the round trip that reading the fence first would cost.
type fenceCache struct {
	mu sync.Mutex
	m  map[string]store.TrackingState
}

// maxFences bounds the members remembered; when full the cache starts over (the next
// batch of each member then reads its fence first, as on a new control plane).
const maxFences = 100_000

// remember records the fences a batch read under its lock.
func (c *fenceCache) remember(states map[string]store.TrackingState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m)+len(states) > maxFences {
		c.m = make(map[string]store.TrackingState, len(states))
	}
	for m, st := range states {
		c.m[m] = st
	}
}

// all returns the remembered fences of the rows' members, or false when one of them
// has none.
func (c *fenceCache) all(rows []store.StartInsert) (map[string]store.TrackingState, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]store.TrackingState, len(rows))
	for _, r := range rows {
		st, ok := c.m[r.MemberID]
		if !ok {
			return nil, false
		}
		out[r.MemberID] = st
	}
	return out, true
}
