package record

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"
	"google.golang.org/grpc"

	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
)

// Resolver is the part of the internal API this package calls.
type Resolver interface {
	Resolve(ctx context.Context, in *internalv1.ResolveRequest, opts ...grpc.CallOption) (*internalv1.ResolveResponse, error)
}

// Errors of Read: infrastructure, never "no such member".
var (
	ErrRedis        = errors.New("record: redis unavailable")
	ErrControlPlane = errors.New("record: control plane unavailable")
)

// Config tunes the reader. Zero fields take the defaults of DefaultConfig.
type Config struct {
	// GenerationPoll is how often the generation marker is read.
	GenerationPoll time.Duration
	// ResolveTimeout bounds one Resolve call.
	ResolveTimeout time.Duration
	// RedisTimeout bounds the Redis work of one Read (the generation when unknown, then
	// the record): past it Read fails with ErrRedis, so that a check answers as with
	// Redis down within a known time, whatever the client's own timeouts and retries
	// (TOLLGATE_REDIS_CHECK_TIMEOUT).
	RedisTimeout time.Duration
	// LastKnown bounds the per-member records kept for fail-open admission (at least 32,
	// one per shard).
	LastKnown int
	// PipelineWorkers and PipelineMax shape the read batching: concurrent checks' reads
	// are sent together, up to PipelineMax per round trip, with at most PipelineWorkers
	// round trips in flight. PipelineWorkers < 0 turns batching off.
	PipelineWorkers, PipelineMax int
}

// DefaultConfig: a flushed Redis is noticed within a second; until then a flushed
// record is simply missing, which resolves as well. A Resolve gets 500ms, as an
// identity's Authenticate does (identity.DefaultConfig says why).
var DefaultConfig = Config{GenerationPoll: time.Second, ResolveTimeout: 500 * time.Millisecond, RedisTimeout: 250 * time.Millisecond, LastKnown: 100_000,
	PipelineWorkers: 4, PipelineMax: 64}

// Reader reads member records.
type Reader struct {
	rdb    redis.UniversalClient
	layout mirror.Layout
	cp     Resolver
	cfg    Config
	m      *metrics.Metrics
	log    *slog.Logger
	flight singleflight.Group

	// gen is the generation last seen; nil until the first successful poll.
	gen atomic.Pointer[string]
	// watched is set once the watcher's first look (its generation poll and the masters'
	// check after it) is over (Watched).
	watched atomic.Bool
	// rebuilt is OnRebuild's function; sawGeneration is set once a poll found one.
	rebuilt       atomic.Pointer[func(postgresKept bool)]
	sawGeneration atomic.Bool
	nudge         chan struct{}
	// doubt is set while the mirror may serve records a dead master acknowledged but
	// never replicated (see masters.go): from a Redis error, or a replaced master seen
	// by the watcher, until the watcher finds the same masters again or the control
	// plane's rebuild under a new generation. Reads resolve meanwhile.
	doubt atomic.Bool
	// Watcher-only state: the masters' replication ids and the generation when they
	// were last noted, and whether INFO was refused (logged once).
	masters           mirror.Masters
	mastersGen        string
	mastersUnreadable bool
	// writesRefused: the last look found a master refusing writes (logged once a streak).
	writesRefused bool

	// reads feeds the pipelining workers while Run is running (batching on).
	reads    chan *readReq
	batching atomic.Bool
	// reading counts the Redis round trips of records in flight, a check's own and the
	// workers': a check that finds none makes its own (readRedis).
	reading atomic.Int32
	// batched counts the reads the workers served (tests).
	batched atomic.Int64
	// redisWaits is told each Read's Redis deadline (tests: ObserveRedisWaits).
	redisWaits atomic.Pointer[func(memberID string, deadline time.Time)]

	seed    maphash.Seed // of the shards
	sumSeed maphash.Seed // of known's sums
	shards  [32]lastShard
	// ownPrices shares one copy of each organization's price keys among its members'
	// records read from Redis.
	ownPrices sharedPriceKeys

	fromRedis, fromResolve, redisErrors, evictions interface{ Inc() }
	readTime                                       interface{ Observe(float64) }
}

