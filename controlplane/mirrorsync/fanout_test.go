package mirrorsync_test

import (
	"context"
	"errors"
	"net"
	"os"
	"slices"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	at "github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	"github.com/tollgate-dev/tollgate/controlplane/metrics"
	"github.com/tollgate-dev/tollgate/controlplane/mirrorsync"
	"github.com/tollgate-dev/tollgate/internal/testredis"
	"github.com/tollgate-dev/tollgate/pkg/mirror"
)

// unansweredPipeline fails the nth pipeline of script calls (1-based) as one Redis
// never answered: every command gets a read timeout and none is sent.
type unansweredPipeline struct {
	mu   sync.Mutex
	seen int
	nth  int
}

func (h *unansweredPipeline) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *unansweredPipeline) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *unansweredPipeline) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) == 0 || (cmds[0].Name() != "evalsha" && cmds[0].Name() != "eval") {
			return next(ctx, cmds)
		}
		h.mu.Lock()
		h.seen++
		fail := h.seen == h.nth
		h.mu.Unlock()
		if !fail {
			return next(ctx, cmds)
		}
		err := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
		for _, c := range cmds {
			c.SetErr(err)
		}
		return err
	}
}

// An organization-wide change writes its members' records in pipelines of
// mirror.PipelineSize. One pipeline Redis does not answer is an unknown outcome for its
// members alone: their records are deleted (the enforcers resolve through the control
// plane rather than trust the older record) and marked for repair; the members after
// it, never sent, keep their older records and are marked; the members before it are
// written. Nothing falls back to rewriting every record of the deployment: the next
// maintenance round repairs the marked members, and only them.
func TestFanOutWithAnUnansweredPipelineRepairsOnlyItsMembers(t *testing.T) {
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 2*mirror.PipelineSize+200)
	slices.Sort(ms) // Refresh writes in member id order
	ctx := e.Ctx
	e.Mirror.EntitlementChanged(ctx, org, ms) // every member has a record
	before := map[string]int64{}
	gen := e.Mirror.Generation()
	for _, m := range ms {
		rec, err := e.Layout.Read(ctx, e.Redis, m, gen)
		if err != nil {
			t.Fatalf("record of %s before: %v", m, err)
		}
		before[m] = rec.GetVersion()
	}

	opts, err := redis.ParseURL(testredis.URL())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	rdb.AddHook(&unansweredPipeline{nth: 2})
	reg := prometheus.NewRegistry()
	met := metrics.New(reg)
	w := mirrorsync.New(mirrorsync.Deps{Store: e.Store, Redis: rdb, Layout: e.Layout, Clock: e.Clock, Log: e.Log, Metrics: met})
	if err := w.Check(ctx); err != nil {
		t.Fatal(err)
	}
	w.EntitlementChanged(ctx, org, ms)

	marks := e.Int64s(t, `SELECT member_id, version FROM usage_mirror_repairs`)
	for i, m := range ms {
		rec, err := e.Layout.Read(ctx, e.Redis, m, gen)
		switch p := i / mirror.PipelineSize; {
		case p == 0:
			if err != nil || rec.GetVersion() <= before[m] || marks[m] != 0 {
				t.Fatalf("member %d (written): version %d (was %d), %v, mark %d", i, rec.GetVersion(), before[m], err, marks[m])
			}
		case p == 1:
			if !errors.Is(err, mirror.ErrUnknown) || marks[m] <= before[m] {
				t.Fatalf("member %d (unanswered): want its record deleted and a mark, got %v, %v, mark %d", i, rec, err, marks[m])
			}
		default:
			if err != nil || rec.GetVersion() != before[m] || marks[m] <= before[m] {
				t.Fatalf("member %d (not sent): want its older record and a mark, got version %d (was %d), %v, mark %d",
					i, rec.GetVersion(), before[m], err, marks[m])
			}
		}
	}
	if len(marks) != len(ms)-mirror.PipelineSize {
		t.Fatalf("%d marks, want %d", len(marks), len(ms)-mirror.PipelineSize)
	}
	if got := testutil.ToFloat64(met.MirrorWrites.WithLabelValues("deleted")); got != mirror.PipelineSize {
		t.Fatalf("%v records deleted, want %d", got, mirror.PipelineSize)
	}
	if n, overflow := w.Remembered(); n != 0 || overflow {
		t.Fatalf("remembered in memory: %d (overflow %v); the marks in Postgres are the repair list", n, overflow)
	}

	if err := w.Check(ctx); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if rec, err := e.Layout.Read(ctx, e.Redis, m, gen); err != nil || rec.GetVersion() <= before[m] {
			t.Fatalf("after the repair, %s: %v, %v", m, rec, err)
		}
	}
	if got := e.Int64s(t, `SELECT member_id, version FROM usage_mirror_repairs`); len(got) != 0 {
		t.Fatalf("marks left after the repair: %d", len(got))
	}
	if got := testutil.ToFloat64(met.Resyncs.WithLabelValues("refresh")); got != 0 {
		t.Fatalf("every record rewritten %v times", got)
	}
}
