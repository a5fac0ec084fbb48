package mirror

import (
	"context"
	_ "embed"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"
)

// WriteMany writes records like Write, in one pipeline (on Redis Cluster the client
// splits it by slot; each record is still one key and one script call). It returns, per
// record, whether it was written, and the error of each write (nil when it went
// through). When Redis has forgotten the script (a restart), it loads it and writes
// again.
func (l Layout) WriteMany(ctx context.Context, rdb redis.UniversalClient, recs []*Record, ttl time.Duration) ([]bool, []error) {
	written := make([]bool, len(recs))
	errs := make([]error, len(recs))
	todo := make([]int, 0, len(recs))
	blobs := make([][]byte, len(recs))
	for i, rec := range recs {
		if rec.GetEntitlement().GetMemberId() == "" {
			errs[i] = errors.New("mirror: record without member id")
			continue
		}
		blob, err := proto.Marshal(rec)
		if err != nil {
			errs[i] = err
			continue
		}
		blobs[i] = blob
		todo = append(todo, i)
	}
	for attempt := 0; attempt < 2 && len(todo) > 0; attempt++ {
		cmds := make([]*redis.Cmd, len(todo))
		pipe := rdb.Pipeline()
		for k, i := range todo {
			rec := recs[i]
			cmds[k] = writeScript.EvalSha(ctx, pipe, []string{l.MemberKey(rec.GetEntitlement().GetMemberId())},
				rec.GetVersion(), rec.GetGeneration(), blobs[i], ttl.Milliseconds())
		}
		_, _ = pipe.Exec(ctx)
		var retry []int
		for k, i := range todo {
			n, err := cmds[k].Int()
			if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") && attempt == 0 {
				retry = append(retry, i)
				continue
			}
			written[i], errs[i] = n == 1, err
		}
		if len(retry) > 0 {
			if err := writeScript.Load(ctx, rdb).Err(); err != nil {
				for _, i := range retry {
					errs[i] = err
				}
				return written, errs
			}
		}
		todo = retry
	}
	return written, errs
}

// ClaimGeneration installs generation unless one is already set, and returns the
// generation in force: ours when claimed, another writer's otherwise. Control planes
// that find the generation missing at the same time thus agree on one.
func (l Layout) ClaimGeneration(ctx context.Context, rdb redis.Cmdable, generation string) (string, bool, error) {
	ok, err := rdb.SetNX(ctx, l.GenerationKey(), generation, 0).Result()
	if err != nil {
		return "", false, err
	}
	if ok {
		return generation, true, nil
	}
	cur, err := l.Generation(ctx, rdb)
	return cur, false, err
}

//go:embed replace_generation.lua
var replaceGenerationSource string

var replaceGenerationScript = redis.NewScript(replaceGenerationSource)

// ReplaceGeneration installs generation if the current one is still seen, and returns
// the generation in force: ours when replaced, another writer's otherwise (or "" when
// Redis has none). Control planes that decide at the same moment that the mirror must
// be rebuilt (after a failover) thus agree on one new generation and one rebuild.
func (l Layout) ReplaceGeneration(ctx context.Context, rdb redis.Scripter, seen, generation string) (string, bool, error) {
	cur, err := replaceGenerationScript.Run(ctx, rdb, []string{l.GenerationKey()}, seen, generation).Text()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return cur, cur == generation, nil
}

// DeleteMany removes members' records, in one pipeline of single-key DELs, and returns
// the first error. A reader then finds no record and resolves through the control plane.
// Redis runs DEL even when it refuses writes for want of memory (maxmemory under the
// noeviction policy refuses only commands that may grow memory), so a writer whose
// record write was refused can still take away the older record it failed to replace.
func (l Layout) DeleteMany(ctx context.Context, rdb redis.Cmdable, memberIDs []string) error {
	pipe := rdb.Pipeline()
	for _, m := range memberIDs {
		pipe.Del(ctx, l.MemberKey(m))
	}
	_, err := pipe.Exec(ctx)
	return err
}

// ReadVersions reads the versions of members' records as stored, whatever generation
// they were written under, in one pipeline of single-key reads: versions[i] and errs[i]
// answer memberIDs[i]; a member without a record, or whose version is not a number,
// reads 0. A rebuild moves each member's version in Postgres past it before it reads the
// record (controlplane/mirrorsync), so that the rebuilt record wins the monotonic write
// even over one Postgres no longer knows (a database restored from a backup: its
// versions went back). On Redis Cluster a master that is down fails only its own keys.
func (l Layout) ReadVersions(ctx context.Context, rdb redis.Cmdable, memberIDs []string) (versions []int64, errs []error) {
	versions, errs = make([]int64, len(memberIDs)), make([]error, len(memberIDs))
	if len(memberIDs) == 0 {
		return versions, errs
	}
	cmds := make([]*redis.StringCmd, len(memberIDs))
	pipe := rdb.Pipeline()
	for i, m := range memberIDs {
		cmds[i] = pipe.HGet(ctx, l.MemberKey(m), "v")
	}
	_, _ = pipe.Exec(ctx)
	for i, c := range cmds {
		s, err := c.Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			errs[i] = err
			continue
		}
		versions[i], _ = strconv.ParseInt(s, 10, 64)
	}
	return versions, errs
}
