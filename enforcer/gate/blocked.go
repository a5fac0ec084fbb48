package gate

import (
	"hash/maphash"
	"strconv"
	"sync"

	"github.com/tollgate-dev/tollgate/enforcer/decision"
)

// blockedBodies keeps, per member, the last 429 body rendered and what it was rendered
// from. A blocked member is usually refused many times with the same record in the same
// windows; the body is then the same bytes, so it is rendered once instead of per check.
// Only Retry-After moves with the clock, and it is not part of the body.
type blockedBodies struct {
	seed   maphash.Seed
	max    int // entries per shard
	shards [16]blockedShard
}

type blockedShard struct {
	mu sync.Mutex
	m  map[string]*blockedEntry
}

type blockedEntry struct {
	key  blockedKey
	body []byte // never modified once stored
}

// blockedKey is everything the body depends on besides constants: equal keys render
// equal bodies. Only listed buckets (exhausted hard limits) are filled in.
type blockedKey struct {
	org     string
	retryAt int64
	buckets [3]blockedBucketKey
}

type blockedBucketKey struct {
	listed          bool
	timeframe       string
	start, end      int64
	used, allowance int64
	allowReset      bool
}

func newBlockedBodies(maxEntries int) *blockedBodies {
	c := &blockedBodies{seed: maphash.MakeSeed(), max: maxEntries/16 + 1}
	for i := range c.shards {
		c.shards[i].m = map[string]*blockedEntry{}
	}
	return c
}

func keyOf(d *decision.Decision, orgID string) blockedKey {
	k := blockedKey{org: orgID, retryAt: d.RetryAt.UnixNano()}
	for i := range d.Buckets {
		b := &d.Buckets[i]
		if !b.Exhausted || !b.HardLimit {
			continue
		}
		k.buckets[i] = blockedBucketKey{listed: true, timeframe: string(b.Window.Timeframe),
			start: b.Window.Start.UnixNano(), end: b.Window.End.UnixNano(),
			used: b.Used, allowance: b.Allowance, allowReset: b.AllowRequestReset}
	}
	return k
}

// body returns the 429 body of a blocked decision, rendered only when it differs from
// the member's last one.
func (c *blockedBodies) body(d *decision.Decision, orgID, memberID string) []byte {
	k := keyOf(d, orgID)
	s := &c.shards[maphash.String(c.seed, memberID)%uint64(len(c.shards))]
	s.mu.Lock()
	e := s.m[memberID]
	s.mu.Unlock()
	if e != nil && e.key == k {
		return e.body
	}
	e = &blockedEntry{key: k, body: blockedBody(d, orgID, memberID)}
	s.mu.Lock()
	if _, ok := s.m[memberID]; !ok && len(s.m) >= c.max {
		for m := range s.m {
			delete(s.m, m)
			break
		}
	}
	s.m[memberID] = e
	s.mu.Unlock()
	return e.body
}

// blocked renders the 429 (see blockedBody), with the body of the cache.
func (g *Gate) blocked(d *decision.Decision, orgID, memberID string) Answer {
	return Answer{Status: 429, Decision: Blocked, Reason: "usage_limit", UsageState: string(decision.StateBlocked),
		ErrorCode: CodeUsageLimitExceeded, RetryAfter: strconv.FormatInt(d.RetryAfter, 10), Body: g.bodies.body(d, orgID, memberID)}
}
