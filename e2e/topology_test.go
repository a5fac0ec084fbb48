package e2e_test

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	cpapp "github.com/tollgate-dev/tollgate/controlplane/app"
	"github.com/tollgate-dev/tollgate/internal/testio"
	"github.com/tollgate-dev/tollgate/internal/testredis"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// topology is a Redis Cluster or Sentinel group of a test's own, as the programs are
// configured for it (TOLLGATE_REDIS_MODE, _ADDRS, _SENTINEL_MASTER) and as the test
// reaches it. Stacks started on one topology share it under key prefixes of their own.
type topology struct {
	name     string
	env      map[string]string
	rdb      redis.UniversalClient
	cluster  *testredis.Cluster  // set for a cluster
	sentinel *testredis.Sentinel // set for a sentinel group
	// prefix is the stack's key prefix when set (an ACL user's key pattern names it
	// before the stack starts); else the stack takes a fresh one.
	prefix string
}

func clusterTopology(t testing.TB) *topology {
	c := testredis.StartCluster(t)
	return &topology{name: "cluster", cluster: c, rdb: c.Client(t), env: map[string]string{
		"TOLLGATE_REDIS_URL": "redis://127.0.0.1:6379/0", "TOLLGATE_REDIS_MODE": "cluster",
		"TOLLGATE_REDIS_ADDRS": strings.Join(c.Addrs(), ",")}}
}

func sentinelTopology(t testing.TB) *topology {
	s := testredis.StartSentinel(t)
	return &topology{name: "sentinel", sentinel: s, rdb: s.Client(t), env: map[string]string{
		"TOLLGATE_REDIS_URL": "redis://127.0.0.1:6379/0", "TOLLGATE_REDIS_MODE": "sentinel",
		"TOLLGATE_REDIS_ADDRS": strings.Join(s.Addrs(), ","), "TOLLGATE_REDIS_SENTINEL_MASTER": s.MasterName}}
}

// onEachTopology runs test in parallel on a Redis Cluster and on a Sentinel group, each
// of its own.
func onEachTopology(t *testing.T, test func(t *testing.T, topo *topology)) {
	t.Helper()
	for _, tc := range []struct {
		name  string
		start func(testing.TB) *topology
	}{{"cluster", clusterTopology}, {"sentinel", sentinelTopology}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			test(t, tc.start(t))
		})
	}
}

// masterOf is the data node holding key now.
func (tp *topology) masterOf(t testing.TB, key string) *testredis.Server {
	if tp.cluster != nil {
		return tp.cluster.MasterFor(t, key)
	}
	return tp.sentinel.Master(t)
}

// dropKeys deletes every key of the stack's prefix, on every master of a cluster (a
// SCAN through a cluster client sees one node only), and returns how many it deleted.
// The keys are all found first and then deleted at once: one DEL on a single Redis (a
// FLUSHDB is one instant too), a pipeline per master of a cluster (a node refuses one
// DEL across slots). Deleting each key as the SCAN found it, through the shared Redis
// of a busy machine, took seconds, and a control plane that saw the generation gone
// meanwhile rebuilt and wrote its note, which the SCAN then found and deleted: the
// enforcer read no note and sent its settlements again (CI, 2026-12-07).
func (s *stack) dropKeys(t testing.TB) int {
	t.Helper()
	ctx := context.Background()
	var mu sync.Mutex
	n := 0
	drop := func(ctx context.Context, c *redis.Client, oneCommand bool) error {
		var keys []string
		iter := c.Scan(ctx, 0, s.layout.Prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil || len(keys) == 0 {
			return err
		}
		if oneCommand {
			if err := c.Del(ctx, keys...).Err(); err != nil {
				return err
			}
		} else {
			if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, k := range keys {
					p.Del(ctx, k)
				}
				return nil
			}); err != nil {
				return err
			}
		}
		mu.Lock()
		n += len(keys)
		mu.Unlock()
		return nil
	}
	var err error
	switch c := s.rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return drop(ctx, c, false) })
	case *redis.Client:
		err = drop(ctx, c, true)
	default:
		t.Fatalf("unexpected client %T", s.rdb)
	}
	if err != nil {
		t.Fatalf("drop the prefix's keys: %v", err)
	}
	return n
}

