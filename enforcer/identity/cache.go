package identity

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"
	"google.golang.org/grpc"

	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/pkg/clock"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
)

// Authenticator is the part of the internal API this package calls.
type Authenticator interface {
	Authenticate(ctx context.Context, in *internalv1.AuthenticateRequest, opts ...grpc.CallOption) (*internalv1.AuthenticateResponse, error)
}

// Identity is what a credential stands for.
type Identity struct {
	// Found is false for unknown, revoked or expired credentials.
	Found          bool
	Active         bool
	OrganizationID string
	MemberID       string
	UserID         string
	APIKeyID       string
}

// Config tunes the cache. Zero fields take the defaults of DefaultConfig.
type Config struct {
	// TTL is how long a known credential is trusted without asking again.
	TTL time.Duration
	// RefreshAfter is the age past which a check that finds an active identity asks the
	// control plane again in the background while it goes on with the cached one
	// (default TTL/2, at most TTL). A credential in steady use is then never asked for
	// on a check's path, and TTL still bounds how long a missed revocation works.
	RefreshAfter time.Duration
	// NegativeTTL is how long an unknown credential is remembered as unknown.
	NegativeTTL time.Duration
	// MaxEntries bounds the entries held, negative ones included (at least 16, one per
	// shard); past it, an entry is evicted to make room (evictFor).
	MaxEntries int
	// CallTimeout bounds one Authenticate call.
	CallTimeout time.Duration
}

// DefaultConfig: a revoked key stops working within 30s even if its invalidation is lost.
// A call gets 500ms: a check waits on it, and the proxies in deploy/ give a check 1s in
// all (the check's own deadline, gate.DefaultCheckTimeout, bounds its whole wait); the
// call is shared by the checks presenting the credential, so a control plane that does
// not answer is asked again soon rather than waited on for longer than any check. The
// enforcer sets it to TOLLGATE_ENFORCER_CHECK_TIMEOUT.
var DefaultConfig = Config{TTL: 30 * time.Second, NegativeTTL: 5 * time.Second, MaxEntries: 100_000, CallTimeout: 500 * time.Millisecond}

// Cache maps credential hashes to identities.
type Cache struct {
	cfg    Config
	cp     Authenticator
	clk    clock.Clock
	m      *metrics.Metrics
	log    *slog.Logger
	flight singleflight.Group
	// epoch moves on every invalidation: an answer that was in flight across one about
	// its credential, member or key (or a flush) is not cached, since it may predate the
	// revocation. Invalidations about others do not keep it out (invalidatedSince).
	epoch atomic.Uint64
	// invMu guards invs and orders epoch's moves with their entries: the invalidation
	// that moved the epoch to e is invs[e%invLog].
	invMu  sync.Mutex
	invs   [invLog]invalidated
	shards [shardCount]shard

	hit, negHit, miss, refreshes, evictions interface{ Inc() }
}

// shardCount is the number of shards, each with its own lock.
const shardCount = 16

// invLog is how many of the latest invalidations are remembered for the answers in
// flight across them; an answer that saw more come is not cached.
const invLog = 1024

// invalidated is one move of the epoch: an invalidation, or all (a flush).
type invalidated struct {
	all  bool
	kind string
	id   string   // a member's or an API key's id
	hash [32]byte // a credential's hash
}

// matches reports whether the invalidation is about the identity of credential h.
func (x *invalidated) matches(h *[32]byte, id *Identity) bool {
	switch {
	case x.all:
		return true
	case x.kind == mirror.KindCredential:
		return x.hash == *h
	case x.kind == mirror.KindMember:
		return id.MemberID != "" && x.id == id.MemberID
	case x.kind == mirror.KindAPIKey:
		return id.APIKeyID != "" && x.id == id.APIKeyID
	}
	return true
}

// invalidated moves the epoch on, remembering why.
func (c *Cache) invalidated(x invalidated) {
	c.invMu.Lock()
	c.invs[c.epoch.Add(1)%invLog] = x
	c.invMu.Unlock()
}

