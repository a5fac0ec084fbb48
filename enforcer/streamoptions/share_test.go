package streamoptions_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/enforcer/streamoptions"
	"github.com/tollgate-dev/tollgate/internal/testredis"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
)

// sharedClock is a clock the test moves while the shares' rounds read it.
type sharedClock struct{ ns atomic.Int64 }

func newSharedClock() *sharedClock {
	c := &sharedClock{}
	c.ns.Store(time.Date(2026, 12, 6, 18, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *sharedClock) now() time.Time            { return time.Unix(0, c.ns.Load()) }
func (c *sharedClock) add(d time.Duration)       { c.ns.Add(int64(d)) }
func (c *sharedClock) at(d time.Duration) string { return c.now().Add(d).Format(time.TimeOnly) }

// replica is one enforcer's two memories and their share.
type replica struct {
	gateway, extproc *streamoptions.Memory
	refusals, errors *prometheus.CounterVec
}

// startReplica starts an enforcer's share of its gateway's memory (an hour) and its
// ext_proc's (a day) on rdb, with a round every every.
func startReplica(t *testing.T, rdb redis.UniversalClient, key string, c *sharedClock, every time.Duration) *replica {
	r := &replica{
		gateway:  streamoptions.NewMemory(c.now, time.Hour),
		extproc:  streamoptions.NewMemory(c.now, 24*time.Hour),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "refusals"}, []string{"front", "from"}),
		errors:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "errors"}, []string{"op"}),
	}
	s := streamoptions.NewShare(streamoptions.ShareConfig{Redis: rdb, Key: key, Now: c.now, Every: every, Timeout: 500 * time.Millisecond,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Refusals: r.refusals, Errors: r.errors})
	s.Add("gateway", r.gateway)
	s.Add("extproc", r.extproc)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

func (r *replica) count(front, from string) float64 {
	return testutil.ToFloat64(r.refusals.WithLabelValues(front, from))
}

// eventually waits (up to 10 s) for cond, which the shares' rounds make true.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("never:", what)
		}
	}
}

// TestShareSpreadsRefusalsAcrossEnforcers: a refusal one front learns is its other
// front's at once, and another enforcer's by its next round, until the end its learner
// gave it (the gateway's hour, ext_proc's day); an enforcer that starts later has the
// current ones from its first round.
func TestShareSpreadsRefusalsAcrossEnforcers(t *testing.T) {
	rdb, layout := testredis.New(t)
	key := layout.StreamOptionsRefusalsKey()
	c := newSharedClock()
	a := startReplica(t, rdb, key, c, 20*time.Millisecond)
	b := startReplica(t, rdb, key, c, 20*time.Millisecond)

	if !a.gateway.Learn("api.example.com", "m1") {
		t.Fatal("the gateway did not learn the refusal")
	}
	if !a.extproc.Refuses("api.example.com", "m1") {
		t.Error("the refusal the gateway learned is not its ext_proc's at once")
	}
	if a.count("gateway", "upstream") != 1 || a.count("extproc", "shared") != 1 {
		t.Errorf("counted gateway/upstream %v, extproc/shared %v; want 1 and 1", a.count("gateway", "upstream"), a.count("extproc", "shared"))
	}
	eventually(t, "another enforcer has the refusal", func() bool {
		return b.gateway.Refuses("api.example.com", "m1") && b.extproc.Refuses("api.example.com", "m1")
	})
	if b.gateway.Refuses("api.example.com", "m2") || b.gateway.Refuses("other.example.com", "m1") {
		t.Error("another model's, or another upstream's, streams go unasked")
	}
	if b.count("gateway", "shared") != 1 || b.count("extproc", "shared") != 1 || b.count("gateway", "upstream") != 0 {
		t.Errorf("the other enforcer counted gateway/shared %v, extproc/shared %v, gateway/upstream %v; want 1, 1, 0",
			b.count("gateway", "shared"), b.count("extproc", "shared"), b.count("gateway", "upstream"))
	}

	// ext_proc learns another model for a day: the other enforcer's gateway takes that day.
	if !b.extproc.Learn("api.example.com", "m2") {
		t.Fatal("ext_proc did not learn the refusal")
	}
	eventually(t, "the first enforcer has ext_proc's refusal", func() bool { return a.gateway.Refuses("api.example.com", "m2") })

	// The key deleted (an operator forgetting the refusals, docs/enforcer.md): no round
	// writes back what its enforcer was given or learned before.
	if err := rdb.Del(context.Background(), key).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // rounds of both
	if n, err := rdb.Exists(context.Background(), key).Result(); err != nil || n != 0 {
		t.Fatalf("the deleted key was written back (%d, %v)", n, err)
	}
	if !a.extproc.Learn("api.example.com", "m2") {
		t.Fatal("ext_proc did not learn the refusal again")
	}

	c.add(time.Hour - time.Second)
	time.Sleep(60 * time.Millisecond) // rounds at the new time: they must not renew the hour
	if !b.extproc.Refuses("api.example.com", "m1") {
		t.Errorf("at %s the gateway's refusal is forgotten before its hour", c.at(0))
	}
	c.add(time.Second)
	time.Sleep(60 * time.Millisecond)
	if a.extproc.Refuses("api.example.com", "m1") || b.gateway.Refuses("api.example.com", "m1") || b.extproc.Refuses("api.example.com", "m1") {
		t.Error("the gateway's refusal is remembered past the hour it gave it, by the fronts it was shared with")
	}

	// An enforcer started now has the refusal still current from its first round (its
	// next is an hour away).
	late := startReplica(t, rdb, key, c, time.Hour)
	eventually(t, "an enforcer started later has the current refusal", func() bool { return late.gateway.Refuses("api.example.com", "m2") })
	if late.gateway.Refuses("api.example.com", "m1") {
		t.Error("an enforcer started later took an ended refusal")
	}
	c.add(23*time.Hour - time.Second)
	if !late.gateway.Refuses("api.example.com", "m2") || !a.gateway.Refuses("api.example.com", "m2") {
		t.Errorf("at %s ext_proc's refusal is forgotten before its day", c.at(0))
	}
	c.add(time.Second)
	if late.gateway.Refuses("api.example.com", "m2") || a.gateway.Refuses("api.example.com", "m2") {
		t.Error("ext_proc's refusal is remembered past its day")
	}
}

