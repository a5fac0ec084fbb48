package gate

import (
	"hash/maphash"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/enforcer/decision"
	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// BlockedMembers keeps, per blocked member, the last 429 body rendered (and what it was
// rendered from), and for a short while the blocked decision itself.
//
// Bodies: a blocked member is usually refused many times with the same record in the
// same windows; the body is then the same bytes, so it is rendered once a minute instead
// of per check. Retry-After moves with the clock and is not part of the body; the
// message's "retry in" counts from the minute the body was rendered in (blockedBody).
//
// Decisions: once a member is refused because a hard bucket is exhausted, later checks
// of that member are refused from memory, without reading the record, until the
// earliest of: the TTL, the end of the current windows (a reset may lift the block),
// an invalidation of the member's record or of the member (the control plane announces
// every entitlement change: extension, policy, assignment, capture fence, removal), a
// generation change of the mirror, and any gap in the invalidation subscription. That
// is safe because nothing else can lift a block within a window: spend only grows
// (settlements never lower it; a smaller cost is refused as cost_conflict). Only
// decisions read from a record are kept: not soft-limit or admitted ones, not the
// open-mode answers given on a last-known record.
type BlockedMembers struct {
	seed maphash.Seed
	ttl  time.Duration
	// askURL is where the bodies say a member asks for more (ResetRequestURL).
	askURL string
	// live: the invalidation subscription is confirmed. Decisions are kept and used
	// only then, since a message missed while it is down could have lifted a block.
	live atomic.Bool
	// epoch moves on every invalidation and subscription change. A decision is kept
	// only if the epoch did not move since before its record was read: the record may
	// predate the change the invalidation announced.
	epoch  atomic.Uint64
	shards [16]blockedShard
	// capacity is the bound the shards' shares (blockedShard.max) add up to.
	capacity int
	// hits counts checks answered from a kept decision, evictions kept members
	// dropped to make room for another.
	hits, evictions interface{ Inc() }
}

type blockedShard struct {
	mu sync.RWMutex
	m  map[string]*blockedEntry
	// max is the shard's share of the entries: the shares add up to the cache's bound
	// exactly, so no number of distinct blocked members holds more.
	max int
}

// blockedEntry is never modified once stored; a change replaces it whole.
type blockedEntry struct {
	key blockedKey
	// member is the kept member's id (the map's key, the same bytes): a refusal given
	// from the entry finds its way to ask for more from it (Answer.Ask).
	member string
	body   []byte
	// limits are the member's windows as the kept decision found them (Answer.Limits).
	limits Limits
	// until is when the kept decision lapses: zero when only the body is kept.
	until time.Time
	gen   string // the mirror generation the record was read under
}

// blockedKey is everything the body depends on besides constants: equal keys render
// equal bodies. Only listed buckets (exhausted hard limits) are filled in.
type blockedKey struct {
	org     string
	retryAt int64
	// minute is the minute the body was rendered in (its "retry in" counts from it).
	minute  int64
	buckets [3]blockedBucketKey
}

type blockedBucketKey struct {
	listed          bool
	timeframe       string
	start, end      int64
	used, allowance int64
	allowReset      bool // the policy's flag, shown in the details
	mayAsk          bool // the way to ask is offered (decision.Bucket.ExtensionWouldLift)
}

// newBlockedMembers keeps at most maxEntries members (at least one per shard), and
// decisions for ttl (0: none).
func newBlockedMembers(maxEntries int, ttl time.Duration, m *metrics.Metrics) *BlockedMembers {
	c := &BlockedMembers{seed: maphash.MakeSeed(), ttl: ttl, askURL: ResetRequestPath, hits: m.BlockedCacheHits, evictions: m.MemberCacheEvictions.WithLabelValues("blocks")}
	m.SetMemberCacheLen("blocks", c.Len)
	maxEntries = max(maxEntries, len(c.shards))
	c.capacity = maxEntries
	for i := range c.shards {
		c.shards[i].m = map[string]*blockedEntry{}
		c.shards[i].max = maxEntries / len(c.shards)
		if i < maxEntries%len(c.shards) {
			c.shards[i].max++
		}
	}
	return c
}

func keyOf(d *decision.Decision, orgID string, now time.Time) blockedKey {
	k := blockedKey{org: orgID, retryAt: d.RetryAt.UnixNano(), minute: renderMinute(now).Unix()}
	for i := range d.Buckets {
		b := &d.Buckets[i]
		if !b.Exhausted || !b.HardLimit {
			continue
		}
		k.buckets[i] = blockedBucketKey{listed: true, timeframe: string(b.Window.Timeframe),
			start: b.Window.Start.UnixNano(), end: b.Window.End.UnixNano(),
			used: b.Used, allowance: b.Allowance, allowReset: b.AllowRequestReset, mayAsk: b.ExtensionWouldLift()}
	}
	return k
}

// Len is how many members are kept now
// (tollgate_enforcer_member_cache_entries{cache="blocks"}).
func (c *BlockedMembers) Len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.RLock()
		n += len(s.m)
		s.mu.RUnlock()
	}
	return n
}

// Capacity is the most members kept (Deps.BlockedCapacity, at least one per shard):
// the shards' shares add up to it.
func (c *BlockedMembers) Capacity() int { return c.capacity }

func (c *BlockedMembers) shard(memberID string) *blockedShard {
	return &c.shards[maphash.String(c.seed, memberID)%uint64(len(c.shards))]
}

func (c *BlockedMembers) get(memberID string) *blockedEntry {
	s := c.shard(memberID)
	s.mu.RLock()
	e := s.m[memberID]
	s.mu.RUnlock()
	return e
}

