package redisconf_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/internal/testredis"
)

// TestClusterClientFollowsAFailover: once a killed master's replica serves its slots,
// the programs' cluster client reaches the key again within a few seconds. go-redis
// alone keeps dialing the dead node until its periodic slot reload (60s by default):
// a dial error is not a MOVED, so nothing told it the slot moved.
func TestClusterClientFollowsAFailover(t *testing.T) {
	t.Parallel()
	c := testredis.StartCluster(t)
	rdb := c.Client(t)
	ctx := context.Background()
	if err := rdb.Set(ctx, "{m}:k", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	old := c.MasterFor(t, "{m}:k")
	direct := redis.NewClient(&redis.Options{Addr: old.Addr})
	// WAIT counts the writes of its own connection: write again on it, then wait
	// until the replica has that (and so everything before it).
	if err := direct.Set(ctx, "{m}:k", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	n, err := direct.Wait(ctx, 1, time.Second).Result()
	direct.Close()
	if err != nil || n != 1 {
		t.Fatalf("WAIT: %d %v", n, err)
	}
	old.Stop()
	c.WaitHealthy(t, 30*time.Second)
	promoted := time.Now()
	for {
		v, err := rdb.Get(ctx, "{m}:k").Result()
		if err == nil && v == "1" {
			break
		}
		if time.Since(promoted) > 5*time.Second {
			t.Fatalf("5s after the replica took over, the client still fails: %q %v", v, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("the client reached the promoted replica %s after the cluster was healthy", time.Since(promoted).Round(time.Millisecond))
}