// invalidatedSince reports whether an invalidation since epoch may be about the
// identity answered for credential h: one about it, or more than invLog of any. Before
// 2026-12-03 any invalidation did, so at scale, where sign-outs, key deletions and
// removals come from every organization, answers in flight across someone else's were
// dropped and their keys asked for again at the next check.
func (c *Cache) invalidatedSince(epoch uint64, h *[32]byte, id *Identity) bool {
	c.invMu.Lock()
	defer c.invMu.Unlock()
	cur := c.epoch.Load()
	if cur-epoch > invLog {
		return true
	}
	for e := epoch + 1; e <= cur; e++ {
		if c.invs[e%invLog].matches(h, id) {
			return true
		}
	}
	return false
}

type shard struct {
	mu sync.RWMutex
	m  map[[32]byte]entry
	// max is the shard's share of MaxEntries: the shares add up to MaxEntries exactly,
	// so no flood of distinct credentials fills the cache past it.
	max int
}

type entry struct {
	id   Identity
	kind internalv1.CredentialKind
	// expires is the TTL's end, or the credential's own expiry when that comes first.
	expires time.Time
	// refresh is when a hit starts a background refresh; a hit that starts one moves it
	// on by CallTimeout, so one refresh at a time is out per credential.
	refresh time.Time
	// untilMs is the credential's own expiry (Unix ms, 0 for none), which bounds the
	// entry's use as the last-known identity too (LastKnownError).
	untilMs int64
}

// LastKnownError is Lookup's error when the control plane could not be asked about a
// credential whose identity the cache held, active, until its TTL ran out: Last is that
// identity, for open failure mode to charge the credential's member on its last-known
// record rather than admit the request unidentified. Invalidations and flushes forget
// it as they forget a live entry, and it ends at the credential's own expiry.
type LastKnownError struct {
	Last Identity
	Err  error
}

func (e *LastKnownError) Error() string { return e.Err.Error() }
func (e *LastKnownError) Unwrap() error { return e.Err }

// New returns an empty cache backed by the control plane.
func New(cp Authenticator, cfg Config, clk clock.Clock, m *metrics.Metrics, log *slog.Logger) *Cache {
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultConfig.TTL
	}
	if cfg.NegativeTTL <= 0 {
		cfg.NegativeTTL = DefaultConfig.NegativeTTL
	}
	if cfg.RefreshAfter <= 0 || cfg.RefreshAfter > cfg.TTL {
		cfg.RefreshAfter = cfg.TTL / 2
	}
	if cfg.MaxEntries <= 0 {
		cfg.MaxEntries = DefaultConfig.MaxEntries
	}
	cfg.MaxEntries = max(cfg.MaxEntries, shardCount)
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultConfig.CallTimeout
	}
	c := &Cache{cfg: cfg, cp: cp, clk: clk, m: m, log: log,
		hit: m.IdentityCache.WithLabelValues("hit"), negHit: m.IdentityCache.WithLabelValues("negative_hit"),
		miss: m.IdentityCache.WithLabelValues("miss"), refreshes: m.IdentityRefreshes, evictions: m.MemberCacheEvictions.WithLabelValues("identities")}
	for i := range c.shards {
		c.shards[i].m = map[[32]byte]entry{}
		c.shards[i].max = cfg.MaxEntries / shardCount
		if i < cfg.MaxEntries%shardCount {
			c.shards[i].max++
		}
	}
	m.SetMemberCacheLen("identities", c.Len)
	return c
}

// hashBufs holds the buffers credentials are copied into for hashing: converting the
// string allocates on every check otherwise.
var hashBufs = sync.Pool{New: func() any { b := make([]byte, 0, 128); return &b }}

