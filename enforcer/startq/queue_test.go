package startq

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"

	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/enforcer/settleq"
	"github.com/tollgate-dev/tollgate/internal/testio"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// starter is a control plane whose Start calls block until released, and which
// records every batch it received.
type starter struct {
	mu      sync.Mutex
	batches [][]string
	gate    chan struct{} // nil: answer at once
	entered chan struct{}
	err     error
	outcome internalv1.StartOutcome
	// silent: calls are answered only when their context ends (a control plane that
	// accepts the call and never answers).
	silent bool
}

func (s *starter) Start(ctx context.Context, in *internalv1.StartRequest, _ ...grpc.CallOption) (*internalv1.StartResponse, error) {
	var ids []string
	for _, it := range in.GetItems() {
		ids = append(ids, it.GetRequestId())
	}
	s.mu.Lock()
	s.batches = append(s.batches, ids)
	s.mu.Unlock()
	if s.entered != nil {
		s.entered <- struct{}{}
	}
	if s.gate != nil {
		<-s.gate
	}
	if s.silent {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if s.err != nil {
		return nil, s.err
	}
	out := s.outcome
	if out == 0 {
		out = internalv1.StartOutcome_START_OUTCOME_RECORDED
	}
	resp := &internalv1.StartResponse{}
	for _, id := range ids {
		resp.Results = append(resp.Results, &internalv1.StartResult{RequestId: id, Outcome: out})
	}
	return resp, nil
}

func (s *starter) sent() map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := map[string]bool{}
	for _, b := range s.batches {
		for _, id := range b {
			m[id] = true
		}
	}
	return m
}

type settler struct{}

func (settler) Settle(context.Context, *internalv1.SettleRequest, ...grpc.CallOption) (*internalv1.SettleResponse, error) {
	return &internalv1.SettleResponse{}, nil
}

type fixture struct {
	q       *Queue
	st      *starter
	settle  *settleq.Queue
	m       *metrics.Metrics
	orphans atomic.Int64
}

func newFixture(t *testing.T, cfg Config, settleCap int, st *starter) *fixture {
	return newFixtureLog(t, cfg, settleCap, st, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

func newFixtureLog(t *testing.T, cfg Config, settleCap int, st *starter, log *slog.Logger) *fixture {
	f := &fixture{st: st, m: metrics.Discard()}
	f.settle = settleq.New(settler{}, settleq.Config{Capacity: settleCap}, f.m, log)
	f.q = New(st, f.settle, cfg, func(it *internalv1.StartItem, res *settleq.Reservation) {
		f.orphans.Add(1)
		res.Release()
	}, f.m, log)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.q.Run(ctx); close(done) }()
	for !f.q.isRunning() {
		time.Sleep(time.Millisecond)
	}
	t.Cleanup(func() {
		if st.gate != nil {
			select {
			case <-st.gate:
			default:
				close(st.gate)
			}
		}
		cancel()
		<-done
	})
	return f
}

func item(id, member string) *internalv1.StartItem {
	return &internalv1.StartItem{RequestId: id, MemberId: member, OrganizationId: "org"}
}

func (f *fixture) reserved() int {
	// Capacity minus what Reserve can still take, measured by the gauge.
	return int(gaugeValue(f.m))
}

func gaugeValue(m *metrics.Metrics) float64 {
	return testGauge(m.SettleReserved)
}

func TestAdmittedStartKeepsItsSettlementReservation(t *testing.T) {
	f := newFixture(t, Config{}, 10, &starter{})
	r, res, err := f.q.Submit(context.Background(), item("a", "m1"))
	if err != nil || !r.Admitted() || res == nil {
		t.Fatalf("%v %v %v", r, res, err)
	}
	if f.reserved() != 1 {
		t.Fatalf("reserved %d", f.reserved())
	}
	res.Release()
	if f.reserved() != 0 {
		t.Fatalf("reserved %d after release", f.reserved())
	}
}

func TestRefusedStartReleasesItsReservation(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   *starter
	}{
		{"capture suspended", &starter{outcome: internalv1.StartOutcome_START_OUTCOME_CAPTURE_SUSPENDED}},
		{"epoch changed", &starter{outcome: internalv1.StartOutcome_START_OUTCOME_EPOCH_CHANGED}},
		{"call failed", &starter{err: errors.New("control plane down")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Config{}, 10, tc.st)
			r, res, err := f.q.Submit(context.Background(), item("a", "m1"))
			if res != nil || (err == nil && r.Admitted()) {
				t.Fatalf("%v %v %v", r, res, err)
			}
			if f.reserved() != 0 {
				t.Fatalf("reserved %d", f.reserved())
			}
		})
	}
}