// lastShard holds, per member, the last record read (for open failure mode) and what
// it was decoded from, so that an unchanged record is not decoded again.
type lastShard struct {
	mu sync.Mutex
	m  map[string]*known
	// max is the shard's share of Config.LastKnown: the shares add up to it exactly, so
	// no number of distinct members holds more.
	max int
}

// known is immutable once stored; a newer read replaces it whole.
type known struct {
	key string // the member's Redis key
	// generation, size and sum of the fields the record was decoded from, so that an
	// unchanged record is not decoded again; "" for a record from Resolve. A sum, not the
	// bytes: until 2026-12-04 every member's bytes were kept, 4 KB a member of an
	// organization with 100 prices of its own (BenchmarkLastKnownRecordBytes). The sum
	// is maphash's, 64 bits under a seed of this process (Reader.sumSeed): two different
	// records of one size pass for the same with a chance of 2^-64 a read, where
	// SHA-256 would take 0.6 - 1.5 us a read of a usual record on the check's path
	// (maphash 40 ns) and allocate a copy of it.
	generation string
	size       int
	sum        uint64
	rec        *mirror.Record
}

// sumOf is the sum known keeps of fields' bytes.
func (r *Reader) sumOf(f mirror.Fields) uint64 { return maphash.String(r.sumSeed, f.Blob) }

// unchanged tells whether f, read under generation gen, holds the record k was
// decoded from.
func (r *Reader) unchanged(k *known, f mirror.Fields, gen string) bool {
	return k != nil && k.generation != "" && k.generation == gen && f.Usable(gen) && k.size == len(f.Blob) && k.sum == r.sumOf(f)
}

// New returns a reader; call Watch to keep the generation current.
func New(rdb redis.UniversalClient, layout mirror.Layout, cp Resolver, cfg Config, m *metrics.Metrics, log *slog.Logger) *Reader {
	if cfg.GenerationPoll <= 0 {
		cfg.GenerationPoll = DefaultConfig.GenerationPoll
	}
	if cfg.ResolveTimeout <= 0 {
		cfg.ResolveTimeout = DefaultConfig.ResolveTimeout
	}
	if cfg.RedisTimeout <= 0 {
		cfg.RedisTimeout = DefaultConfig.RedisTimeout
	}
	if cfg.LastKnown <= 0 {
		cfg.LastKnown = DefaultConfig.LastKnown
	}
	cfg.LastKnown = max(cfg.LastKnown, 32) // one per shard
	if cfg.PipelineWorkers == 0 {
		cfg.PipelineWorkers = DefaultConfig.PipelineWorkers
	}
	if cfg.PipelineMax <= 0 {
		cfg.PipelineMax = DefaultConfig.PipelineMax
	}
	r := &Reader{rdb: rdb, layout: layout, cp: cp, cfg: cfg, m: m, log: log, nudge: make(chan struct{}, 1),
		reads: make(chan *readReq, 4096),
		seed:  maphash.MakeSeed(), sumSeed: maphash.MakeSeed(), fromRedis: m.RecordReads.WithLabelValues("redis"),
		fromResolve: m.RecordReads.WithLabelValues("resolve"), redisErrors: m.RedisErrors,
		readTime: m.RedisDuration.WithLabelValues("read_record"), evictions: m.MemberCacheEvictions.WithLabelValues("records")}
	for i := range r.shards {
		r.shards[i].m = map[string]*known{}
		r.shards[i].max = cfg.LastKnown / len(r.shards)
		if i < cfg.LastKnown%len(r.shards) {
			r.shards[i].max++
		}
	}
	m.SetMemberCacheLen("records", r.LastKnownLen)
	return r
}

// ObserveRedisWaits has f told, as each Read begins, the member and the deadline of the
// Read's Redis work (RedisTimeout from then, or the caller's deadline if sooner). Tests
// only (nil stops it): the bound a check's Redis wait was given is asserted on that
// deadline, which a loaded machine's scheduling cannot make late, not by timing the
// check, whose answer a descheduled process sends late whatever its deadline was.
func (r *Reader) ObserveRedisWaits(f func(memberID string, deadline time.Time)) {
	if f == nil {
		r.redisWaits.Store(nil)
		return
	}
	r.redisWaits.Store(&f)
}

