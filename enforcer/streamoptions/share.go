package streamoptions

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/pkg/logging"
)

// Share spreads the refusals each enforcer learns to every other one, and to its own
// other front, through one key in Redis (mirror.Layout.StreamOptionsRefusalsKey):
// without it each replica, and each replica again after a restart, met every refusal
// itself. Behind Envoy that is a
// client's failed stream per replica, model and day; through the gateway an extra round
// trip an hour.
//
// A refusal a memory learns is given at once to the other memories of this process, and
// written by the next round, which a learned refusal starts at once; every round also
// reads what the other enforcers wrote. Each refusal keeps the end its learner gave it
// (an hour from the gateway, a day from ext_proc). Rounds run every ShareConfig.Every (10
// seconds), so another replica knows a refusal within that of its being learned, and a
// starting one at its first round.
//
// Redis failing costs only the sharing: each memory goes on with what it learned and
// was given, the refusals not yet written are kept (up to MostShared) for the next round,
// and each failed round is counted and logged (throttled). The key holds at most
// MostShared refusals, those that last longest, and ends with the last of them. Its
// value is a JSON array read and written with GET, SET and DEL (in a script), so that
// the documented ACL user needs nothing more.
type Share struct {
	cfg      ShareConfig
	memories []front
	// mu guards pending: the refusals learned here and not yet written.
	mu      sync.Mutex
	pending []Refusal
	// wake starts a round when a refusal is learned.
	wake      chan struct{}
	failures  logging.Throttle
	corrupted logging.Throttle
}

type front struct {
	name string
	m    *Memory
}

// ShareConfig is what a Share needs.
type ShareConfig struct {
	Redis redis.UniversalClient
	// Key is the shared refusals' key (mirror.Layout.StreamOptionsRefusalsKey).
	Key string
	Now func() time.Time
	// Every is the time between rounds (0: 10 seconds); Timeout bounds a round's call
	// to Redis (0: 2 seconds).
	Every, Timeout time.Duration
	Log            *slog.Logger // nil: nothing logged
	// Refusals counts the refusals each memory takes, by front (the name given to Add)
	// and from: upstream (it learned it from its upstream's answer) or shared (another
	// front or another enforcer did). Errors counts failed rounds by op: write (the
	// refusals learned here were kept for the next round), read. Either may be nil.
	Refusals, Errors *prometheus.CounterVec
}

// LongestShared is the longest a shared refusal is taken for (ext_proc's day), whatever
// end the key gives it: a value written by hand, or by a clock far ahead, does not leave
// streams unasked for longer.
const LongestShared = 24 * time.Hour

// MostShared is how many refusals the shared key holds at most.
const MostShared = 512

