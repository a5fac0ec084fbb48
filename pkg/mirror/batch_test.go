package mirror_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-dev/tollgate/internal/testredis"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
)

// pipelines is a hook that records the size of every pipeline of script calls, and
// can fail the nth one (1-based) as a pipeline Redis never answered: its first fail
// commands get a read timeout without being sent, the rest go through.
type pipelines struct {
	mu    sync.Mutex
	sizes []int
	nth   int
	fail  int
}

var errUnanswered = &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}

func (p *pipelines) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (p *pipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (p *pipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) == 0 || (cmds[0].Name() != "evalsha" && cmds[0].Name() != "eval") {
			return next(ctx, cmds)
		}
		p.mu.Lock()
		p.sizes = append(p.sizes, len(cmds))
		failHere := len(p.sizes) == p.nth
		p.mu.Unlock()
		if !failHere {
			return next(ctx, cmds)
		}
		n := min(p.fail, len(cmds))
		for _, c := range cmds[:n] {
			c.SetErr(errUnanswered)
		}
		if n < len(cmds) {
			_ = next(ctx, cmds[n:])
		}
		return errUnanswered
	}
}

// records builds n records of about 300 bytes each (a real record: one policy, three
// windows), of members om_<i>, under version v.
func records(n int, v int64) []*mirror.Record {
	recs := make([]*mirror.Record, n)
	for i := range recs {
		rec := record(fmt.Sprintf("om_%026d", i), v, "g1", int64(i))
		for k := range 12 {
			rec.Spend = append(rec.Spend, &internalv1.WindowSpend{Timeframe: "week", WindowStartUnixMs: int64(1000 + k), UsedMicroUsd: int64(i)})
		}
		recs[i] = rec
	}
	return recs
}

// An organization-wide change writes every member's record at once. Sent as one
// pipeline, 80,000 records could not be written within the control plane's 1 s read and
// write deadlines (controlplane/app), which cover a whole pipeline: every write failed
// with an i/o timeout and the enforcers kept the old records. Sent as pipelines of at
// most mirror.PipelineSize, each with deadlines of its own, every one is written.
func TestWriteManyWritesAnOrganizationOfAnySize(t *testing.T) {
	if raceEnabled {
		t.Skip("-race: the pipelines' encoding is too slow for the deadlines this test is about")
	}
	srv := testredis.StartServer(t)
	opts, err := redis.ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout = 2*time.Second, time.Second, time.Second // the control plane's
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	sizes := &pipelines{}
	rdb.AddHook(sizes)
	l := mirror.Layout{Prefix: testredis.Prefix()}
	ctx := context.Background()
	const n = 80_000
	recs := records(n, 7)
	start := time.Now()
	written, errs := l.WriteMany(ctx, rdb, recs, time.Hour)
	took := time.Since(start)
	failed, notWritten := 0, 0
	var first error
	for i, err := range errs {
		switch {
		case err != nil:
			failed++
			first = cmpOr(first, err)
		case !written[i]:
			notWritten++
		}
	}
	t.Logf("%d records: %d failed, %d pipelines, in %s (first error: %v)", n, failed, len(sizes.sizes), took, first)
	for _, s := range sizes.sizes {
		if s > mirror.PipelineSize {
			t.Errorf("a pipeline of %d script calls, more than %d", s, mirror.PipelineSize)
		}
	}
	// A record kept out by an equal version was written by an attempt that timed out
	// (the client sent the pipeline again): the deadlines did not hold.
	if failed > 0 || notWritten > 0 {
		t.Fatalf("%d of %d writes failed, %d kept out (written by an attempt that timed out): %v", failed, n, notWritten, first)
	}
	last := recs[n-1].GetEntitlement().GetMemberId()
	got, err := l.Read(ctx, rdb, last, "g1")
	if err != nil || got.GetVersion() != 7 {
		t.Fatalf("last record read back: %v, %v", got, err)
	}
}

// A pipeline Redis did not answer at all is an unknown outcome for its records alone:
// each carries its error, the pipelines before it stay written, and the ones after it
// are not sent (they would wait out the same deadlines). A pipeline that got some
// answers (a dead shard of a cluster fails only its own keys) does not stop the batch.
func TestWriteManyStopsAfterAPipelineRedisDidNotAnswer(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail int // commands of the second pipeline left unanswered
		// want per pipeline of 500, 500 and 200: "written", "unanswered", "not sent",
		// or "mixed" (the first fail unanswered, the rest written).
		want [3]string
	}{
		{"the whole pipeline unanswered", mirror.PipelineSize, [3]string{"written", "unanswered", "not sent"}},
		{"part of the pipeline unanswered", 100, [3]string{"written", "mixed", "written"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb, l := testredis.New(t)
			ctx := context.Background()
			// The script loaded first: in a Redis that had not run it yet, the first
			// pipeline's NOSCRIPT answers are sent again as a pipeline of their own,
			// which would take the failure meant for the second (seen on a new machine).
			if _, errs := l.WriteMany(ctx, rdb, records(1, 1), time.Hour); errs[0] != nil {
				t.Fatal(errs[0])
			}
			hook := &pipelines{nth: 2, fail: tc.fail}
			rdb.AddHook(hook)
			recs := records(2*mirror.PipelineSize+200, 3)
			written, errs := l.WriteMany(ctx, rdb, recs, time.Hour)
			for i := range recs {
				p := min(i/mirror.PipelineSize, 2)
				want := tc.want[p]
				if want == "mixed" {
					want = "written"
					if i-p*mirror.PipelineSize < tc.fail {
						want = "unanswered"
					}
				}
				var got string
				switch {
				case errors.Is(errs[i], mirror.ErrNotSent):
					got = "not sent"
				case errors.Is(errs[i], errUnanswered):
					got = "unanswered"
				case errs[i] == nil && written[i]:
					got = "written"
				default:
					got = fmt.Sprintf("written=%v err=%v", written[i], errs[i])
				}
				if got != want {
					t.Fatalf("record %d (pipeline %d): %s, want %s", i, p+1, got, want)
				}
			}
		})
	}
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