// Record is a member's record and where it came from.
type Record struct {
	*mirror.Record
	// Authoritative: returned by Resolve, read from Postgres just now.
	Authoritative bool
}

// Read returns the member's record: from Redis when the mirror knows it under the
// current generation, else resolved through the control plane.
func (r *Reader) Read(ctx context.Context, orgID, memberID string) (Record, error) {
	// The Redis part has its own deadline; a Resolve below keeps the caller's ctx (and
	// its own ResolveTimeout).
	rctx, cancel := context.WithTimeout(ctx, r.cfg.RedisTimeout)
	defer cancel()
	if f := r.redisWaits.Load(); f != nil {
		dl, _ := rctx.Deadline()
		(*f)(memberID, dl)
	}
	gen := r.gen.Load()
	if gen == nil {
		// Not polled successfully yet (start-up, or Redis has been down since).
		g, err := r.pollGeneration(rctx)
		if err != nil {
			return Record{}, err
		}
		gen = &g
	}
	if *gen == "" {
		// Redis lost its data: every record there is unknown until the control plane
		// resyncs, so skip the pointless read.
		return r.Resolve(ctx, orgID, memberID)
	}
	// A read that begins in doubt is not used even if the doubt ends before it does: the
	// watcher may have ended it on seeing the rebuild begin (a new generation) while
	// this read, decoding under the old one, fetched a promoted replica's older record.
	doubted := r.doubt.Load()
	k := r.known(memberID)
	key := ""
	if k != nil {
		key = k.key
	} else {
		key = r.layout.MemberKey(memberID)
	}
	f, err := r.readRedis(rctx, key)
	// Redis answered, but a master may have been replaced with writes lost (masters.go):
	// the record may be older than it looks. Or the generation moved during the read,
	// and the record was decoded under the old one. Such a record is neither used nor
	// kept (it would be the last known record that open mode admits on).
	trusted := !doubted && !r.doubt.Load() && *r.gen.Load() == *gen
	var rec *mirror.Record
	if err == nil {
		if r.unchanged(k, f, *gen) {
			// Unchanged since the last read: same bytes, same record. Records are
			// never modified once decoded, so sharing it is safe.
			rec = k.rec
		} else if rec, err = f.Decode(*gen); err == nil {
			r.ownPrices.share(rec, r.cfg.LastKnown) // still this read's alone: no one else reads it yet
			if trusted {
				r.store(memberID, &known{key: key, generation: *gen, size: len(f.Blob), sum: r.sumOf(f), rec: rec})
			}
		}
	}
	switch {
	case err == nil && !trusted:
		// (A Redis that does not answer is still a Redis failure, below: the failure
		// mode decides.)
		return r.Resolve(ctx, orgID, memberID)
	case err == nil:
		r.fromRedis.Inc()
		return Record{Record: rec}, nil
	case errors.Is(err, mirror.ErrUnknown):
		// Perhaps the control plane just resynced under a new generation: look sooner.
		select {
		case r.nudge <- struct{}{}:
		default:
		}
		return r.Resolve(ctx, orgID, memberID)
	default:
		r.redisErrors.Inc()
		// Perhaps the master died: until the watcher knows, records are in doubt.
		if ctx.Err() == nil && !r.doubt.Swap(true) {
			select {
			case r.nudge <- struct{}{}:
			default:
			}
		}
		return Record{}, fmt.Errorf("%w: %v", ErrRedis, err)
	}
}