// keep is what a fresh blocked decision may be kept under: the generation and epoch
// seen before its record was read. ok is false when it must not be kept.
type keep struct {
	ok    bool
	gen   string
	epoch uint64
}

// refusal returns the kept 429 of a member that is still valid at now under the
// mirror generation gen.
func (c *BlockedMembers) refusal(memberID string, now time.Time, gen string) (Answer, bool) {
	if !c.live.Load() {
		return Answer{}, false
	}
	e := c.get(memberID)
	if e == nil || !now.Before(e.until) || e.gen != gen {
		return Answer{}, false
	}
	c.hits.Inc()
	a := blockedAnswer(decision.SecondsUntil(time.Unix(0, e.key.retryAt), now), e.body, "", e.limits)
	a.kept, a.keptBy = e, c
	return a, true
}

// askOf is the way to ask for more that the body rendered under key names for
// memberID (blockedBody's ask), found again from the key rather than kept: the first
// listed window that allows asking and resets after every listed one that does not. Kept, it would add about 270 bytes to every kept
// block (HeapBytesPerKeptBlock); found again, it costs a hash and a string (about
// 1.2 µs), paid where a refusal's headers are written (Answer.Ask), not by Check: an
// ext_authz refusal mostly goes out as the response encoded for the same body before.
func (c *BlockedMembers) askOf(key blockedKey, memberID string) string {
	var stuck int64 // as blockedBody's: the latest reset no extension can lift
	for _, b := range key.buckets {
		if b.listed && b.allowance <= 0 {
			return "" // a 0 USD limit: nothing lifts it (blockedBody, zeroLimits)
		}
		if b.listed && !b.mayAsk && b.end > stuck {
			stuck = b.end
		}
	}
	for _, b := range key.buckets {
		if b.listed && b.mayAsk && b.end > stuck {
			tf := window.Timeframe(b.timeframe)
			return askForMore(c.askURL, window.BucketID(key.org, memberID, tf, time.Unix(0, b.start)), b.timeframe)
		}
	}
	return ""
}

// before returns what a decision on a record read from now on may be kept under.
func (c *BlockedMembers) before(gen string, genOK bool) keep {
	return keep{ok: genOK && c.ttl > 0 && c.live.Load(), gen: gen, epoch: c.epoch.Load()}
}

// body returns the 429 body of a blocked decision, rendered only when it differs from
// the member's last one, with its way to ask for more (blockedBody), and keeps the
// decision (decided at now, its limits limitsOf(d)) when k allows.
func (c *BlockedMembers) body(d *decision.Decision, limits Limits, orgID, memberID string, now time.Time, k keep) (body []byte, ask string) {
	key := keyOf(d, orgID, now)
	e := c.get(memberID)
	if e != nil && e.key == key && !k.ok {
		return e.body, c.askOf(key, memberID)
	}
	next := &blockedEntry{key: key, member: memberID, limits: limits}
	if e != nil && e.key == key {
		next.body, ask = e.body, c.askOf(key, memberID)
	} else {
		next.body, ask = blockedBody(d, orgID, memberID, now, c.askURL)
	}
	if k.ok {
		next.gen = k.gen
		next.until = now.Add(c.ttl)
		for i := range d.Buckets {
			// Any window's end may change the decision: never keep it across one.
			if end := d.Buckets[i].Window.End; end.Before(next.until) {
				next.until = end
			}
		}
	}
	s := c.shard(memberID)
	s.mu.Lock()
	if k.ok && c.epoch.Load() != k.epoch {
		// An invalidation came while the record was read: keep the body only.
		next.until, next.gen = time.Time{}, ""
	}
	if _, ok := s.m[memberID]; !ok && len(s.m) >= s.max {
		for m := range s.m {
			delete(s.m, m)
			c.evictions.Inc()
			break
		}
	}
	s.m[memberID] = next
	s.mu.Unlock()
	return next.body, ask
}

// Invalidate implements invalidation.Subscriber: the member's record changed, or the
// member was removed; forget what was decided on the old record. Credential and API
// key revocations are the identity cache's: it is asked first on every check.
func (c *BlockedMembers) Invalidate(inv mirror.Invalidation) {
	if inv.Kind != mirror.KindRecord && inv.Kind != mirror.KindMember {
		return
	}
	c.epoch.Add(1)
	s := c.shard(inv.ID)
	s.mu.Lock()
	delete(s.m, inv.ID)
	s.mu.Unlock()
}

// Subscribed implements invalidation.Subscriber: decisions are kept only while the
// subscription is live, and all are forgotten when it is confirmed or lost (messages
// may have been missed).
func (c *BlockedMembers) Subscribed(live bool) {
	c.live.Store(live)
	c.epoch.Add(1)
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		clear(s.m)
		s.mu.Unlock()
	}
}

// Live tells whether the invalidation subscription is live, so that decisions are kept.
func (c *BlockedMembers) Live() bool { return c.live.Load() }

// blockedAnswer is the 429 with a body from BlockedMembers, its way to ask for more, and
// the member's limits.
func blockedAnswer(retryAfter int64, body []byte, ask string, limits Limits) Answer {
	a := Refusal(ReasonUsageLimit)
	a.UsageState, a.RetryAfter, a.Body, a.ask = string(decision.StateBlocked), strconv.FormatInt(retryAfter, 10), body, ask
	a.Limits = limits
	return a
}

// blocked renders the 429 of a fresh decision (see blockedBody), keeping it when k
// allows.
func (g *Gate) blocked(d *decision.Decision, orgID, memberID string, now time.Time, k keep) Answer {
	limits := limitsOf(d)
	body, ask := g.Blocks.body(d, limits, orgID, memberID, now, k)
	return blockedAnswer(d.RetryAfter, body, ask, limits)
}