// blockFirst fills the workers with one blocked batch each so later starts stay queued.
func blockFirst(t *testing.T, f *fixture, workers int) {
	t.Helper()
	for i := range workers {
		go f.q.Submit(context.Background(), item("blocker"+string(rune('0'+i)), "blocker"))
		<-f.st.entered
	}
}

func TestQueueBounds(t *testing.T) {
	t.Run("global capacity", func(t *testing.T) {
		st := &starter{gate: make(chan struct{}), entered: make(chan struct{}, 16)}
		f := newFixture(t, Config{Capacity: 2, PerMember: 2, Workers: 1, Deadline: 5 * time.Second}, 100, st)
		blockFirst(t, f, 1)
		for _, id := range []string{"q1", "q2"} {
			go f.q.Submit(context.Background(), item(id, "m-"+id))
		}
		waitDepth(t, f.q, 2)
		if _, _, err := f.q.Submit(context.Background(), item("over", "m3")); !errors.Is(err, ErrFull) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("per-member share", func(t *testing.T) {
		st := &starter{gate: make(chan struct{}), entered: make(chan struct{}, 16)}
		f := newFixture(t, Config{Capacity: 10, PerMember: 2, Workers: 1, Deadline: 5 * time.Second}, 100, st)
		blockFirst(t, f, 1)
		for _, id := range []string{"q1", "q2"} {
			go f.q.Submit(context.Background(), item(id, "greedy"))
		}
		waitDepth(t, f.q, 2)
		if _, _, err := f.q.Submit(context.Background(), item("q3", "greedy")); !errors.Is(err, ErrMemberShare) {
			t.Fatalf("err %v", err)
		}
		// Another member is not starved by the greedy one.
		done := make(chan error, 1)
		go func() { _, _, err := f.q.Submit(context.Background(), item("polite", "other")); done <- err }()
		waitDepth(t, f.q, 3)
		close(st.gate)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		st := &starter{gate: make(chan struct{}), entered: make(chan struct{}, 16)}
		f := newFixture(t, Config{Workers: 1, Deadline: 50 * time.Millisecond}, 100, st)
		go f.q.Submit(context.Background(), item("blocker", "b"))
		<-st.entered
		start := time.Now()
		_, res, err := f.q.Submit(context.Background(), item("late", "m"))
		if !errors.Is(err, ErrDeadline) || res != nil || time.Since(start) > time.Second {
			t.Fatalf("err %v after %v", err, time.Since(start))
		}
		close(st.gate)
		time.Sleep(20 * time.Millisecond)
		if f.st.sent()["late"] {
			t.Fatal("a start past its deadline was sent")
		}
	})
	t.Run("settlement capacity", func(t *testing.T) {
		f := newFixture(t, Config{}, 1, &starter{})
		_, res, err := f.q.Submit(context.Background(), item("a", "m"))
		if err != nil {
			t.Fatal(err)
		}
		// The only settlement slot is held by an admitted request: a new start is refused
		// rather than admitted without a way to settle it.
		if _, _, err := f.q.Submit(context.Background(), item("b", "m")); !errors.Is(err, ErrSettleCapacity) {
			t.Fatalf("err %v", err)
		}
		res.Release()
		if _, _, err := f.q.Submit(context.Background(), item("c", "m")); err != nil {
			t.Fatal(err)
		}
	})
}

func TestStartOverloadNeverTakesReservedSettlementCapacity(t *testing.T) {
	st := &starter{gate: make(chan struct{}), entered: make(chan struct{}, 64)}
	f := newFixture(t, Config{Capacity: 4, PerMember: 4, Workers: 1, Deadline: 5 * time.Second}, 8, st)
	// Two requests admitted: their settlements are reserved.
	close(st.gate)
	var held []*settleq.Reservation
	for _, id := range []string{"a1", "a2"} {
		_, res, err := f.q.Submit(context.Background(), item(id, "m"))
		if err != nil {
			t.Fatal(err)
		}
		<-st.entered
		held = append(held, res)
	}
	// Now the control plane stalls and starts pile up far past every bound.
	st.gate = make(chan struct{})
	var wg sync.WaitGroup
	var refused atomic.Int64
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, _, err := f.q.Submit(context.Background(), item("x"+string(rune('A'+i)), "m"+string(rune('A'+i%5)))); err != nil {
				refused.Add(1)
			}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	// The admitted requests' settlements are still accepted.
	for _, res := range held {
		if err := f.settle.Enqueue(&internalv1.SettleItem{RequestId: "s"}, res, nil); err != nil {
			t.Fatalf("reserved settlement refused under start overload: %v", err)
		}
	}
	close(st.gate)
	wg.Wait()
	if refused.Load() == 0 {
		t.Fatal("overload refused nothing")
	}
}

func TestCancelledCheckLeavesBeforeAnyWork(t *testing.T) {
	// Both ways in: a check's start, and a speculative one (withdrawable).
	for name, submit := range map[string]func(*Queue, context.Context, *internalv1.StartItem) (Result, *settleq.Reservation, error){
		"Submit": (*Queue).Submit, "SubmitWithdrawable": (*Queue).SubmitWithdrawable,
	} {
		t.Run(name, func(t *testing.T) {
			st := &starter{gate: make(chan struct{}), entered: make(chan struct{}, 16)}
			f := newFixture(t, Config{Workers: 1, Deadline: 5 * time.Second}, 100, st)
			go f.q.Submit(context.Background(), item("blocker", "b"))
			<-st.entered
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() { _, _, err := submit(f.q, ctx, item("cancelled", "m")); errc <- err }()
			waitDepth(t, f.q, 1)
			cancel() // Envoy gave up on the check
			if err := <-errc; !errors.Is(err, context.Canceled) {
				t.Fatalf("err %v", err)
			}
			if f.q.Depth() != 0 || f.reserved() != 1 { // only the blocker's reservation
				t.Fatalf("depth %d reserved %d", f.q.Depth(), f.reserved())
			}
			close(st.gate)
			time.Sleep(20 * time.Millisecond)
			if st.sent()["cancelled"] || f.orphans.Load() != 0 {
				t.Fatalf("a cancelled start reached the control plane (%v) or the orphans (%d)", st.sent(), f.orphans.Load())
			}
			if f.m != nil && testCounter(f.m.StartQueueRejections.WithLabelValues("cancelled")) != 1 {
				t.Fatal("cancellation not counted")
			}
		})
	}
}

// A start whose caller leaves while its call is out may still become durable, or its
// call may fail after the control plane committed (the answer lost): either way it is
// handed to the orphan handler, which settles it (with its snapshot), so it never stays
// pending until an operator's recovery. A caller whose start a worker sends leaves at
// once; one that made the call itself (nothing queued, a call free) leaves when it ends.
func TestStartOfACallerThatLeftIsOrphaned(t *testing.T) {
	for _, tc := range []struct {
		name    string
		callErr error
		own     bool // the caller makes the call itself
	}{
		{"durable, sent by a worker", nil, false},
		{"failed, sent by a worker", errors.New("rpc error: deadline exceeded"), false},
		{"durable, sent by its caller", nil, true},
		{"failed, sent by its caller", errors.New("rpc error: deadline exceeded"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &starter{gate: make(chan struct{}), entered: make(chan struct{}, 16), err: tc.callErr}
			f := newFixture(t, Config{Workers: 1, Deadline: 5 * time.Second}, 100, st)
			if !tc.own {
				// A blocker's call holds the one place, so the start waits in the queue
				// and a worker sends it when the blocker's call ends.
				go f.q.Submit(context.Background(), item("blocker", "b"))
				<-st.entered
			}
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() { _, _, err := f.q.Submit(ctx, item("leaving", "m")); errc <- err }()
			if !tc.own {
				waitDepth(t, f.q, 1)
				st.gate <- struct{}{} // the blocker's call ends; the worker sends "leaving"
			}
			<-st.entered // "leaving" is on its way to the control plane
			cancel()
			if !tc.own {
				if err := <-errc; !errors.Is(err, context.Canceled) {
					t.Fatalf("err %v", err)
				}
			} else {
				select {
				case err := <-errc:
					t.Fatalf("the caller left its own call before it ended: %v", err)
				case <-time.After(20 * time.Millisecond):
				}
			}
			st.gate <- struct{}{} // the call ends: durable, or failed
			if tc.own {
				if err := <-errc; !errors.Is(err, context.Canceled) {
					t.Fatalf("err %v", err)
				}
			}
			deadline := time.Now().Add(2 * time.Second)
			for f.orphans.Load() != 1 {
				if time.Now().After(deadline) {
					t.Fatal("the start of a caller that left was not handed to the orphan handler")
				}
				time.Sleep(time.Millisecond)
			}
			if !st.sent()["leaving"] || (tc.own && len(st.batches) != 1) || (!tc.own && len(st.batches) != 2) {
				t.Fatalf("batches %v", st.batches)
			}
		})
	}
}

// A caller's own call that fails past the deadline (its timeout, typically: the control
// plane may have committed the start all the same) ends as a worker's would: ErrDeadline,
// and the start to the orphan handler. One that fails sooner is an error for the caller,
// as from a worker's call.
func TestOwnCallFailingPastTheDeadlineIsOrphaned(t *testing.T) {
	for _, late := range []bool{true, false} {
		st := &starter{gate: make(chan struct{}), entered: make(chan struct{}, 16), err: errors.New("rpc error: code = DeadlineExceeded")}
		f := newFixture(t, Config{Workers: 1, Deadline: 50 * time.Millisecond}, 100, st)
		errc := make(chan error, 1)
		go func() { _, _, err := f.q.Submit(context.Background(), item("slow", "m")); errc <- err }()
		<-st.entered
		if late {
			time.Sleep(80 * time.Millisecond)
		}
		close(st.gate)
		err := <-errc
		switch {
		case late && (!errors.Is(err, ErrDeadline) || f.orphans.Load() != 1):
			t.Fatalf("past the deadline: err %v, %d orphans; want ErrDeadline and 1", err, f.orphans.Load())
		case !late && (err == nil || errors.Is(err, ErrDeadline) || f.orphans.Load() != 0):
			t.Fatalf("before the deadline: err %v, %d orphans; want the call's error and none", err, f.orphans.Load())
		}
		if f.reserved() != 0 { // released: by the refusal, or by the orphan handler
			t.Fatalf("late=%v: %d settlement slots still reserved", late, f.reserved())
		}
	}
}

// A caller's own call ends by the caller's deadline when it is sooner than the queue's:
// a check must be answered before its proxy gives up on it (package gate). The start,
// which may be durable, is orphaned as any start whose caller left while it was sent.
func TestOwnCallEndsByTheCallersDeadline(t *testing.T) {
	st := &starter{silent: true}
	f := newFixture(t, Config{Workers: 1, Deadline: 5 * time.Second}, 100, st)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, err := f.q.Submit(ctx, item("silent", "m"))
	if took := time.Since(start); err == nil || took > time.Second {
		t.Fatalf("answered %v after %s; want an error at the caller's deadline (100ms), not the queue's (5s)", err, took)
	}
	waitFor := time.Now().Add(5 * time.Second)
	for f.orphans.Load() != 1 || f.reserved() != 0 {
		if time.Now().After(waitFor) {
			t.Fatalf("%d orphans, %d settlement slots reserved; want 1 and 0", f.orphans.Load(), f.reserved())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// expiring is a context whose deadline has passed before its Done channel says so (its
// timer not yet fired): what a caller's context can be for a moment.
type expiring struct{ context.Context }

func (expiring) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

// A start whose caller's deadline passes between Submit's look at ctx and its own call
// is not sent: a call with no time left may or may not leave, and a failed call goes to
// the orphans, which would settle a request never made. It leaves unsent, as from the
// queue, its reservation released.
func TestOwnCallWithNoTimeLeftIsNeverSent(t *testing.T) {
	st := &starter{}
	f := newFixture(t, Config{Workers: 1, Deadline: 5 * time.Second}, 100, st)
	_, res, err := f.q.Submit(expiring{context.Background()}, item("late", "m"))
	if !errors.Is(err, context.DeadlineExceeded) || res != nil {
		t.Fatalf("err %v reservation %v; want context.DeadlineExceeded and none", err, res)
	}
	if len(st.sent()) != 0 || f.orphans.Load() != 0 || f.reserved() != 0 {
		t.Fatalf("sent %v, %d orphans, %d reserved; want nothing", st.sent(), f.orphans.Load(), f.reserved())
	}
	if _, _, err := f.q.Submit(context.Background(), item("next", "m")); err != nil {
		t.Fatalf("the next start: %v (the call's place not given back?)", err)
	}
}

// A start that finds nothing queued and a call free is sent by its caller; the starts
// that arrive while that call is out wait for the worker, which sends them together
// when it ends.
func TestALoneStartIsSentByItsCaller(t *testing.T) {
	st := &starter{gate: make(chan struct{}), entered: make(chan struct{}, 16)}
	f := newFixture(t, Config{Workers: 1, MaxBatch: 64, Deadline: 5 * time.Second}, 100, st)
	ownDone := make(chan struct{})
	go func() {
		defer close(ownDone)
		if r, res, err := f.q.Submit(context.Background(), item("own", "m")); err != nil || !r.Admitted() {
			t.Errorf("%v %v", r, err)
		} else {
			res.Release()
		}
	}()
	<-st.entered
	if f.q.Depth() != 0 {
		t.Fatalf("the lone start was queued (depth %d)", f.q.Depth())
	}
	var wg sync.WaitGroup
	for _, id := range []string{"a", "b", "c"} {
		wg.Go(func() {
			if _, _, err := f.q.Submit(context.Background(), item(id, "m")); err != nil {
				t.Error(err)
			}
		})
	}
	waitDepth(t, f.q, 3)
	close(st.gate)
	<-ownDone
	wg.Wait()
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.batches) != 2 || len(st.batches[0]) != 1 || len(st.batches[1]) != 3 {
		t.Fatalf("batches %v: want the caller's own call, then one of the three that waited", st.batches)
	}
}

func TestStartsAreBatched(t *testing.T) {
	st := &starter{gate: make(chan struct{}), entered: make(chan struct{}, 16)}
	f := newFixture(t, Config{Workers: 1, MaxBatch: 64, Deadline: 5 * time.Second}, 1000, st)
	go f.q.Submit(context.Background(), item("blocker", "b"))
	<-st.entered
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, _, err := f.q.Submit(context.Background(), item("r"+string(rune('A'+i)), "m"+string(rune('A'+i%7)))); err != nil {
				t.Error(err)
			}
		}()
	}
	waitDepth(t, f.q, 40)
	close(st.gate)
	wg.Wait()
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.batches) != 2 || len(st.batches[1]) != 40 {
		t.Fatalf("batches %v", st.batches)
	}
}

func waitDepth(t *testing.T, q *Queue, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for q.Depth() != n {
		if time.Now().After(deadline) {
			t.Fatalf("depth %d, want %d", q.Depth(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// StartWait observes every start that was answered (admitted, refused, or failed in its
// call), from its queuing on: a start held in the queue behind a slow call counts the
// wait. A start that left the queue unsent is not observed.
func TestStartWaitCountsTheQueueAndTheCall(t *testing.T) {
	st := &starter{gate: make(chan struct{}), entered: make(chan struct{}, 16)}
	f := newFixture(t, Config{Workers: 1, Deadline: 5 * time.Second}, 100, st)
	blocked := make(chan struct{})
	go func() { f.q.Submit(context.Background(), item("blocker", "b")); close(blocked) }()
	<-st.entered
	ctx, cancel := context.WithCancel(context.Background())
	go f.q.Submit(ctx, item("leaves", "m"))
	done := make(chan struct{})
	go func() { f.q.Submit(context.Background(), item("waits", "m")); close(done) }()
	waitDepth(t, f.q, 2)
	cancel()
	waitDepth(t, f.q, 1)
	time.Sleep(30 * time.Millisecond) // "waits" waits behind the blocked call
	close(st.gate)
	<-blocked
	<-done
	var m dto.Metric
	if err := f.m.StartWait.Write(&m); err != nil {
		t.Fatal(err)
	}
	h := m.GetHistogram()
	if h.GetSampleCount() != 2 {
		t.Fatalf("%d observations, want 2 (the blocker and the start that waited; not the one that left)", h.GetSampleCount())
	}
	if h.GetSampleSum() < 0.06 {
		t.Fatalf("sum %.3fs: both waited at least 30ms behind the blocked call", h.GetSampleSum())
	}
}

// runHoldingOwnCall runs q and, once it runs, enters a caller's own call ("own", of
// member m), which holds q's one worker until st.gate closes. It returns Run's stop and
// a channel closed when Run returns.
func runHoldingOwnCall(q *Queue, st *starter) (stop context.CancelFunc, ran <-chan struct{}) {
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q.Run(ctx); close(done) }()
	for !q.isRunning() {
		time.Sleep(time.Millisecond)
	}
	go q.Submit(context.Background(), item("own", "m"))
	<-st.entered
	return stop, done
}

// Run returns only once a caller's own call has ended, as it waits for its workers'
// calls: the enforcer settles unreported requests after the queue stops, and must see
// every start the queue answered.
func TestRunWaitsForACallersOwnCall(t *testing.T) {
	st := &starter{gate: make(chan struct{}), entered: make(chan struct{}, 16)}
	m := metrics.Discard()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	q := New(st, settleq.New(settler{}, settleq.Config{Capacity: 10}, m, log), Config{Workers: 1, Deadline: 5 * time.Second}, nil, m, log)
	stop, ran := runHoldingOwnCall(q, st)
	stop()
	select {
	case <-ran:
		t.Fatal("Run returned while a caller's own call was out")
	case <-time.After(30 * time.Millisecond):
	}
	close(st.gate)
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after the call ended")
	}
	if _, _, err := q.Submit(context.Background(), item("after", "m")); !errors.Is(err, ErrClosed) {
		t.Fatalf("a start after Run returned: %v", err)
	}
}

// A start still queued when Run stops is refused with ErrClosed: it was never sent, so
// nothing of it can be durable. Its caller leaving at that moment (as every check does
// while the enforcer stops: cancelled, or past its deadline) must not make an orphan of
// it: the orphan handler settles with the snapshot, and the control plane would record a
// request of no cost, never made, on the member's receipts and coverage. Thousands of
// callers leave while Run refuses their starts, so some leave in the middle of it.
func TestStartRefusedAtCloseIsNeverOrphaned(t *testing.T) {
	const n = 4000
	for trial := range 5 {
		st := &starter{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
		m := metrics.Discard()
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		var neverSent atomic.Int64
		q := New(st, settleq.New(settler{}, settleq.Config{Capacity: 4 * n}, m, log),
			Config{Capacity: 2 * n, PerMember: 2 * n, Deadline: time.Minute, Workers: 1},
			func(it *internalv1.StartItem, res *settleq.Reservation) {
				if !st.sent()[it.GetRequestId()] {
					neverSent.Add(1)
				}
				res.Release()
			}, m, log)
		stop, ran := runHoldingOwnCall(q, st) // holds the one call
		callers, leave := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() { defer wg.Done(); q.Submit(callers, item(fmt.Sprint("queued-", i), "m")) }()
		}
		waitDepth(t, q, n)
		go stop() // Run refuses the queued starts ...
		leave()   // ... while their callers leave
		wg.Wait()
		close(st.gate)
		<-ran
		if k := neverSent.Load(); k > 0 {
			t.Fatalf("trial %d: %d starts never sent were handed to the orphan handler (settled as requests never made)", trial, k)
		}
		if r := testGauge(m.SettleReserved); r != 1 { // the own start's, admitted
			t.Fatalf("trial %d: %v settlement slots reserved, want 1", trial, r)
		}
	}
}

// A withdrawable start (a speculative one, package gate) leaves with its caller only
// while it is queued, before any work (TestCancelledCheckLeavesBeforeAnyWork); once
// sent, its caller gets its answer, and its reservation, whatever became of ctx, and no
// orphan is made of it: the caller voids it.
func TestWithdrawableStartLeavesOnlyWhileQueued(t *testing.T) {
	for _, tc := range []struct {
		name string
		own  bool // the caller makes the call itself
	}{{"sent by a worker", false}, {"sent by its caller", true}} {
		t.Run(tc.name, func(t *testing.T) {
			st := &starter{gate: make(chan struct{}), entered: make(chan struct{}, 16)}
			f := newFixture(t, Config{Workers: 1, Deadline: 5 * time.Second}, 100, st)
			if !tc.own {
				go f.q.Submit(context.Background(), item("blocker", "b"))
				<-st.entered
			}
			ctx, cancel := context.WithCancel(context.Background())
			type answer struct {
				res Result
				r   *settleq.Reservation
				err error
			}
			got := make(chan answer, 1)
			go func() {
				res, r, err := f.q.SubmitWithdrawable(ctx, item("speculative", "m"))
				got <- answer{res, r, err}
			}()
			if !tc.own {
				waitDepth(t, f.q, 1)
				st.gate <- struct{}{} // the blocker's call ends; the worker sends "speculative"
			}
			<-st.entered // on its way to the control plane
			cancel()
			select {
			case a := <-got:
				t.Fatalf("answered before the call ended: %+v", a)
			case <-time.After(20 * time.Millisecond):
			}
			st.gate <- struct{}{}
			a := <-got
			if a.err != nil || !a.res.Admitted() || a.r == nil {
				t.Fatalf("answer %+v, want the recorded start with its reservation", a)
			}
			time.Sleep(20 * time.Millisecond)
			if n := f.orphans.Load(); n != 0 {
				t.Fatalf("%d orphans, want none: the caller has the answer", n)
			}
		})
	}
}

// A start whose Start call fails (the control plane unreachable, or answering
// Unavailable while Postgres is down) was not recorded as far as its check knows, and is
// counted tollgate_enforcer_start_queue_rejections_total{reason="controlplane"} once:
// sent by its own caller, and sent by a worker in a batch with others (each counted).
// Until 2026-12-07 that reason was created at start and named in the help, and never
// counted: an SRE paged by TollgateAccountingUnavailable, told to read the rejections by
// reason, saw none while every start failed. A start still queued when the queue closes
// is counted closed, once, as one refused at submission is.
func TestFailedStartCallsAreCountedOnce(t *testing.T) {
	rejected := func(f *fixture, reason string) float64 {
		return testCounter(f.m.StartQueueRejections.WithLabelValues(reason))
	}
	t.Run("sent by its caller", func(t *testing.T) {
		f := newFixture(t, Config{Workers: 1, Deadline: 5 * time.Second}, 10, &starter{err: errors.New("control plane down")})
		if _, _, err := f.q.Submit(context.Background(), item("a", "m")); err == nil || Reason(err) != "controlplane" {
			t.Fatalf("err %v", err)
		}
		if got := rejected(f, "controlplane"); got != 1 {
			t.Fatalf("rejections{reason=controlplane} = %v, want 1", got)
		}
	})
	t.Run("sent by a worker", func(t *testing.T) {
		st := &starter{gate: make(chan struct{}), entered: make(chan struct{}, 16), err: errors.New("control plane down")}
		f := newFixture(t, Config{Workers: 1, MaxBatch: 64, Deadline: 5 * time.Second}, 100, st)
		blocked := make(chan struct{})
		go func() { f.q.Submit(context.Background(), item("blocker", "b")); close(blocked) }()
		<-st.entered
		var wg sync.WaitGroup
		for i := range 3 {
			wg.Go(func() {
				if _, _, err := f.q.Submit(context.Background(), item(fmt.Sprint("q", i), "m")); Reason(err) != "controlplane" {
					t.Errorf("err %v", err)
				}
			})
		}
		waitDepth(t, f.q, 3)
		close(st.gate)
		<-blocked
		wg.Wait()
		if got := rejected(f, "controlplane"); got != 4 {
			t.Fatalf("rejections{reason=controlplane} = %v, want 4 (the blocker's own call and the batch of 3)", got)
		}
		for _, r := range []string{"deadline", "cancelled", "closed"} {
			if got := rejected(f, r); got != 0 {
				t.Fatalf("rejections{reason=%s} = %v, want 0", r, got)
			}
		}
	})
	t.Run("queued when the queue closes", func(t *testing.T) {
		st := &starter{gate: make(chan struct{}), entered: make(chan struct{}, 16)}
		m := metrics.Discard()
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		q := New(st, settleq.New(settler{}, settleq.Config{Capacity: 10}, m, log), Config{Workers: 1, Deadline: 5 * time.Second}, nil, m, log)
		stop, ran := runHoldingOwnCall(q, st)
		refused := make(chan error, 1)
		go func() { _, _, err := q.Submit(context.Background(), item("queued", "m")); refused <- err }()
		waitDepth(t, q, 1)
		stop()
		if err := <-refused; !errors.Is(err, ErrClosed) {
			t.Fatalf("err %v", err)
		}
		close(st.gate)
		<-ran
		if got := testCounter(m.StartQueueRejections.WithLabelValues("closed")); got != 1 {
			t.Fatalf("rejections{reason=closed} = %v, want 1", got)
		}
	})
}

// Checks abandoned while their starts are out (Envoy's timeout shorter than a slow
// control plane's answers) are many at once, each start handed to the orphan handler
// and settled: their line is logged once per interval, the next saying how many were
// left out, not once per check (an info line per request at a thousand a second).
func TestOrphanedStartsAreLoggedOncePerInterval(t *testing.T) {
	for _, tc := range []struct {
		name, msg string
		callErr   error
	}{
		{"durable", "start became durable after its check was abandoned", nil},
		{"failed", "start of an abandoned check failed", errors.New("rpc error: deadline exceeded")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := &testio.SyncBuffer{}
			st := &starter{gate: make(chan struct{}), entered: make(chan struct{}, 64), err: tc.callErr}
			f := newFixtureLog(t, Config{Workers: 1, Deadline: 5 * time.Second}, 100, st, slog.New(slog.NewTextHandler(logs, nil)))
			const n = 20
			for i := range n {
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() { _, _, _ = f.q.Submit(ctx, item(fmt.Sprint("leaving-", i), "m")); close(done) }()
				<-st.entered
				cancel()
				st.gate <- struct{}{}
				<-done
				deadline := time.Now().Add(2 * time.Second)
				for f.orphans.Load() != int64(i+1) {
					if time.Now().After(deadline) {
						t.Fatalf("start %d was not orphaned", i)
					}
					time.Sleep(time.Millisecond)
				}
			}
			if got := strings.Count(logs.String(), tc.msg); got != 1 {
				t.Fatalf("%d orphaned starts logged %d lines, want 1:\n%s", n, got, logs.String())
			}
		})
	}
}