// Resolve asks the control plane for the member's record (which also refreshes Redis).
func (r *Reader) Resolve(ctx context.Context, orgID, memberID string) (Record, error) {
	// Shared by every concurrent check of this member; see identity.Cache.Lookup.
	ch := r.flight.DoChan(memberID, func() (any, error) {
		callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.ResolveTimeout)
		defer cancel()
		resp, err := r.cp.Resolve(callCtx, &internalv1.ResolveRequest{OrganizationId: orgID, MemberId: memberID})
		if err != nil {
			return nil, err
		}
		if resp.GetEntitlement().GetMemberId() == "" {
			return nil, errors.New("resolve answered without an entitlement")
		}
		return &mirror.Record{Version: resp.GetRecordVersion(), Entitlement: resp.GetEntitlement(),
			Spend: resp.GetSpend(), AsOfUnixMs: resp.GetAsOfUnixMs()}, nil
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			return Record{}, fmt.Errorf("%w: %v", ErrControlPlane, res.Err)
		}
		rec := res.Val.(*mirror.Record)
		r.fromResolve.Inc()
		r.remember(memberID, rec)
		return Record{Record: rec, Authoritative: true}, nil
	case <-ctx.Done():
		return Record{}, ctx.Err()
	}
}

// remember keeps a resolved record as the member's last known one.
func (r *Reader) remember(memberID string, rec *mirror.Record) {
	r.store(memberID, &known{key: r.layout.MemberKey(memberID), rec: rec})
}

// LastKnownLen is how many members' last records are kept now
// (tollgate_enforcer_member_cache_entries{cache="records"}).
func (r *Reader) LastKnownLen() int {
	n := 0
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}

// LastKnownCapacity is the most members whose last record is kept (Config.LastKnown,
// at least one per shard): the shards' shares add up to it.
func (r *Reader) LastKnownCapacity() int { return r.cfg.LastKnown }

func (r *Reader) shard(memberID string) *lastShard {
	return &r.shards[maphash.String(r.seed, memberID)%uint64(len(r.shards))]
}

func (r *Reader) store(memberID string, k *known) {
	s := r.shard(memberID)
	s.mu.Lock()
	if _, ok := s.m[memberID]; !ok && len(s.m) >= s.max {
		for m := range s.m {
			delete(s.m, m)
			r.evictions.Inc()
			break
		}
	}
	s.m[memberID] = k
	s.mu.Unlock()
}

func (r *Reader) known(memberID string) *known {
	s := r.shard(memberID)
	s.mu.Lock()
	k := s.m[memberID]
	s.mu.Unlock()
	return k
}

// LastKnown returns the last record read for a member, or nil. Only for deciding in
// open failure mode: it may be stale.
func (r *Reader) LastKnown(memberID string) *mirror.Record {
	if k := r.known(memberID); k != nil {
		return k.rec
	}
	return nil
}

// Generation returns the generation last seen ("" = lost) and whether one was seen.
func (r *Reader) Generation() (string, bool) {
	g := r.gen.Load()
	if g == nil {
		return "", false
	}
	return *g, true
}

func (r *Reader) pollGeneration(ctx context.Context) (string, error) {
	start := time.Now()
	g, err := r.layout.Generation(ctx, r.rdb)
	r.m.RedisDuration.WithLabelValues("generation").Observe(time.Since(start).Seconds())
	if err != nil {
		r.redisErrors.Inc()
		return "", fmt.Errorf("%w: %v", ErrRedis, err)
	}
	old := r.gen.Swap(&g)
	sawBefore := g != "" && r.sawGeneration.Swap(true)
	if g == "" && (old == nil || *old != "") {
		r.m.RedisGenerationLost.Inc()
		r.log.Warn("mirror generation missing: Redis lost its data or was never synced; resolving every record through the control plane until it resyncs")
	} else if old != nil && *old != g {
		r.log.Info("mirror generation changed", "generation", g)
		if f := r.rebuilt.Load(); f != nil && sawBefore {
			go func() {
				// The poll's own context ends with the poll: the note is read on its own
				// bound (rebuildNoteWait).
				noteCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rebuildNoteWait)
				defer cancel()
				(*f)(r.postgresKeptThrough(noteCtx, g))
			}()
		}
	}
	return g, nil
}