func hashOf(secret string) [32]byte {
	p := hashBufs.Get().(*[]byte)
	b := append((*p)[:0], secret...)
	h := sha256.Sum256(b)
	clear(b) // a credential does not linger in a pooled buffer
	*p = b
	hashBufs.Put(p)
	return h
}

// Len is how many entries the cache holds now, expired ones not yet dropped included
// (tollgate_enforcer_member_cache_entries{cache="identities"}).
func (c *Cache) Len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.RLock()
		n += len(s.m)
		s.mu.RUnlock()
	}
	return n
}

// Capacity is the most entries the cache holds (Config.MaxEntries, at least one per
// shard): the shards' shares add up to it.
func (c *Cache) Capacity() int { return c.cfg.MaxEntries }

func (c *Cache) shard(h *[32]byte) *shard { return &c.shards[h[0]%byte(len(c.shards))] }

// Lookup returns the identity of a raw credential of the given kind. An error means
// the control plane could not be asked (infrastructure), never "unknown credential"; it
// is a *LastKnownError when the cache held an active identity for the credential.
func (c *Cache) Lookup(ctx context.Context, kind internalv1.CredentialKind, secret string) (Identity, error) {
	h := hashOf(secret)
	s := c.shard(&h)
	now := c.clk.Now()
	s.mu.RLock()
	e, ok := s.m[h]
	s.mu.RUnlock()
	if ok && now.Before(e.expires) {
		if e.id.Found {
			c.hit.Inc()
		} else {
			c.negHit.Inc()
		}
		if e.id.Active && !now.Before(e.refresh) && e.kind == kind {
			c.refreshAhead(h, now)
		}
		return e.id, nil
	}
	id, err := c.ask(ctx, kind, h)
	if err != nil {
		if last, ok := c.lastKnown(&h, kind); ok {
			if !last.Found || !last.Active {
				// The control plane's last word was a refusal (unknown, revoked, expired,
				// removed), which no later answer turns into an admission but a new
				// credential's: it stands while the control plane cannot be asked, in
				// either failure mode. Before 2026-12-07 open mode admitted a revoked key,
				// unidentified, once its negative entry's 5s had run out.
				return last, nil
			}
			return Identity{}, &LastKnownError{Last: last, Err: err}
		}
	}
	return id, err
}

// lastKnown is the identity the cache still holds for credential h past its TTL (an
// entry is dropped only when evicted, invalidated, flushed or replaced): an active one,
// or a refusal (not found, or inactive; an active identity whose credential has expired
// since is not found).
func (c *Cache) lastKnown(h *[32]byte, kind internalv1.CredentialKind) (Identity, bool) {
	s := c.shard(h)
	s.mu.RLock()
	e, ok := s.m[*h]
	s.mu.RUnlock()
	if !ok || e.kind != kind {
		return Identity{}, false
	}
	if e.untilMs != 0 && c.clk.Now().UnixMilli() >= e.untilMs {
		return Identity{}, true
	}
	return e.id, true
}

// refreshAhead asks the control plane again for an entry past its refresh time,
// without making the check wait: it goes on with the cached identity, which the answer
// replaces (or, for a revoked key, turns into a negative entry). Without it every
// credential in steady use would stall its checks on an Authenticate call once per
// TTL. Only the hit that moves the entry's refresh time on starts the call.
func (c *Cache) refreshAhead(h [32]byte, now time.Time) {
	s := c.shard(&h)
	s.mu.Lock()
	e, ok := s.m[h]
	start := ok && !now.Before(e.refresh)
	if start {
		e.refresh = now.Add(c.cfg.CallTimeout)
		s.m[h] = e
	}
	s.mu.Unlock()
	if !start {
		return
	}
	c.refreshes.Inc()
	epoch := c.epoch.Load()
	c.flight.DoChan(flightKey(&h, epoch), func() (any, error) {
		return c.call(context.Background(), e.kind, h, epoch)
	})
}

