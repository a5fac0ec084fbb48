package settleq_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tollgate-dev/tollgate/enforcer/cpclient"
	"github.com/tollgate-dev/tollgate/enforcer/internal/enforcertest"
	"github.com/tollgate-dev/tollgate/enforcer/internal/fakecp"
	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/enforcer/settleq"
	"github.com/tollgate-dev/tollgate/internal/testredis"
	"github.com/tollgate-dev/tollgate/pkg/clock"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }
func (l *logBuf) String() string              { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

func fastConfig() settleq.Config {
	return settleq.Config{Capacity: 100, MaxBatch: 8, Workers: 1, CallTimeout: time.Second, MinBackoff: 5 * time.Millisecond, MaxBackoff: 40 * time.Millisecond}
}

func TestSettleRetriesUntilTheControlPlaneRecovers(t *testing.T) {
	rdb, layout := testredis.New(t)
	clk := clock.NewManual(enforcertest.Start)
	cp := fakecp.New(t, rdb, layout, clk)
	cp.AddMember("org_a", "om_a")
	snap := &internalv1.Snapshot{Version: 2, Buckets: []*internalv1.SnapshotBucket{
		{Timeframe: "day", WindowStartUnixMs: window.Of(window.Day, enforcertest.Start).Start.UnixMilli()}}}
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	cc, err := cpclient.Dial(cp.Addr, cpclient.Options{Token: fakecp.Token}, m)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	logs := &logBuf{}
	q := settleq.New(cpclient.New(cc), fastConfig(), m, slog.New(slog.NewTextHandler(logs, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go q.Run(ctx)

	cp.Fail("Settle", true)
	results := make(chan settleq.Result, 20)
	for i := range 20 {
		res, ok := q.Reserve()
		if !ok {
			t.Fatal("no capacity")
		}
		cost := int64(10)
		id := "req_" + string(rune('a'+i))
		if err := q.Enqueue(&internalv1.SettleItem{RequestId: id, MemberId: "om_a", Snapshot: snap, UpstreamCostMicroUsd: &cost, Complete: true},
			res, func(r settleq.Result) { results <- r }); err != nil {
			t.Fatal(err)
		}
	}
	enforcertest.WaitFor(t, "several failed attempts", func() bool { return cp.CallCount("Settle") >= 6 })
	if q.Depth() != 20 || len(results) != 0 {
		t.Fatalf("depth %d, results %d while failing", q.Depth(), len(results))
	}
	cp.Fail("Settle", false)
	for range 20 {
		select {
		case r := <-results:
			if r.Err != nil || r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED || r.CostMicroUSD != 10 || r.CostBasis != "upstream_cost" {
				t.Fatalf("result %+v", r)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("settlements not delivered after recovery")
		}
	}
	if got := cp.Spend("om_a", window.Day); got != 200 {
		t.Fatalf("charged %d, want every settlement exactly once", got)
	}
	if enforcertest.Value(reg, "tollgate_enforcer_settle_retries_total") == 0 ||
		enforcertest.Value(reg, "tollgate_enforcer_settlements_total", "outcome", "settled") != 20 ||
		enforcertest.Value(reg, "tollgate_enforcer_settled_cost_basis_total", "basis", "upstream_cost") != 20 ||
		enforcertest.Value(reg, "tollgate_enforcer_settlement_lag_seconds") != 20 {
		t.Fatal("metrics")
	}
	if q.Depth() != 0 || enforcertest.Value(reg, "tollgate_enforcer_settle_queue_depth") != 0 || enforcertest.Value(reg, "tollgate_enforcer_settle_reserved") != 0 {
		t.Fatal("queue not empty")
	}
}

// scripted answers Settle calls from a script of errors, then settles.
type scripted struct {
	mu    sync.Mutex
	errs  []error
	calls [][]string
}

func (s *scripted) Settle(_ context.Context, in *internalv1.SettleRequest, _ ...grpc.CallOption) (*internalv1.SettleResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for _, it := range in.GetItems() {
		ids = append(ids, it.GetRequestId())
	}
	s.calls = append(s.calls, ids)
	if len(s.errs) > 0 {
		err := s.errs[0]
		s.errs = s.errs[1:]
		return nil, err
	}
	resp := &internalv1.SettleResponse{}
	for _, id := range ids {
		if id == "bad" {
			return nil, status.Error(codes.InvalidArgument, "bad item")
		}
		resp.Results = append(resp.Results, &internalv1.SettleResult{RequestId: id, Outcome: internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED})
	}
	return resp, nil
}

func TestABatchRefusedAsAWholeIsRetriedItemByItem(t *testing.T) {
	s := &scripted{}
	m := metrics.Discard()
	q := settleq.New(s, fastConfig(), m, slog.New(slog.NewTextHandler(&logBuf{}, nil)))
	got := map[string]settleq.Result{}
	var mu sync.Mutex
	for _, id := range []string{"a", "bad", "c"} {
		_ = q.Enqueue(&internalv1.SettleItem{RequestId: id}, nil, func(r settleq.Result) { mu.Lock(); got[id] = r; mu.Unlock() })
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go q.Run(ctx)
	enforcertest.WaitFor(t, "all answered", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 3 })
	if got["a"].Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED || got["c"].Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED ||
		got["bad"].Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_INVALID {
		t.Fatalf("%+v", got)
	}
}

func TestOverflowWithoutReservationIsLoudAndCounted(t *testing.T) {
	cfg := fastConfig()
	cfg.Capacity = 2
	reg := prometheus.NewRegistry()
	logs := &logBuf{}
	q := settleq.New(&scripted{}, cfg, metrics.New(reg), slog.New(slog.NewTextHandler(logs, nil)))
	r1, _ := q.Reserve()
	r2, _ := q.Reserve()
	if _, ok := q.Reserve(); ok {
		t.Fatal("reserved past capacity")
	}
	if err := q.Enqueue(&internalv1.SettleItem{RequestId: "req_unreserved"}, nil, nil); !errors.Is(err, settleq.ErrFull) {
		t.Fatalf("err %v", err)
	}
	if !strings.Contains(logs.String(), "SETTLEMENT LOST") || !strings.Contains(logs.String(), "req_unreserved") ||
		enforcertest.Value(reg, "tollgate_enforcer_settlements_total", "outcome", "overflow") != 1 {
		t.Fatalf("overflow not loud: %s", logs.String())
	}
	// Reserved ones are always accepted.
	for _, r := range []*settleq.Reservation{r1, r2} {
		if err := q.Enqueue(&internalv1.SettleItem{RequestId: "req_reserved"}, r, nil); err != nil {
			t.Fatal(err)
		}
	}
}

func TestDrainGivesUpLoudlyAtTheDeadline(t *testing.T) {
	down := status.Error(codes.Unavailable, "down")
	s := &scripted{errs: []error{down, down, down, down, down, down, down, down, down, down, down, down, down, down, down, down, down, down, down, down,
		down, down, down, down, down, down, down, down, down, down, down, down, down, down, down, down, down, down, down, down}}
	reg := prometheus.NewRegistry()
	logs := &logBuf{}
	q := settleq.New(s, fastConfig(), metrics.New(reg), slog.New(slog.NewTextHandler(logs, nil)))
	var res settleq.Result
	_ = q.Enqueue(&internalv1.SettleItem{RequestId: "req_stuck", MemberId: "om_x"}, nil, func(r settleq.Result) { res = r })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	q.Drain(ctx)
	if !errors.Is(res.Err, settleq.ErrAbandoned) || q.Depth() != 0 {
		t.Fatalf("result %+v depth %d", res, q.Depth())
	}
	if !strings.Contains(logs.String(), "SETTLEMENT NOT DELIVERED") || !strings.Contains(logs.String(), "req_stuck") ||
		enforcertest.Value(reg, "tollgate_enforcer_settlements_total", "outcome", "abandoned") != 1 {
		t.Fatalf("abandonment not loud: %s", logs.String())
	}
}

func TestSettleGivesUpAfterMaxAge(t *testing.T) {
	cfg := fastConfig()
	cfg.MaxAge = 30 * time.Millisecond
	down := status.Error(codes.Unavailable, "down")
	errs := make([]error, 1000)
	for i := range errs {
		errs[i] = down
	}
	reg := prometheus.NewRegistry()
	q := settleq.New(&scripted{errs: errs}, cfg, metrics.New(reg), slog.New(slog.NewTextHandler(&logBuf{}, nil)))
	done := make(chan settleq.Result, 1)
	_ = q.Enqueue(&internalv1.SettleItem{RequestId: "req_old"}, nil, func(r settleq.Result) { done <- r })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go q.Run(ctx)
	select {
	case r := <-done:
		if !errors.Is(r.Err, settleq.ErrAbandoned) {
			t.Fatalf("%+v", r)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("never gave up")
	}
}

// running is a queue over s with cfg, its workers running until the test ends.
func running(t *testing.T, s *scripted, cfg settleq.Config) *settleq.Queue {
	return runningWith(t, s, cfg, metrics.Discard(), slog.New(slog.DiscardHandler))
}

// runningWith is running over any Settler, with the metrics and log given.
func runningWith(t *testing.T, s settleq.Settler, cfg settleq.Config, m *metrics.Metrics, log *slog.Logger) *settleq.Queue {
	q := settleq.New(s, cfg, m, log)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go q.Run(ctx)
	return q
}

// Items arriving within the linger share one call; a full batch does not wait; a lone
// item goes once its linger has passed.
func TestLingerGathersItemsIntoOneCall(t *testing.T) {
	s := &scripted{}
	cfg := fastConfig()
	cfg.Linger = 200 * time.Millisecond
	q := running(t, s, cfg)
	done := make(chan settleq.Result, 20)
	enqueue := func(id string) {
		if err := q.Enqueue(&internalv1.SettleItem{RequestId: id}, nil, func(r settleq.Result) { done <- r }); err != nil {
			t.Fatal(err)
		}
	}
	calls := func() [][]string {
		s.mu.Lock()
		defer s.mu.Unlock()
		return append([][]string(nil), s.calls...)
	}

	// A full batch (MaxBatch 8) goes at once, well before the linger ends.
	began := time.Now()
	for i := range 8 {
		enqueue(fmt.Sprintf("full_%d", i))
	}
	for range 8 {
		<-done
	}
	if d := time.Since(began); d >= cfg.Linger {
		t.Fatalf("a full batch waited %v", d)
	}
	// Three items a little apart share one call, sent after the linger.
	began = time.Now()
	for i := range 3 {
		enqueue(fmt.Sprintf("slow_%d", i))
		time.Sleep(10 * time.Millisecond)
	}
	for range 3 {
		<-done
	}
	if d := time.Since(began); d < cfg.Linger {
		t.Fatalf("a partial batch went after %v, before the linger", d)
	}
	got := calls()
	if len(got) != 2 || len(got[0]) != 8 || len(got[1]) != 3 {
		t.Fatalf("calls %v, want one of 8 then one of 3", got)
	}
}

// Settlements that join a lingering batch do not wake the worker (it already sleeps
// until the oldest one's linger ends): the first of a batch and the one that fills it
// do. Before, every settlement woke it, a goroutine switch per proxied request.
func TestLingeringSettlementsDoNotWakeTheWorker(t *testing.T) {
	s := &scripted{}
	cfg := fastConfig()
	cfg.Linger = time.Hour
	q := running(t, s, cfg)
	done := make(chan settleq.Result, 20)
	for i := range 7 {
		if err := q.Enqueue(&internalv1.SettleItem{RequestId: fmt.Sprintf("r_%d", i)}, nil, func(r settleq.Result) { done <- r }); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond) // let a woken worker run
	}
	if n := q.Signalled(); n != 1 {
		t.Fatalf("7 settlements of one lingering batch woke the worker %d times, want 1 (the first)", n)
	}
	select {
	case <-done:
		t.Fatal("a batch of 7 (MaxBatch 8) went before its linger")
	default:
	}
	// The eighth fills the batch: it wakes the worker, and the batch goes at once.
	if err := q.Enqueue(&internalv1.SettleItem{RequestId: "r_7"}, nil, func(r settleq.Result) { done <- r }); err != nil {
		t.Fatal(err)
	}
	awaitResults(t, done, 8, "the full batch was not sent")
	if n := q.Signalled(); n != 2 {
		t.Fatalf("the worker was woken %d times, want 2", n)
	}
}

// A settlement someone waits for (EnqueueNow) does not linger: it goes at once, and
// takes the lingering ones with it in the same call.
func TestEnqueueNowDoesNotLinger(t *testing.T) {
	s := &scripted{}
	cfg := fastConfig()
	cfg.Linger = time.Hour
	q := running(t, s, cfg)
	done := make(chan settleq.Result, 4)
	for _, id := range []string{"lingering_1", "lingering_2"} {
		if err := q.Enqueue(&internalv1.SettleItem{RequestId: id}, nil, func(r settleq.Result) { done <- r }); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.EnqueueNow(&internalv1.SettleItem{RequestId: "void", Voided: true}, nil, func(r settleq.Result) { done <- r }); err != nil {
		t.Fatal(err)
	}
	awaitResults(t, done, 3, "an urgent settlement lingered (the linger is an hour)")
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.calls) != 1 || len(s.calls[0]) != 3 {
		t.Fatalf("calls %v, want one of all three", s.calls)
	}
}

// What the enforcer learned on the way goes to the control plane as it is, and the
// receipt's cost basis and price source come back to the caller.
func TestSettleCarriesEstimatesAndCostBasis(t *testing.T) {
	rdb, layout := testredis.New(t)
	clk := clock.NewManual(enforcertest.Start)
	cp := fakecp.New(t, rdb, layout, clk)
	cp.AddMember("org_a", "om_a")
	cp.SetPrice("m", 2, 3)
	snap := &internalv1.Snapshot{Version: 2, Buckets: []*internalv1.SnapshotBucket{
		{Timeframe: "day", WindowStartUnixMs: window.Of(window.Day, enforcertest.Start).Start.UnixMilli()}}}
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	cc, err := cpclient.Dial(cp.Addr, cpclient.Options{Token: fakecp.Token}, m)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	q := settleq.New(cpclient.New(cc), fastConfig(), m, slog.New(slog.NewTextHandler(&logBuf{}, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go q.Run(ctx)
	results := make(chan settleq.Result, 2)
	for _, it := range []*internalv1.SettleItem{
		{RequestId: "req_est", MemberId: "om_a", Snapshot: snap, Model: "m", InputTokens: 10, OutputTokens: 1, UsageEstimated: true},
		{RequestId: "req_norec", MemberId: "om_a", Snapshot: snap, AdmittedWithoutRecord: true},
	} {
		if err := q.Enqueue(it, nil, func(r settleq.Result) { results <- r }); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]settleq.Result{}
	for range 2 {
		select {
		case r := <-results:
			got[r.CostBasis] = r
		case <-time.After(5 * time.Second):
			t.Fatal("not settled")
		}
	}
	if r := got["estimate"]; r.CostMicroUSD != 23 || r.PriceSource != "organization" {
		t.Fatalf("estimated: %+v (all %+v)", r, got)
	}
	if _, ok := got["none"]; !ok {
		t.Fatalf("results %+v", got)
	}
	if it := cp.Receipt("req_est").Item; !it.GetUsageEstimated() {
		t.Fatalf("sent %v", it)
	}
	if it := cp.Receipt("req_norec").Item; !it.GetAdmittedWithoutRecord() {
		t.Fatalf("sent %v", it)
	}
	if enforcertest.Value(reg, "tollgate_enforcer_settled_cost_basis_total", "basis", "estimate") != 1 ||
		enforcertest.Value(reg, "tollgate_enforcer_settled_cost_basis_total", "basis", "none") != 1 {
		t.Fatal("cost basis not counted")
	}
}

// selective settles only the items it was told to; the others get no answer and are
// retried.
type selective struct {
	mu      sync.Mutex
	allowed map[string]bool
}

func (s *selective) allow(id string) { s.mu.Lock(); s.allowed[id] = true; s.mu.Unlock() }

func (s *selective) Settle(_ context.Context, in *internalv1.SettleRequest, _ ...grpc.CallOption) (*internalv1.SettleResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	resp := &internalv1.SettleResponse{}
	for _, it := range in.GetItems() {
		if s.allowed[it.GetRequestId()] {
			resp.Results = append(resp.Results, &internalv1.SettleResult{RequestId: it.GetRequestId(), Outcome: internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED})
		}
	}
	return resp, nil
}

// The backlog gauges: how many settlements wait and how long the oldest has waited,
// which moves on to the next one once the oldest is settled, and is 0 when none waits.
func TestBacklogGaugesShowTheOldestUnsettled(t *testing.T) {
	s := &selective{allowed: map[string]bool{}}
	reg := prometheus.NewRegistry()
	q := settleq.New(s, fastConfig(), metrics.New(reg), slog.New(slog.NewTextHandler(&logBuf{}, nil)))
	age := func() float64 { return enforcertest.Value(reg, "tollgate_enforcer_settle_queue_oldest_age_seconds") }
	depth := func() float64 { return enforcertest.Value(reg, "tollgate_enforcer_settle_queue_depth") }
	if age() != 0 || depth() != 0 {
		t.Fatalf("empty queue: age %v, depth %v", age(), depth())
	}
	done := make(chan string, 2)
	enqueue := func(id string) {
		if err := q.Enqueue(&internalv1.SettleItem{RequestId: id}, nil, func(settleq.Result) { done <- id }); err != nil {
			t.Fatal(err)
		}
	}
	settled := func() string {
		select {
		case id := <-done:
			return id
		case <-time.After(5 * time.Second):
			t.Fatal("not settled")
			return ""
		}
	}
	tOld := time.Now()
	enqueue("req_old")
	time.Sleep(60 * time.Millisecond)
	tNew := time.Now()
	enqueue("req_new")
	if a := age(); a < 0.06 || a > time.Since(tOld).Seconds() || depth() != 2 {
		t.Fatalf("two waiting: age %v (want the first one's, >= 60ms), depth %v", a, depth())
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go q.Run(ctx)
	s.allow("req_old")
	if id := settled(); id != "req_old" {
		t.Fatalf("%s settled first", id)
	}
	if a := age(); a > time.Since(tNew).Seconds() || depth() != 1 {
		t.Fatalf("the oldest settled: age %v, want the second one's (at most %v); depth %v", a, time.Since(tNew).Seconds(), depth())
	}
	s.allow("req_new")
	settled()
	if err := q.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	if age() != 0 || depth() != 0 {
		t.Fatalf("all settled: age %v, depth %v", age(), depth())
	}
}

// awaitResults waits (up to 5 seconds each) for n results on done, failing with why.
func awaitResults(t *testing.T, done <-chan settleq.Result, n int, why string) {
	t.Helper()
	for range n {
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal(why)
		}
	}
}

// A settlement enqueued after the drain finished (a speculative start's late void, a
// gateway handler that unwound past the shutdown's wait) has nobody left to send it:
// it is given up loudly, named for reconciliation, as the drain's own are, never left
// in a queue that dies with the process without a word.
func TestEnqueueAfterTheDrainIsGivenUpLoudly(t *testing.T) {
	reg := prometheus.NewRegistry()
	logs := &logBuf{}
	q := settleq.New(&scripted{}, fastConfig(), metrics.New(reg), slog.New(slog.NewTextHandler(logs, nil)))
	q.Drain(context.Background())
	var res settleq.Result
	err := q.Enqueue(&internalv1.SettleItem{RequestId: "req_late", MemberId: "om_x"}, nil, func(r settleq.Result) { res = r })
	if !errors.Is(err, settleq.ErrAbandoned) || !errors.Is(res.Err, settleq.ErrAbandoned) || q.Depth() != 0 {
		t.Fatalf("enqueue after the drain: err %v, result %+v, depth %d; want ErrAbandoned and nothing queued", err, res, q.Depth())
	}
	if !strings.Contains(logs.String(), "SETTLEMENT NOT DELIVERED") || !strings.Contains(logs.String(), "req_late") ||
		enforcertest.Value(reg, "tollgate_enforcer_settlements_total", "outcome", "abandoned") != 1 {
		t.Fatalf("a settlement enqueued after the drain was not given up loudly: %s", logs.String())
	}
}

// A drain against a control plane that answers every call sends the whole queue, batch
// after batch: the pause between its calls is for a batch that failed (it would
// otherwise spin on the retry list), never after one that was answered. Until
// 2026-12-07 it paused MinBackoff after every answered batch while more were queued:
// the drain sent at most Workers batches per MinBackoff (5,120 settlements a second by
// default), and what the shutdown's deadline left was given up, or kept in a spool that
// a deleted pod's emptyDir takes with it.
func TestDrainDoesNotPauseAfterAnAnsweredBatch(t *testing.T) {
	s := &scripted{}
	reg := prometheus.NewRegistry()
	cfg := fastConfig()
	cfg.MinBackoff, cfg.MaxBackoff = time.Hour, time.Hour // a pause outlasts the drain's deadline
	q := settleq.New(s, cfg, metrics.New(reg), slog.New(slog.NewTextHandler(&logBuf{}, nil)))
	const n = 3 * 8 // three full batches
	for i := range n {
		if err := q.Enqueue(&internalv1.SettleItem{RequestId: fmt.Sprintf("req_%d", i), MemberId: "om_x"}, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // a bound, not a measure
	defer cancel()
	q.Drain(ctx)
	if got := enforcertest.Value(reg, "tollgate_enforcer_settlements_total", "outcome", "settled"); got != n {
		t.Fatalf("the drain settled %v of %d (abandoned %v) in %d calls", got, n,
			enforcertest.Value(reg, "tollgate_enforcer_settlements_total", "outcome", "abandoned"), len(s.calls))
	}
}
