package mirror

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"
)

// PipelineSize bounds the commands of one pipeline of the batched calls (WriteMany,
// DeleteMany, ReadVersions). A pipeline is written and answered under one read and one
// write deadline of the client (the control plane's are 1 s), so a batch of any size is
// sent as pipelines of at most this many commands, one after another, each with
// deadlines of its own: one pipeline of an organization-wide change's 80,000 records
// could not be written within a second, and every one of its writes failed. The rebuild
// loads and writes members in chunks of this size too (controlplane/mirrorsync).
const PipelineSize = 500

// ErrNotSent marks the commands of a batch that were not sent: an earlier pipeline of
// the batch got no answer at all from Redis (a timeout, a refused or broken
// connection, after the client's own retries), so the later ones would only have waited
// out the same deadlines. Their records are as they were.
var ErrNotSent = errors.New("mirror: not sent: Redis did not answer an earlier pipeline of the batch")

// errInvalidRecord: a record WriteMany cannot send (no member id, or not encodable).
var errInvalidRecord = errors.New("mirror: invalid record")

// unanswered reports whether no command of a pipeline got an answer from Redis: each
// failed, none with an error reply of Redis's own (OOM, READONLY, NOSCRIPT, ...), and
// each was sent (not an invalid record).
// On Redis Cluster a pipeline that spans shards is unanswered only when every shard it
// reached failed so; a dead shard alone fails its own keys and the batch goes on.
func unanswered(errs []error) bool {
	if len(errs) == 0 {
		return false
	}
	for _, err := range errs {
		var reply redis.Error
		if err == nil || errors.Is(err, redis.Nil) || errors.Is(err, errInvalidRecord) || errors.As(err, &reply) {
			return false
		}
	}
	return true
}

// inPipelines calls send for each run [lo, hi) of at most PipelineSize of a batch whose
// per-item errors are errs, in order, and sends no more after a run Redis did not answer
// at all: the errors of the items not sent are ErrNotSent, wrapping that run's cause.
func inPipelines(errs []error, send func(lo, hi int)) {
	for lo := 0; lo < len(errs); lo += PipelineSize {
		hi := min(lo+PipelineSize, len(errs))
		send(lo, hi)
		if hi < len(errs) && unanswered(errs[lo:hi]) {
			for i := hi; i < len(errs); i++ {
				errs[i] = fmt.Errorf("%w: %w", ErrNotSent, errs[lo])
			}
			return
		}
	}
}

// WriteMany writes records like Write, in pipelines of at most PipelineSize records
// (on Redis Cluster the client splits each by slot; each record is still one key and one
// script call). It returns, per record, whether it was written, and the error of each
// write (nil when it went through). When Redis has forgotten the script (a restart), it
// loads it and writes again.
//
// A pipeline that Redis did not answer at all (its writes failed with no reply, after
// the client's own retries: the write is idempotent, an equal version is refused) is an
// unknown outcome for its records, each of which carries that error; the pipelines after
// it are not sent (ErrNotSent).
func (l Layout) WriteMany(ctx context.Context, rdb redis.UniversalClient, recs []*Record, ttl time.Duration) ([]bool, []error) {
	written := make([]bool, len(recs))
	errs := make([]error, len(recs))
	inPipelines(errs, func(lo, hi int) {
		l.writePipeline(ctx, rdb, recs[lo:hi], ttl, written[lo:hi], errs[lo:hi])
	})
	return written, errs
}

// writePipeline is WriteMany's one pipeline: written and errs answer recs.
func (l Layout) writePipeline(ctx context.Context, rdb redis.UniversalClient, recs []*Record, ttl time.Duration, written []bool, errs []error) {
	todo := make([]int, 0, len(recs))
	blobs := make([][]byte, len(recs))
	for i, rec := range recs {
		if rec.GetEntitlement().GetMemberId() == "" {
			errs[i] = fmt.Errorf("%w: no member id", errInvalidRecord)
			continue
		}
		blob, err := proto.Marshal(rec)
		if err != nil {
			errs[i] = fmt.Errorf("%w: %w", errInvalidRecord, err)
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
				return
			}
		}
		todo = retry
	}
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

// DeleteMany removes members' records, in pipelines of at most PipelineSize single-key
// DELs, and returns the first error; as WriteMany, it sends no more pipelines after one
// Redis did not answer at all. A reader then finds no record and resolves through the
// control plane. Redis runs DEL even when it refuses writes for want of memory
// (maxmemory under the noeviction policy refuses only commands that may grow memory), so
// a writer whose record write was refused can still take away the older record it
// failed to replace.
func (l Layout) DeleteMany(ctx context.Context, rdb redis.Cmdable, memberIDs []string) error {
	var first error
	for lo := 0; lo < len(memberIDs); lo += PipelineSize {
		hi := min(lo+PipelineSize, len(memberIDs))
		pipe := rdb.Pipeline()
		cmds := make([]*redis.IntCmd, 0, hi-lo)
		for _, m := range memberIDs[lo:hi] {
			cmds = append(cmds, pipe.Del(ctx, l.MemberKey(m)))
		}
		_, err := pipe.Exec(ctx)
		first = cmp.Or(first, err)
		errs := make([]error, len(cmds))
		for i, c := range cmds {
			errs[i] = c.Err()
		}
		if hi < len(memberIDs) && unanswered(errs) {
			return fmt.Errorf("%w (and %d more not sent)", first, len(memberIDs)-hi)
		}
	}
	return first
}

// ReadVersions reads the versions of members' records as stored, whatever generation
// they were written under, in pipelines of at most PipelineSize single-key reads (none
// sent after one Redis did not answer at all: ErrNotSent): versions[i] and errs[i]
// answer memberIDs[i]; a member without a record, or whose version is not a number,
// reads 0. A rebuild moves each member's version in Postgres past it before it reads the
// record (controlplane/mirrorsync), so that the rebuilt record wins the monotonic write
// even over one Postgres no longer knows (a database restored from a backup: its
// versions went back). On Redis Cluster a master that is down fails only its own keys.
func (l Layout) ReadVersions(ctx context.Context, rdb redis.Cmdable, memberIDs []string) (versions []int64, errs []error) {
	versions, errs = make([]int64, len(memberIDs)), make([]error, len(memberIDs))
	inPipelines(errs, func(lo, hi int) {
		l.readVersions(ctx, rdb, memberIDs[lo:hi], versions[lo:hi], errs[lo:hi])
	})
	return versions, errs
}

// readVersions is ReadVersions' one pipeline.
func (l Layout) readVersions(ctx context.Context, rdb redis.Cmdable, memberIDs []string, versions []int64, errs []error) {
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
}