// rebuildNoteWait bounds how long the note of a rebuild (mirror.Layout.
// PostgresKeptThrough) is read again after a read that failed, before the rebuild is
// taken as doubt and the settlements of the window are sent again. A Redis master was
// just replaced when most rebuilds happen, and a first read can fail on its way to the
// new one (a cluster client's map of the slots not yet refreshed: CI's
// TestFailoverUnderLoad/cluster saw it, 2026-12-06); a read a moment later finds the
// note, and an enforcer does not send its whole window again (up to 100,000
// settlements) for a read that failed once.
const rebuildNoteWait = 3 * time.Second

// postgresKeptThrough reads the note of the rebuild under gen, again after a failed
// read (from 50 ms apart, doubling) until ctx ends: any doubt left is false, and the
// settlements are sent again.
func (r *Reader) postgresKeptThrough(ctx context.Context, gen string) bool {
	for wait := 50 * time.Millisecond; ; wait *= 2 {
		kept, err := r.layout.PostgresKeptThrough(ctx, r.rdb, gen)
		if err == nil {
			return kept
		}
		r.redisErrors.Inc()
		select {
		case <-ctx.Done():
			r.log.Warn("cannot read the note of the mirror's rebuild; the settlements of the window are sent again", "generation", gen, "err", err)
			return false
		case <-time.After(wait):
		}
	}
}

// OnRebuild has f called, in a goroutine of its own, each time the watcher sees the
// mirror rebuilt under a new generation after it had seen another (or none since,
// Redis having lost its data; not the first generation of a process that started
// while Redis had none, which has answered nothing to send again): the control plane does that when Redis lost its data, when a
// Redis master was replaced and when Postgres was replaced (a promoted replica, a
// restore), never on its own restarts. postgresKept is the control plane's note of the
// rebuild (mirror.Layout.PostgresKeptThrough): true when it was for Redis alone and
// Postgres was checked unchanged. Unless it is, the enforcer sends its recently
// answered settlements again (package settleq).
func (r *Reader) OnRebuild(f func(postgresKept bool)) { r.rebuilt.Store(&f) }

type readReq struct {
	key string
	// ctx is the caller's: a request whose caller gave up while it waited in the queue
	// is dropped, not read (behind a hung Redis the queue would otherwise hold up the
	// workers with reads nobody waits for).
	ctx  context.Context
	done chan readRes
}

type readRes struct {
	fields mirror.Fields
	err    error
}

// reqPool recycles read requests (with their channel) that were answered; one whose
// caller gave up is left to the garbage collector, since its answer may still come.
var reqPool = sync.Pool{New: func() any { return &readReq{done: make(chan readRes, 1)} }}

// readRedis reads one record in one round trip. With batching on, a check that finds
// no other read in flight makes its own round trip, as without batching: handing it to
// a worker and back would only add two goroutine switches, which on a busy machine
// showed in BenchmarkGateway's p99 (about 0.4 ms of the gateway's latency beyond its
// durable start, at 1,000 requests/s). Reads that overlap go to the pipelining
// workers, where one round trip serves many checks: under load that saves the system
// calls that dominate a cached check.
func (r *Reader) readRedis(ctx context.Context, key string) (mirror.Fields, error) {
	if batching := r.batching.Load(); !batching || r.reading.CompareAndSwap(0, 1) {
		start := time.Now()
		f, err := r.layout.ReadFields(ctx, r.rdb, key)
		r.readTime.Observe(time.Since(start).Seconds())
		if batching {
			r.reading.Add(-1)
		}
		return f, err
	}
	req := reqPool.Get().(*readReq)
	req.key, req.ctx = key, ctx
	select {
	case r.reads <- req:
	case <-ctx.Done():
		req.key, req.ctx = "", nil
		reqPool.Put(req)
		return mirror.Fields{}, ctx.Err()
	}
	select {
	case res := <-req.done:
		req.key, req.ctx = "", nil
		reqPool.Put(req)
		return res.fields, res.err
	case <-ctx.Done():
		return mirror.Fields{}, ctx.Err()
	}
}

