package settleq_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate-dev/tollgate/enforcer/internal/enforcertest"
	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/enforcer/settleq"
	"github.com/tollgate-dev/tollgate/enforcer/spool"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// A settlement the control plane did not answer before the drain deadline is not lost
// when the queue has a spool: the next process's queue sends it, and once answered it
// is gone from the spool. Without the spool the same settlement is abandoned.
func TestSpooledSettlementSurvivesTheProcess(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := t.TempDir()
	m := metrics.Discard()
	sp, _, err := spool.Open(spool.Config{Dir: dir}, m, quiet)
	if err != nil {
		t.Fatal(err)
	}
	down := controlPlaneDown(1000)
	q := settleq.New(down, fastConfig(), m, quiet)
	q.UseSpool(sp, nil)
	res, _ := q.Reserve()
	var got settleq.Result
	if err := q.Enqueue(&internalv1.SettleItem{RequestId: "req_kept", MemberId: "om_a"}, res, func(r settleq.Result) { got = r }); err != nil {
		t.Fatal(err)
	}
	// Without a spool, for comparison: the same situation abandons.
	q0 := settleq.New(controlPlaneDown(1000), fastConfig(), metrics.Discard(), quiet)
	var lost settleq.Result
	_ = q0.Enqueue(&internalv1.SettleItem{RequestId: "req_lost"}, nil, func(r settleq.Result) { lost = r })

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	q.Drain(ctx)
	q0.Drain(ctx)
	if !errors.Is(lost.Err, settleq.ErrAbandoned) {
		t.Fatalf("unspooled settlement: %+v", lost)
	}
	if got.Err != nil || got.Outcome != 0 {
		t.Fatalf("spooled settlement was finished: %+v", got)
	}
	if q.Depth() != 0 {
		t.Fatalf("depth %d after the drain", q.Depth())
	}
	sp.Close()

	sp2, pending, err := spool.Open(spool.Config{Dir: dir}, m, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) != 1 || pending[0].Item.GetRequestId() != "req_kept" {
		t.Fatalf("pending %v", pending)
	}
	up := &scripted{}
	q2 := settleq.New(up, settleq.Config{Capacity: 1}, m, quiet)
	q2.UseSpool(sp2, pending)
	// Replayed settlements are outside the capacity: a start can still reserve.
	if r, ok := q2.Reserve(); !ok {
		t.Fatal("a replayed settlement took the capacity")
	} else {
		r.Release()
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- q2.Run(runCtx) }()
	waitCtx, cancelWait := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelWait()
	if err := q2.WaitIdle(waitCtx); err != nil {
		t.Fatal(err)
	}
	stop()
	<-done
	if len(up.calls) != 1 || up.calls[0][0] != "req_kept" {
		t.Fatalf("calls %v", up.calls)
	}
	sp2.Close()
	sp3, pending, err := spool.Open(spool.Config{Dir: dir}, m, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer sp3.Close()
	if len(pending) != 0 {
		t.Fatalf("answered settlement still spooled: %v", pending)
	}
}

// A drain that runs out of time with many settlements left gives them up at once:
// every one counted, at most maxAbandonLogs of them named, and a summary line.
func TestDrainGivesUpManyWithoutLoggingEachOne(t *testing.T) {
	logs := &logBuf{}
	m := metrics.Discard()
	down := controlPlaneDown(100)
	q := settleq.New(down, settleq.Config{Capacity: 10_000, MinBackoff: time.Hour}, m, slog.New(slog.NewTextHandler(logs, nil)))
	for i := range 5000 {
		if err := q.Enqueue(&internalv1.SettleItem{RequestId: fmt.Sprintf("req_%d", i)}, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	q.Drain(ctx)
	if took := time.Since(start); took > time.Second {
		t.Fatalf("drain took %v", took)
	}
	if got := testutil.ToFloat64(m.Settlements.WithLabelValues("abandoned")); got != 5000 || q.Depth() != 0 {
		t.Fatalf("abandoned %v, depth %d", got, q.Depth())
	}
	if n := strings.Count(logs.String(), "SETTLEMENT NOT DELIVERED:"); n != 1000 {
		t.Fatalf("%d lines name a settlement", n)
	}
	if !strings.Contains(logs.String(), "not_logged=4000") {
		t.Fatal("no summary line")
	}
}

// silent is a control plane that takes Settle calls and never answers them: each ends
// only when its context does.
type silent struct{ entered chan string }

func (s silent) Settle(ctx context.Context, in *internalv1.SettleRequest, _ ...grpc.CallOption) (*internalv1.SettleResponse, error) {
	s.entered <- in.GetItems()[0].GetRequestId()
	<-ctx.Done()
	return nil, status.FromContextError(ctx.Err()).Err()
}

// A stopping Run waits for its workers' calls, each up to CallTimeout, but no longer
// than CutCalls allows: a shutdown ends by its deadline however slow the control plane.
// The items of a call cut are not lost: spooled, they stay there for the next process
// (the control plane answers duplicate if the cut call was committed); not spooled,
// they reach the drain, which gives them up loudly when out of time.
func TestStoppingRunsCallIsCutAtTheShutdownsDeadline(t *testing.T) {
	for _, spooled := range []bool{true, false} {
		t.Run(fmt.Sprintf("spooled=%v", spooled), func(t *testing.T) {
			quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
			logs := &logBuf{}
			m := metrics.Discard()
			cfg := fastConfig()
			cfg.CallTimeout = time.Minute
			cfg.Linger = -1
			s := silent{entered: make(chan string, 1)}
			q := settleq.New(s, cfg, m, slog.New(slog.NewTextHandler(logs, nil)))
			dir := t.TempDir()
			var sp *spool.Spool
			if spooled {
				var err error
				if sp, _, err = spool.Open(spool.Config{Dir: dir}, m, quiet); err != nil {
					t.Fatal(err)
				}
				q.UseSpool(sp, nil)
			}
			var got settleq.Result
			if err := q.Enqueue(&internalv1.SettleItem{RequestId: "req_cut", MemberId: "om_a"}, nil, func(r settleq.Result) { got = r }); err != nil {
				t.Fatal(err)
			}
			runCtx, stop := context.WithCancel(context.Background())
			ran := make(chan struct{})
			go func() { q.Run(runCtx); close(ran) }()
			<-s.entered // the worker's call is out

			shutCtx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			began := time.Now()
			q.CutCalls(shutCtx)
			stop()
			select {
			case <-ran:
			case <-time.After(5 * time.Second):
				t.Fatal("the stopping Run waited for its call past the deadline CutCalls gave")
			}
			if took := time.Since(began); took > time.Second {
				t.Fatalf("Run stopped after %v; its call should have been cut at 100ms", took)
			}
			if got.Err != nil || got.Outcome != 0 {
				t.Fatalf("the cut settlement was finished: %+v", got)
			}
			if q.Depth() != 1 {
				t.Fatalf("depth %d after the cut, want the settlement back in the queue", q.Depth())
			}
			q.Drain(shutCtx) // out of time already
			if !spooled {
				if !errors.Is(got.Err, settleq.ErrAbandoned) || !strings.Contains(logs.String(), "SETTLEMENT NOT DELIVERED") ||
					!strings.Contains(logs.String(), "req_cut") {
					t.Fatalf("an unspooled settlement cut was not given up loudly: %+v\n%s", got, logs.String())
				}
				return
			}
			if got.Err != nil || got.Outcome != 0 {
				t.Fatalf("the spooled settlement cut was finished: %+v", got)
			}
			sp.Close()
			sp2, pending, err := spool.Open(spool.Config{Dir: dir}, m, quiet)
			if err != nil {
				t.Fatal(err)
			}
			defer sp2.Close()
			if len(pending) != 1 || pending[0].Item.GetRequestId() != "req_cut" {
				t.Fatalf("pending %v, want req_cut for the next process", pending)
			}
		})
	}
}

// TestOverflowIntoTheSpoolIsKept: a settlement without a reservation (an open-mode
// admission made while the settle queue was full, docs/enforcer.md "Overload") that
// finds the queue at its capacity is not lost when the spool took it: like the
// settlements the spool replays at start, it is queued outside the capacity (the
// spool's size bounds those), and sent. Until 2026-12-03 it was acknowledged in the
// spool and given up (SETTLEMENT LOST): open mode admitted requests whose accounting was
// certain to be lost while the disk had room for it.
func TestOverflowIntoTheSpoolIsKept(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	m := metrics.Discard()
	sp := tempSpool(t, m, quiet)
	up := &scripted{}
	cfg := fastConfig()
	cfg.Capacity = 2
	q := settleq.New(up, cfg, m, quiet)
	q.UseSpool(sp, nil)
	r1, _ := q.Reserve()
	r2, _ := q.Reserve()
	done := make(chan settleq.Result, 1)
	if err := q.Enqueue(&internalv1.SettleItem{RequestId: "req_unreserved", MemberId: "om_a"}, nil, func(r settleq.Result) { done <- r }); err != nil {
		t.Fatalf("a spooled settlement past the capacity was refused: %v", err)
	}
	if got := testutil.ToFloat64(m.Settlements.WithLabelValues("overflow")); got != 0 {
		t.Fatalf("overflow counted %v", got)
	}
	// It takes no capacity: the reservations still turn into settlements, and once
	// answered, their slots are free again.
	for _, r := range []*settleq.Reservation{r1, r2} {
		if err := q.Enqueue(&internalv1.SettleItem{RequestId: "req_reserved", MemberId: "om_a"}, r, nil); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go q.Run(ctx)
	select {
	case r := <-done:
		if r.Err != nil || r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED {
			t.Fatalf("settlement answered %+v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the settlement kept in the spool was never sent")
	}
	waitCtx, cancelWait := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelWait()
	if err := q.WaitIdle(waitCtx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if r, ok := q.Reserve(); !ok {
			t.Fatal("capacity not given back")
		} else {
			defer r.Release()
		}
	}
}

// A settlement the drain leaves in the spool is named, with what re-sends it: the next
// start sends it only if it finds the same spool, and the chart's emptyDir goes with a
// deleted pod (every rollout). Until 2026-12-07 the shutdown said how many stayed and
// not which, so what a rollout took with its pods could not be reconciled.
func TestSettlementsLeftInTheSpoolAtShutdownAreNamed(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sp := tempSpool(t, metrics.Discard(), quiet)
	down := controlPlaneDown(1000)
	logs := &logBuf{}
	q := settleq.New(down, fastConfig(), metrics.Discard(), slog.New(slog.NewTextHandler(logs, nil)))
	q.UseSpool(sp, nil)
	res, _ := q.Reserve()
	if err := q.Enqueue(&internalv1.SettleItem{RequestId: "req_kept", OrganizationId: "org_a", MemberId: "om_a", Model: "gpt-4o",
		InputTokens: 12, OutputTokens: 34}, res, nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	q.Drain(ctx)
	var line string
	for l := range strings.SplitSeq(logs.String(), "\n") {
		if strings.Contains(l, "request_id=req_kept") {
			line = l
		}
	}
	if line == "" || !strings.Contains(line, `\"inputTokens\":12`) || !strings.Contains(line, "member_id=om_a") {
		t.Fatalf("the settlement left in the spool is not named with its re-send body:\n%s", logs.String())
	}
}

// controlPlaneDown answers its first n calls Unavailable, as a control plane that cannot
// be reached does, and settles the rest.
func controlPlaneDown(n int) *scripted {
	s := &scripted{}
	for range n {
		s.errs = append(s.errs, status.Error(codes.Unavailable, "down"))
	}
	return s
}

// tempSpool is a spool in a directory of the test's own, closed when it ends.
func tempSpool(t *testing.T, m *metrics.Metrics, log *slog.Logger) *spool.Spool {
	t.Helper()
	sp, _, err := spool.Open(spool.Config{Dir: t.TempDir()}, m, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.Close() })
	return sp
}

// poisoned answers Unavailable to every call that carries the poison item (a failure
// of that one row that the control plane reports as the whole batch's: a missing grant,
// a corrupt page) and settles every other call.
type poisoned struct {
	mu    sync.Mutex
	calls [][]string
}

func (p *poisoned) Settle(_ context.Context, in *internalv1.SettleRequest, _ ...grpc.CallOption) (*internalv1.SettleResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	resp := &internalv1.SettleResponse{}
	var ids []string
	for _, it := range in.GetItems() {
		ids = append(ids, it.GetRequestId())
		resp.Results = append(resp.Results, &internalv1.SettleResult{RequestId: it.GetRequestId(), Outcome: internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED})
	}
	p.calls = append(p.calls, ids)
	if slices.Contains(ids, "req_poison") {
		return nil, status.Error(codes.Unavailable, "could not read block 7 of relation usage_receipts")
	}
	return resp, nil
}

// A spooled settlement is never given up for its age: the spool, not the age, bounds
// what is kept, and a control plane that fails longer than MaxAge (a Postgres outage
// over a night) must not lose the accounting of what it could not take. Past MaxAge it
// is named in the log and sent alone, so that one item the control plane keeps failing
// no longer holds back the settlements that shared its batches.
func TestASpooledSettlementPastMaxAgeIsKeptAndSentAlone(t *testing.T) {
	logs := &logBuf{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	sp := tempSpool(t, m, log)
	cfg := fastConfig()
	cfg.MaxAge = 30 * time.Millisecond
	cfg.Linger = 20 * time.Millisecond // the two share their first batches
	p := &poisoned{}
	q := settleq.New(p, cfg, m, log)
	q.UseSpool(sp, nil)
	results := make(chan settleq.Result, 2)
	for _, id := range []string{"req_poison", "req_healthy"} {
		res, _ := q.Reserve()
		if err := q.Enqueue(&internalv1.SettleItem{RequestId: id, MemberId: "om_a"}, res, func(r settleq.Result) { results <- r }); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go q.Run(ctx)
	select {
	case r := <-results:
		if r.Err != nil || r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED {
			t.Fatalf("the healthy settlement: %+v (calls %v)", r, p.calls)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the healthy settlement never went through")
	}
	// The poisoned one is still being retried, past MaxAge, and is still in the spool.
	for !strings.Contains(logs.String(), "SETTLEMENT OVERDUE") {
		select {
		case r := <-results:
			t.Fatalf("the poisoned settlement was finished: %+v", r)
		case <-time.After(5 * time.Millisecond):
		}
	}
	if got := enforcertest.Value(reg, "tollgate_enforcer_settlements_total", "outcome", "abandoned"); got != 0 ||
		strings.Contains(logs.String(), "NOT DELIVERED") || q.Depth() != 1 {
		t.Fatalf("abandoned %v, depth %d; a spooled settlement must be kept:\n%s", got, q.Depth(), logs)
	}
	if !strings.Contains(logs.String(), "req_poison") {
		t.Fatalf("the overdue settlement is not named:\n%s", logs)
	}
}

// A settlement the drain leaves in the spool, or one queued (spooled) after the drain, is
// counted: tollgate_enforcer_settlements_total{outcome="left_in_spool"}. On Kubernetes
// the chart's spool is an emptyDir that goes with the deleted pod, so each is lost unless
// re-sent from its log line, and the chart's TollgateSettlementsLost alert counts them
// there. Until 2026-12-07 they were logged only: no alert fired for a rollout that took
// settlements with its pods.
func TestSettlementsLeftInTheSpoolAtShutdownAreCounted(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sp := tempSpool(t, metrics.Discard(), quiet)
	down := controlPlaneDown(1000)
	m := metrics.New(prometheus.NewRegistry())
	q := settleq.New(down, fastConfig(), m, quiet)
	q.UseSpool(sp, nil)
	for _, id := range []string{"req_kept_1", "req_kept_2"} {
		res, _ := q.Reserve()
		if err := q.Enqueue(&internalv1.SettleItem{RequestId: id, OrganizationId: "org_a", MemberId: "om_a"}, res, nil); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	q.Drain(ctx)
	if got := testutil.ToFloat64(m.Settlements.WithLabelValues("left_in_spool")); got != 2 {
		t.Fatalf("left_in_spool counted %v after the drain, want 2", got)
	}
	// Queued after the drain: spooled, the next start's, left in the spool as well.
	if err := q.Enqueue(&internalv1.SettleItem{RequestId: "req_late", OrganizationId: "org_a", MemberId: "om_a"}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.Settlements.WithLabelValues("left_in_spool")); got != 3 {
		t.Fatalf("left_in_spool counted %v after a late settlement, want 3", got)
	}
	if got := testutil.ToFloat64(m.Settlements.WithLabelValues("abandoned")); got != 0 {
		t.Fatalf("abandoned counted %v: a spooled settlement is not given up", got)
	}
}