// NewShare returns a Share of the memories given to Add; nothing is read or written
// until Run.
func NewShare(cfg ShareConfig) *Share {
	if cfg.Every <= 0 {
		cfg.Every = 10 * time.Second
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Share{cfg: cfg, wake: make(chan struct{}, 1)}
}

// Add shares m, one front's memory (gateway, extproc), under name: what it learns is
// given to the others and written, and what the others learn is given to it. Call it
// before Run and before m is used.
func (s *Share) Add(name string, m *Memory) {
	s.memories = append(s.memories, front{name, m})
	m.OnLearn(func(r Refusal) { s.learned(name, r) })
}

// learned is told each refusal one front's memory learns.
func (s *Share) learned(name string, r Refusal) {
	s.count(name, "upstream")
	for _, f := range s.memories {
		if f.name != name && f.m.Remember(r) {
			s.count(f.name, "shared")
		}
	}
	s.mu.Lock()
	if len(s.pending) < MostShared {
		s.pending = append(s.pending, r)
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default: // a round is already due
	}
}

// Run shares until ctx ends: a round at once, then every Every, and when a refusal is
// learned. It returns nil then.
func (s *Share) Run(ctx context.Context) error {
	tick := time.NewTicker(s.cfg.Every)
	defer tick.Stop()
	for {
		s.round(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-s.wake:
		}
	}
}

// round writes the refusals learned here since the last round, when there are any, and
// gives every memory those shared.
func (s *Share) round(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	s.mu.Lock()
	learned := s.pending
	s.pending = nil
	s.mu.Unlock()
	now := s.cfg.Now()
	var shared string
	var err error
	op := "read"
	if len(learned) > 0 {
		op = "write"
		shared, err = shareScript.Run(ctx, s.cfg.Redis, []string{s.cfg.Key}, shareArgs(now, learned)...).Text()
	} else if shared, err = s.cfg.Redis.Get(ctx, s.cfg.Key).Result(); errors.Is(err, redis.Nil) {
		return // nothing shared
	}
	if err != nil {
		if !errors.Is(ctx.Err(), context.Canceled) { // not the enforcer stopping
			if s.cfg.Errors != nil {
				s.cfg.Errors.WithLabelValues(op).Inc()
			}
			s.failures.Log(s.cfg.Log, slog.LevelWarn, "stream_options refusals: Redis did not answer; each front goes on with the refusals it holds", "op", op, "error", err)
		}
		s.keep(learned)
		return
	}
	rs, err := parseShared(shared)
	if err != nil {
		s.corrupted.Log(s.cfg.Log, slog.LevelWarn, "stream_options refusals: the shared key holds no refusals JSON; it is replaced by the next refusal learned", "key", s.cfg.Key, "error", err)
		return
	}
	longest := now.Add(LongestShared)
	for _, r := range rs {
		// No refusal is kept longer than any front learns one for, whatever the key says.
		if r.Until.After(longest) {
			r.Until = longest
		}
		taken := false
		for _, f := range s.memories {
			if f.m.Remember(r) {
				s.count(f.name, "shared")
				taken = true
			}
		}
		if taken {
			s.cfg.Log.Info("stream_options refusals: another enforcer's upstream refused stream_options.include_usage; this one's streams of that model go as their clients wrote them, charged an estimate",
				"host", r.Upstream, "model", r.Model, "until", r.Until.UTC().Format(time.RFC3339))
		}
	}
}

// keep puts refusals a round could not write back in front of those learned since.
func (s *Share) keep(learned []Refusal) {
	if len(learned) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending = append(learned, s.pending...)
	if len(s.pending) > MostShared {
		s.pending = s.pending[:MostShared]
	}
}

func (s *Share) count(name, from string) {
	if s.cfg.Refusals != nil {
		s.cfg.Refusals.WithLabelValues(name, from).Inc()
	}
}

//go:embed share.lua
var shareSource string

var shareScript = redis.NewScript(shareSource)

func shareArgs(now time.Time, learned []Refusal) []any {
	args := make([]any, 0, 2+3*len(learned))
	args = append(args, now.UnixMilli(), MostShared)
	for _, r := range learned {
		args = append(args, r.Upstream, r.Model, r.Until.UnixMilli())
	}
	return args
}

// parseShared reads the key's value: a JSON array of [upstream, model, until in Unix
// ms]. Entries of another shape are skipped.
func parseShared(v string) ([]Refusal, error) {
	var raw []json.RawMessage
	if err := json.Unmarshal([]byte(v), &raw); err != nil {
		return nil, err
	}
	rs := make([]Refusal, 0, len(raw))
	for _, e := range raw {
		var t []json.RawMessage
		var r Refusal
		var until json.Number
		if json.Unmarshal(e, &t) != nil || len(t) != 3 || json.Unmarshal(t[0], &r.Upstream) != nil ||
			json.Unmarshal(t[1], &r.Model) != nil || json.Unmarshal(t[2], &until) != nil {
			continue
		}
		ms, err := until.Float64()
		if err != nil || r.Upstream == "" || r.Model == "" {
			continue
		}
		r.Until = time.UnixMilli(int64(ms))
		rs = append(rs, r)
	}
	return rs, nil
}