// pipeline serves read requests: it takes one, then whatever else is already waiting
// (never waiting for more, so an idle enforcer adds no latency), and reads them all in
// one round trip.
func (r *Reader) pipeline(ctx context.Context) {
	// A read outlives any one check: it answers them all. The client's read timeout
	// bounds it.
	readCtx := context.WithoutCancel(ctx)
	batch := make([]*readReq, 0, r.cfg.PipelineMax)
	keys := make([]string, 0, r.cfg.PipelineMax)
	fields := make([]mirror.Fields, r.cfg.PipelineMax)
	errs := make([]error, r.cfg.PipelineMax)
	for {
		batch, keys = batch[:0], keys[:0]
		select {
		case <-ctx.Done():
			return
		case req := <-r.reads:
			batch = r.take(batch, req)
		}
	more:
		for len(batch) < r.cfg.PipelineMax {
			select {
			case req := <-r.reads:
				batch = r.take(batch, req)
			default:
				break more
			}
		}
		if len(batch) == 0 {
			continue
		}
		r.reading.Add(1)
		r.batched.Add(int64(len(batch)))
		start := time.Now()
		if len(batch) == 1 {
			f, err := r.layout.ReadFields(readCtx, r.rdb, batch[0].key)
			r.readTime.Observe(time.Since(start).Seconds())
			r.reading.Add(-1)
			batch[0].done <- readRes{f, err}
			continue
		}
		// The fields are read raw: each caller checks them against the generation it
		// read under, and decodes (or reuses its decoded record) itself.
		for _, q := range batch {
			keys = append(keys, q.key)
		}
		err := r.layout.ReadManyFields(readCtx, r.rdb, keys, fields[:len(keys)], errs[:len(keys)])
		r.readTime.Observe(time.Since(start).Seconds())
		r.reading.Add(-1)
		for i, q := range batch {
			if err != nil {
				q.done <- readRes{err: err}
			} else {
				q.done <- readRes{fields[i], errs[i]}
			}
			fields[i], errs[i] = mirror.Fields{}, nil
		}
	}
}

// take adds req to batch, unless its caller already gave up: then it is answered at
// once (nobody reads the answer; its channel is buffered) and not read.
func (r *Reader) take(batch []*readReq, req *readReq) []*readReq {
	if err := req.ctx.Err(); err != nil {
		req.done <- readRes{err: err}
		return batch
	}
	return append(batch, req)
}

// Run keeps the generation current and serves batched reads until ctx is done; then it
// answers the reads that raced the stop and returns nil.
func (r *Reader) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	if r.cfg.PipelineWorkers > 0 {
		for range r.cfg.PipelineWorkers {
			wg.Add(1)
			go func() { defer wg.Done(); r.pipeline(ctx) }()
		}
		r.batching.Store(true)
	}
	r.watch(ctx)
	r.batching.Store(false)
	wg.Wait()
	// Requests that raced the stop still get an answer.
	for {
		select {
		case q := <-r.reads:
			f, err := r.layout.ReadFields(context.Background(), r.rdb, q.key)
			q.done <- readRes{f, err}
		default:
			return nil
		}
	}
}

// Watched reports whether the watcher's first look at the generation marker (and at the
// masters) is over: its Redis commands are sent at start, beside the first checks', and
// the next only a GenerationPoll later.
func (r *Reader) Watched() bool { return r.watched.Load() }

// watch polls the generation marker until ctx is done, and sooner when a read found a
// record of another generation.
func (r *Reader) watch(ctx context.Context) {
	tick := time.NewTicker(r.cfg.GenerationPoll)
	defer tick.Stop()
	for {
		pollCtx, cancel := context.WithTimeout(ctx, r.cfg.GenerationPoll)
		if g, err := r.pollGeneration(pollCtx); err != nil && ctx.Err() == nil {
			r.log.Debug("generation poll failed", "error", err)
			// The master may be dying, even if no check read Redis meanwhile (a block
			// kept in memory answers them): doubt until the next look (masters.go).
			r.doubt.Store(true)
		} else if err == nil {
			r.watchMasters(pollCtx, g)
		}
		cancel()
		r.watched.Store(true)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-r.nudge:
			// Members without a record nudge on every check; poll at most every
			// 100ms for them.
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}
