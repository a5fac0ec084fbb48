package testredis_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/internal/testredis"
)

// TestTopologies: the helpers build what they promise. A cluster spreads keys of
// different hash tags over three masters and keeps serving after one is killed; a
// sentinel group promotes the replica when the master is killed, and the failover
// client follows it.
func TestTopologies(t *testing.T) {
	t.Parallel()
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		c := testredis.StartCluster(t)
		rdb := c.Client(t)
		ctx := context.Background()
		masters := map[string]bool{}
		for _, k := range []string{"{a}:x", "{b}:x", "{c}:x", "{d}:x", "{e}:x", "{f}:x"} {
			if err := rdb.Set(ctx, k, "1", 0).Err(); err != nil {
				t.Fatal(err)
			}
			masters[c.MasterFor(t, k).Addr] = true
		}
		if len(masters) < 2 {
			t.Fatalf("six hash tags all on %v", masters)
		}
		m := c.MasterFor(t, "{a}:x")
		testredis.WaitReplicated(t, m, "{a}:x", "1")
		m.Stop()
		c.WaitHealthy(t, 30*time.Second)
		if now := c.MasterFor(t, "{a}:x"); now == m {
			t.Fatal("the killed master still serves the slot")
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			v, err := rdb.Get(ctx, "{a}:x").Result()
			if err == nil && v == "1" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after the failover: %q %v", v, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	t.Run("sentinel", func(t *testing.T) {
		t.Parallel()
		s := testredis.StartSentinel(t)
		rdb := s.Client(t)
		ctx := context.Background()
		if err := rdb.Set(ctx, "k", "1", 0).Err(); err != nil {
			t.Fatal(err)
		}
		testredis.WaitReplicated(t, s.Master(t), "k", "1")
		m := s.Master(t)
		m.Stop()
		deadline := time.Now().Add(20 * time.Second)
		for {
			v, err := rdb.Get(ctx, "k").Result()
			if err == nil && v == "1" && s.Master(t) != m {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after the failover: %q %v", v, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

// TestCutReplicaIsPromotedLongAfterTheCut: a replica cut off by CutReplica lacks the
// writes its master acknowledged after the cut, and is still promoted when the master is
// killed long after the cut, as on a loaded machine a test's steps between the two can
// take: longer than ten times a sentinel group's down-after-milliseconds (5 s), and than
// a cluster's default validity (ten node timeouts plus the 10 s ping period). Without
// that, the sentinels and the cluster passed over the replica and never promoted it.
func TestCutReplicaIsPromotedLongAfterTheCut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// killLater writes a key on master after the cut, lets time pass, kills master and
	// waits until promoted() names the cut replica; the key must be missing there.
	killLater := func(t *testing.T, master, replica *testredis.Server, key string, after time.Duration, promoted func() *testredis.Server) {
		direct := redis.NewClient(&redis.Options{Addr: master.Addr})
		err := direct.Set(ctx, key, "acknowledged", 0).Err()
		direct.Close()
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(after) // the test's steps between the cut and the kill
		master.Stop()
		deadline := time.Now().Add(60 * time.Second)
		for promoted() != replica {
			if time.Now().After(deadline) {
				t.Fatalf("the cut replica was not promoted within 60s of the kill (%s after the cut)", after)
			}
			time.Sleep(50 * time.Millisecond)
		}
		rdb := redis.NewClient(&redis.Options{Addr: replica.Addr})
		defer rdb.Close()
		if v, err := rdb.Get(ctx, key).Result(); err != redis.Nil {
			t.Fatalf("the promoted replica has the write made after the cut: %q %v", v, err)
		}
	}
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		c := testredis.StartCluster(t)
		m := c.MasterFor(t, "{a}:x")
		r := testredis.ReplicaOf(t, c.Nodes, m)
		testredis.CutReplica(t, r)
		killLater(t, m, r, "{a}:x", 21*time.Second, func() *testredis.Server { return c.MasterFor(t, "{a}:x") })
	})
	t.Run("sentinel", func(t *testing.T) {
		t.Parallel()
		s := testredis.StartSentinel(t)
		m := s.Master(t)
		r := testredis.ReplicaOf(t, s.Data, m)
		s.CutReplica(t, r)
		killLater(t, m, r, "k", 6*time.Second, func() *testredis.Server { return s.Master(t) })
	})
}