// flightKey is the singleflight key of a call about h made at epoch. The epoch is part
// of it so that a lookup made after an invalidation was applied never joins a call that
// started before it: that call may have read the credential before its revocation, and
// its answer is not cached (store) but would still answer the joined lookup.
func flightKey(h *[32]byte, epoch uint64) string {
	var k [40]byte
	copy(k[:32], h[:])
	binary.LittleEndian.PutUint64(k[32:], epoch)
	return string(k[:])
}

// ask asks the control plane on a miss (h is a copy: only a miss moves it to the heap).
func (c *Cache) ask(ctx context.Context, kind internalv1.CredentialKind, h [32]byte) (Identity, error) {
	c.miss.Inc()
	epoch := c.epoch.Load()
	// The call is shared by every caller presenting this credential right now (and since
	// the same invalidation: flightKey), so it must not die with the first caller's
	// context; each caller still stops waiting when its own context ends.
	ch := c.flight.DoChan(flightKey(&h, epoch), func() (any, error) {
		// A call about h that ended between this lookup's miss and here has cached its
		// answer and left the flight: that answer is this lookup's too. Without the
		// look a cold enforcer's herd asked the control plane twice for a key now and
		// then (241 calls for 240 keys, in CI).
		if id, ok := c.fresh(&h, kind); ok {
			return id, nil
		}
		return c.call(context.WithoutCancel(ctx), kind, h, epoch)
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return Identity{}, r.Err
		}
		return r.Val.(Identity), nil
	case <-ctx.Done():
		return Identity{}, ctx.Err()
	}
}

// fresh is the identity cached for credential h of kind while its entry lasts.
func (c *Cache) fresh(h *[32]byte, kind internalv1.CredentialKind) (Identity, bool) {
	s := c.shard(h)
	s.mu.RLock()
	e, ok := s.m[*h]
	s.mu.RUnlock()
	if !ok || e.kind != kind || !c.clk.Now().Before(e.expires) {
		return Identity{}, false
	}
	return e.id, true
}

// call asks the control plane and caches the answer (unless an invalidation came
// since epoch).
func (c *Cache) call(ctx context.Context, kind internalv1.CredentialKind, h [32]byte, epoch uint64) (any, error) {
	callCtx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	resp, err := c.cp.Authenticate(callCtx, &internalv1.AuthenticateRequest{CredentialHash: h[:], Kind: kind})
	if err != nil {
		return nil, err
	}
	id := Identity{Found: resp.GetFound(), Active: resp.GetActive(), OrganizationID: resp.GetOrganizationId(),
		MemberID: resp.GetMemberId(), UserID: resp.GetUserId(), APIKeyID: resp.GetApiKeyId()}
	if id.Found && (id.OrganizationID == "" || id.MemberID == "") {
		return nil, errors.New("identity: control plane answered a found credential without organization or member")
	}
	var until time.Time
	if ms := resp.GetExpiresAtUnixMs(); id.Found && ms > 0 {
		until = time.UnixMilli(ms)
	}
	c.store(h, kind, id, until, epoch)
	return id, nil
}

// store caches id for the TTL, or until the credential's own expiry (until, zero when
// it has none or the control plane did not say) when that comes first: the next lookup
// after it asks again and is refused. A credential already expired by the enforcer's
// clock is not cached at all.
func (c *Cache) store(h [32]byte, kind internalv1.CredentialKind, id Identity, until time.Time, epoch uint64) {
	ttl, negative := c.cfg.TTL, !id.Found || !id.Active
	if negative {
		ttl = c.cfg.NegativeTTL
	}
	s := c.shard(&h)
	s.mu.Lock()
	defer s.mu.Unlock()
	// Under the shard's lock: an invalidation that comes after this look deletes the
	// entry afterwards (it moves the epoch before it deletes).
	if c.epoch.Load() != epoch && c.invalidatedSince(epoch, &h, &id) {
		return
	}
	now := c.clk.Now()
	if _, present := s.m[h]; !present && len(s.m) >= s.max {
		room, live := s.evictFor(negative, now)
		if live {
			c.evictions.Inc()
		}
		if !room {
			return // an unknown credential is not worth a known one's place
		}
	}
	e := entry{id: id, kind: kind, expires: now.Add(ttl), refresh: now.Add(c.cfg.RefreshAfter)}
	if !until.IsZero() {
		if !now.Before(until) {
			delete(s.m, h)
			return
		}
		if until.Before(e.expires) {
			e.expires = until
		}
		if until.Before(e.refresh) {
			e.refresh = until
		}
		e.untilMs = until.UnixMilli()
	}
	s.m[h] = e
}