// TestShareKeepsWhatRedisDidNotTake: with Redis out of reach each front goes on with what
// it learned, the failed rounds are counted, and the refusals learned meanwhile are
// written once Redis is back.
func TestShareKeepsWhatRedisDidNotTake(t *testing.T) {
	rdb, layout := testredis.New(t)
	key := layout.StreamOptionsRefusalsKey()
	opts, err := redis.ParseURL(testredis.URL())
	if err != nil {
		t.Fatal(err)
	}
	proxy := testredis.NewProxy(t, opts.Addr)
	opts.Addr = proxy.Addr()
	opts.MaxRetries = -1
	opts.DialTimeout = 200 * time.Millisecond
	viaProxy := redis.NewClient(opts)
	t.Cleanup(func() { viaProxy.Close() })
	c := newSharedClock()

	proxy.Down()
	a := startReplica(t, viaProxy, key, c, 20*time.Millisecond)
	a.gateway.Learn("api.example.com", "m1")
	if !a.gateway.Refuses("api.example.com", "m1") || !a.extproc.Refuses("api.example.com", "m1") {
		t.Fatal("without Redis the fronts do not hold the refusal learned")
	}
	eventually(t, "a failed write is counted", func() bool { return testutil.ToFloat64(a.errors.WithLabelValues("write")) >= 1 })

	proxy.Up(t)
	eventually(t, "the refusal learned without Redis is written once it is back", func() bool {
		v, err := rdb.Get(context.Background(), key).Result()
		return err == nil && strings.Contains(v, `"m1"`)
	})
	b := startReplica(t, rdb, key, c, time.Hour)
	eventually(t, "another enforcer has it", func() bool { return b.extproc.Refuses("api.example.com", "m1") })
}

// TestShareReadsOnlyRefusals: a key holding something else (written by hand, or by
// another version) is not taken for refusals, nor an entry of another shape; an end
// further than a day ahead is a day; the next refusal learned replaces what is not JSON.
func TestShareReadsOnlyRefusals(t *testing.T) {
	rdb, layout := testredis.New(t)
	key := layout.StreamOptionsRefusalsKey()
	c := newSharedClock()
	ctx := context.Background()
	ms := func(d time.Duration) int64 { return c.now().Add(d).UnixMilli() }
	entries := []any{
		[]any{"h", "current", ms(time.Hour)},
		[]any{"h"},
		5,
		[]any{"h", "", ms(time.Hour)},
		[]any{"h", "until in words", "tomorrow"},
		[]any{"h", "ended", ms(-time.Minute)},
		[]any{"h", "ten days", ms(240 * time.Hour)},
		map[string]any{"upstream": "h", "model": "an object"},
	}
	v, _ := json.Marshal(entries)
	if err := rdb.Set(ctx, key, v, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	r := startReplica(t, rdb, key, c, 20*time.Millisecond)
	eventually(t, "the current refusal is taken", func() bool { return r.gateway.Refuses("h", "current") })
	for _, model := range []string{"", "until in words", "ended", "an object"} {
		if r.gateway.Refuses("h", model) {
			t.Errorf("%q was taken for a refusal", model)
		}
	}
	eventually(t, "an end ten days ahead is taken", func() bool { return r.extproc.Refuses("h", "ten days") })
	c.add(24 * time.Hour)
	if r.extproc.Refuses("h", "ten days") {
		t.Error("a refusal the key said lasts ten days is remembered past a day")
	}

	if err := rdb.Set(ctx, key, "not json", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	r.gateway.Learn("h", "learned")
	eventually(t, "the next refusal learned replaces what is not JSON", func() bool {
		v, err := rdb.Get(ctx, key).Result()
		var got [][]any
		return err == nil && json.Unmarshal([]byte(v), &got) == nil && len(got) == 1 && fmt.Sprint(got[0][:2]) == "[h learned]"
	})
}

// TestShareOnACluster: on Redis Cluster the shared refusals are one key, so the script
// runs on its shard; two enforcers share a refusal there as on one server.
func TestShareOnACluster(t *testing.T) {
	c := testredis.StartCluster(t)
	key := mirror.Layout{Prefix: testredis.Prefix()}.StreamOptionsRefusalsKey()
	clock := newSharedClock()
	a := startReplica(t, c.Client(t), key, clock, 20*time.Millisecond)
	b := startReplica(t, c.Client(t), key, clock, 20*time.Millisecond)
	a.extproc.Learn("api.example.com", "m1")
	eventually(t, "the other enforcer has the refusal", func() bool { return b.gateway.Refuses("api.example.com", "m1") })
	if n := testutil.ToFloat64(a.errors.WithLabelValues("write")) + testutil.ToFloat64(b.errors.WithLabelValues("read")); n != 0 {
		t.Errorf("%v rounds failed on the cluster", n)
	}
}
