package mirror

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"slices"
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
		return errNoReplID
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

// errNoReplID: INFO replication answered without master_replid, which Redis (4.0 and
// later) always reports: a Redis-compatible server or proxy that never will.
var errNoReplID = errors.New("mirror: INFO replication without master_replid")

// Refused reports whether err (of ReadMasters) is Redis refusing INFO for good: the
// command is unknown (some managed services rename it), not permitted (an ACL), or
// answered without the replication id (errNoReplID; until 2026-12-07 taken for a failure
// of now: every enforcer doubted for good, resolving every check through the control
// plane, and every maintenance round of the control plane ended before its repairs). Any
// other error is about now, and the caller looks again: a node that cannot be reached,
// and also error replies that pass (MAXCLIENTS in a reconnection storm after a
// failover, BUSY while a script runs, LOADING, an authentication that fails for a
// while). Taking one of those for a refusal would end an enforcer's doubt while a
// replica without the last writes is promoted (masters.go in enforcer/record).
func Refused(err error) bool {
	return redis.HasErrorPrefix(err, "unknown command") || redis.IsPermissionError(err) || errors.Is(err, errNoReplID)
}

// writesProbe writes nothing, but is declared (Redis 7's script flags: no no-writes) as
// a script that may: Redis refuses to run it whenever it refuses writes for want of a
// disk or of replicas, and runs it at maxmemory (allow-oom), where the control plane's
// DEL of a record still goes through.
var writesProbe = redis.NewScript("#!lua flags=allow-oom\nreturn 1")

// WritesRefused returns the refusal of a master serving rdb that refuses every write
// now, DEL included, while it still answers reads: MISCONF (a snapshot or the AOF
// cannot be written, a full disk say, under Redis's default
// stop-writes-on-bgsave-error), NOREPLICAS (min-replicas-to-write, a replica down) or
// READONLY (the server is a replica: a single-mode URL naming a master that was
// demoted since; the control plane is given the same URL). The control plane can then
// neither replace a member's record nor take it away (controlplane/mirrorsync), so the
// records there may be older than they look. nil when no master says so; any other
// answer (a server older than Redis 7 that cannot compile the probe, a timeout) says
// nothing either way.
func WritesRefused(ctx context.Context, rdb redis.UniversalClient) error {
	var mu sync.Mutex
	var refused error
	probe := func(ctx context.Context, c redis.Scripter) error {
		err := writesProbe.Run(ctx, c, nil).Err()
		if redis.HasErrorPrefix(err, "MISCONF") || redis.HasErrorPrefix(err, "NOREPLICAS") || redis.HasErrorPrefix(err, "READONLY") {
			mu.Lock()
			refused = cmp.Or(refused, err)
			mu.Unlock()
		}
		return nil
	}
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		_ = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return probe(ctx, c) })
	} else {
		_ = probe(ctx, rdb)
	}
	return refused
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

// A process remembers the masters' ids in memory only while it runs: one started after
// Redis came back from an older RDB snapshot (or after a failover it did not see) has
// nothing to compare with, and the snapshot's generation makes its older records look
// current. So the control plane also keeps the ids in Redis, with the generation they
// were checked under (NoteMasters): a master serving that key under that generation with
// another id than the one noted is not the one that wrote it (a restart, even from its
// own snapshot, and a promotion both take a new replication id), and what it serves may
// be older than what was acknowledged.

// MastersKey holds the masters' replication ids and the generation they were noted under
// (NoteMasters). No TTL: one key.
func (l Layout) MastersKey() string { return l.Prefix + "masters" }

// NoteMasters stores the masters' ids m, checked under generation.
func (l Layout) NoteMasters(ctx context.Context, rdb redis.Cmdable, generation string, m Masters) error {
	ids := slices.Sorted(maps.Keys(m))
	return rdb.Set(ctx, l.MastersKey(), strings.Join(append([]string{generation}, ids...), " "), 0).Err()
}

// NotedMasters reads what NoteMasters stored; nil masters when nothing was (or what is
// there is not a note).
func (l Layout) NotedMasters(ctx context.Context, rdb redis.Cmdable) (string, Masters, error) {
	v, err := rdb.Get(ctx, l.MastersKey()).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, err
	}
	f := strings.Fields(v)
	if len(f) < 2 {
		return "", nil, nil
	}
	m := Masters{}
	for _, id := range f[1:] {
		m[id] = true
	}
	return f[0], m, nil
}