// evictSample is how many entries of a full shard are looked at for one to evict.
const evictSample = 8

// evictFor makes room in a full shard (its lock held) for an entry, negative when it is
// an unknown or inactive credential's. It evicts, among a few entries (map iteration
// order is random), an expired or negative one; failing that, for a known credential
// any one of them, and for a negative entry none: it reports false, and the negative
// entry is not kept. So a flood of unknown credentials (anyone can send tgk_<anything>,
// each one a miss) never pushes a member's identity out, which would send the member's
// checks back to the control plane; any evicted identity is simply asked for again.
// It reports whether there is room now, and whether a live identity was evicted for it.
func (s *shard) evictFor(negative bool, now time.Time) (room, live bool) {
	var first [32]byte
	seen := 0
	for k, e := range s.m {
		if !now.Before(e.expires) || !e.id.Found || !e.id.Active {
			delete(s.m, k)
			return true, false
		}
		if seen == 0 {
			first = k
		}
		if seen++; seen == evictSample {
			break
		}
	}
	if negative || seen == 0 {
		return seen == 0, false
	}
	delete(s.m, first)
	return true, true
}

// Invalidate forgets what an invalidation names.
func (c *Cache) Invalidate(inv mirror.Invalidation) {
	switch inv.Kind {
	case mirror.KindCredential:
		var h [32]byte
		b, err := hex.DecodeString(inv.ID)
		ok := err == nil && len(b) == len(h)
		if ok {
			copy(h[:], b)
		}
		c.invalidated(invalidated{kind: inv.Kind, hash: h})
		if ok {
			s := c.shard(&h)
			s.mu.Lock()
			delete(s.m, h)
			s.mu.Unlock()
		}
	case mirror.KindMember, mirror.KindAPIKey:
		c.invalidated(invalidated{kind: inv.Kind, id: inv.ID})
		// Rare events: a scan of the cache is cheaper than keeping reverse indexes up
		// to date on every check. The entries are not dropped but turned into what the
		// control plane answers now (a revoked key is unknown, a removed member
		// inactive), already expired: the next check asks again, and while the control
		// plane cannot answer the refusal stands (Lookup) rather than nothing being
		// known, which open mode admitted unidentified.
		for i := range c.shards {
			s := &c.shards[i]
			s.mu.Lock()
			for k, e := range s.m {
				switch {
				case inv.Kind == mirror.KindAPIKey && e.id.APIKeyID == inv.ID:
					s.m[k] = entry{kind: e.kind}
				case inv.Kind == mirror.KindMember && e.id.MemberID == inv.ID:
					e.id.Active = false
					s.m[k] = entry{id: e.id, kind: e.kind}
				}
			}
			s.mu.Unlock()
		}
	}
}

// Flush forgets everything.
func (c *Cache) Flush() {
	c.invalidated(invalidated{all: true})
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		clear(s.m)
		s.mu.Unlock()
	}
}

// Subscribed implements invalidation.Subscriber: a confirmed (re)subscription may
// have missed revocations, so everything is forgotten. A lost one changes nothing yet:
// entries keep their TTL rather than send every check to the control plane while
// Redis is away.
func (c *Cache) Subscribed(live bool) {
	if live {
		c.Flush()
	}
}