// resync runs `controlplane resync` against the stack's database and Redis, as an
// operator would from another machine.
func (s *stack) resync(t testing.TB) {
	t.Helper()
	var logs testio.SyncBuffer
	err := cpapp.Run(context.Background(), []string{"resync"}, envOf(s.cpVars), cpapp.IO{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: &logs})
	if err != nil {
		t.Fatalf("controlplane resync: %v\n%s", err, logs.String())
	}
}

// TestRedisTopologies runs the core end-to-end cases against a real Redis Cluster
// (three masters, three replicas) and a real Sentinel group (master, replica, three
// sentinels): admitted, settled, blocked and extended (the day-limit scenario), a
// flushed mirror (one record, then everything, generation included), and a resync run
// by an operator while a member is blocked.
func TestRedisTopologies(t *testing.T) {
	t.Parallel()
	awayFromDayBoundary(t, 2*time.Minute)
	onEachTopology(t, func(t *testing.T, topo *topology) {
		t.Run("day limit blocks and extension admits", func(t *testing.T) {
			t.Parallel()
			dayLimitBlocksAndExtensionAdmits(t, startStackOn(t, topo))
		})
		t.Run("flushed mirror never admits on an invented zero", func(t *testing.T) {
			t.Parallel()
			flushedMirrorNeverAdmitsOnInventedZero(t, startStackOn(t, topo))
		})
		t.Run("resync keeps the block", func(t *testing.T) {
			t.Parallel()
			resyncKeepsTheBlock(t, startStackOn(t, topo))
		})
	})
}

// resyncKeepsTheBlock: a blocked member stays blocked, with the real spend, across an
// operator's resync (a new generation, every record rewritten); afterwards the enforcer
// reads the rewritten record from Redis again.
func resyncKeepsTheBlock(t *testing.T, s *stack) {
	o := s.setUpOrg(t)
	ctx := context.Background()
	day := window.Of(window.Day, time.Now())
	reqID := admitted(t, s.check(t, o.key), "within_limit")
	s.respond(t, reqID, "application/json", testio.Chunks(openAIJSON("chatcmpl-resync", 8_000_000, 0, 0), 2))
	const used = 1_200_000
	s.waitSettled(t, o, 1, used)
	st := s.expectStatus(t, o, "blocked", expected{state: "blocked", used: used, pending: 0, lastSettled: reqID, canRequestReset: true})
	gen0, err := s.layout.Generation(ctx, s.rdb)
	if err != nil || gen0 == "" {
		t.Fatalf("generation %q: %v", gen0, err)
	}
	s.resync(t)
	gen1, err := s.layout.Generation(ctx, s.rdb)
	if err != nil || gen1 == "" || gen1 == gen0 {
		t.Fatalf("generation after resync %q (before %q): %v", gen1, gen0, err)
	}
	rec, err := s.layout.Read(ctx, s.rdb, o.member.memberID, gen1)
	if err != nil {
		t.Fatalf("record after resync: %v", err)
	}
	if spend, ok := mirror.SpendOf(rec, "day", day.Start); !ok || spend != used {
		t.Fatalf("record after resync: day spend %d (%v), want %d", spend, ok, used)
	}
	// Every record in Redis is of the new generation now, so a check answered from a
	// Redis read means the enforcer adopted it.
	waitFor(t, 10*time.Second, "the enforcer to read the resynced record from Redis", func() bool {
		before := s.metric(t, "tollgate_enforcer_record_reads_total", `source="redis"`)
		blocked(t, s.check(t, o.key)).agreesWith(t, st)
		return s.metric(t, "tollgate_enforcer_record_reads_total", `source="redis"`) > before
	})
	if got := s.metric(t, "tollgate_enforcer_decisions_total", `decision="admitted"`); got != 1 {
		t.Fatalf("%v admissions, want only the first request's", got)
	}
}
