package redisconf_test

import (
	"context"
	"testing"
	"time"

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
	testredis.WaitReplicated(t, old, "{m}:k", "1")
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
