package mirror

import (
	"context"
	"errors"
	"maps"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Redis replicates asynchronously: a master may acknowledge a record write and die
// before its replica has it. The promoted replica then serves an older record (less
// spend than Postgres holds), which a reader cannot tell from a current one. Both
// programs therefore watch the replication ids of the masters serving the mirror
// (INFO replication, master_replid): a promoted replica takes a new id, and so does a
// master restarted without its data. When an id seen before is gone, what that master
// acknowledged last cannot be trusted: the control plane rebuilds the mirror under a
// new generation, and an enforcer resolves through the control plane until it sees
// that new generation.

// Masters are the replication ids of the masters serving the mirror.
type Masters map[string]bool

// ReadMasters returns the replication ids of the masters serving rdb now: one for a
// single server or a Sentinel group, one per shard of a cluster.
func ReadMasters(ctx context.Context, rdb redis.UniversalClient) (Masters, error) {
	ids := Masters{}
	var mu sync.Mutex
	read := func(ctx context.Context, c redis.Cmdable) error {
		info, err := c.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "master_replid:"); ok && v != "" {
				mu.Lock()
				ids[v] = true
				mu.Unlock()
				return nil
			}
		}
		return errors.New("mirror: INFO replication without master_replid")
	}
	var err error
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return read(ctx, c) })
	} else {
		err = read(ctx, rdb)
	}
	if err != nil {
		return nil, err
	}
	return ids, nil
}

// Refused reports whether err (of ReadMasters) is Redis refusing INFO for good: the
// command is unknown (some managed services rename it) or not permitted (an ACL). Any
// other error is about now, and the caller looks again: a node that cannot be reached,
// and also error replies that pass (MAXCLIENTS in a reconnection storm after a
// failover, BUSY while a script runs, LOADING, an authentication that fails for a
// while). Taking one of those for a refusal would end an enforcer's doubt while a
// replica without the last writes is promoted (masters.go in enforcer/record).
func Refused(err error) bool {
	return redis.HasErrorPrefix(err, "unknown command") || redis.IsPermissionError(err)
}

// Replaced reports whether a master of m (the ids seen before) is gone from now. A new
// shard, or a replica that came back, is not a replacement.
func (m Masters) Replaced(now Masters) bool {
	for id := range m {
		if !now[id] {
			return true
		}
	}
	return false
}

// Clone copies m.
func (m Masters) Clone() Masters { return maps.Clone(m) }
