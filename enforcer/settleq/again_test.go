package settleq_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate-dev/tollgate/enforcer/internal/enforcertest"
	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/enforcer/settleq"
	"github.com/tollgate-dev/tollgate/enforcer/spool"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// ledger settles as the control plane does, idempotently by request id, and can lose
// what it recorded, as a Postgres replaced by a replica behind it does. It answers
// "bad" invalid and, while down, fails every call.
type ledger struct {
	mu    sync.Mutex
	has   map[string]int64 // request id -> cost charged
	sent  []string         // every item received, in order
	costs int64            // everything ever charged
	down  bool
}

func newLedger() *ledger { return &ledger{has: map[string]int64{}} }

func (l *ledger) Settle(_ context.Context, in *internalv1.SettleRequest, _ ...grpc.CallOption) (*internalv1.SettleResponse, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.down {
		return nil, status.Error(codes.Unavailable, "down")
	}
	resp := &internalv1.SettleResponse{}
	for _, it := range in.GetItems() {
		id := it.GetRequestId()
		l.sent = append(l.sent, id)
		r := &internalv1.SettleResult{RequestId: id}
		switch _, ok := l.has[id]; {
		case id == "bad":
			r.Outcome = internalv1.SettleOutcome_SETTLE_OUTCOME_INVALID
		case ok:
			r.Outcome = internalv1.SettleOutcome_SETTLE_OUTCOME_DUPLICATE
		default:
			cost := it.GetUpstreamCostMicroUsd()
			l.has[id] = cost
			l.costs += cost
			r.Outcome, r.CostMicroUsd = internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED, cost
		}
		resp.Results = append(resp.Results, r)
	}
	return resp, nil
}

// lose forgets the receipts of ids: a replica promoted without them.
func (l *ledger) lose(ids ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range ids {
		l.costs -= l.has[id]
		delete(l.has, id)
	}
}

func (l *ledger) setDown(down bool) { l.mu.Lock(); l.down = down; l.mu.Unlock() }

func (l *ledger) state() (sent []string, costs int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.sent), l.costs
}

// settleAll enqueues one settlement costing cost per id and waits until every one is
// answered.
func settleAll(t *testing.T, q *settleq.Queue, cost int64, ids ...string) {
	t.Helper()
	for _, id := range ids {
		c := cost
		if err := q.Enqueue(&internalv1.SettleItem{RequestId: id, MemberId: "om_a", UpstreamCostMicroUsd: &c, Complete: true}, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	waitIdle(t, q)
}

func waitIdle(t *testing.T, q *settleq.Queue) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := q.WaitIdle(ctx); err != nil {
		t.Fatalf("the queue never emptied: %v", err)
	}
}

// After a rebuild, every settlement answered in the window is sent again: those the
// ledger still has are answered duplicate and charged nothing twice, the one it lost is
// charged again and named in the log. The first answers' counts are left as they were.
func TestAnsweredSettlementsAreSentAgainAfterARebuild(t *testing.T) {
	l := newLedger()
	reg := prometheus.NewRegistry()
	logs := &logBuf{}
	q := runningWith(t, l, fastConfig(), metrics.New(reg), slog.New(slog.NewTextHandler(logs, nil)))
	settleAll(t, q, 100, "req_a", "req_b", "req_c", "bad")
	if got := enforcertest.Value(reg, "tollgate_enforcer_settle_answered_kept"); got != 3 {
		t.Fatalf("%v settlements kept, want the 3 answered (an invalid one is not)", got)
	}
	l.lose("req_b")
	if n := q.SendAnsweredAgain(); n != 3 {
		t.Fatalf("sent again %d, want 3", n)
	}
	waitIdle(t, q)
	sent, costs := l.state()
	if again := sent[4:]; len(again) != 3 || !slices.Contains(again, "req_a") || !slices.Contains(again, "req_b") || !slices.Contains(again, "req_c") {
		t.Fatalf("sent again %v, want req_a, req_b and req_c once each", again)
	}
	if costs != 300 {
		t.Fatalf("the ledger holds %d, want 300: each settlement charged once", costs)
	}
	for outcome, want := range map[string]float64{"duplicate": 2, "settled": 1, "unanswered": 0} {
		if got := enforcertest.Value(reg, "tollgate_enforcer_settle_sent_again_total", "outcome", outcome); got != want {
			t.Errorf("sent_again{outcome=%q} = %v, want %v", outcome, got, want)
		}
	}
	if got := enforcertest.Value(reg, "tollgate_enforcer_settlements_total", "outcome", "settled"); got != 3 {
		t.Errorf("settlements_total{settled} = %v, want the 3 first answers only", got)
	}
	if !strings.Contains(logs.String(), "had lost is charged again") || !strings.Contains(logs.String(), "req_b") {
		t.Errorf("the settlement the ledger had lost is not named in the log:\n%s", logs)
	}
	// Kept again, from when they were first answered: a second rebuild sends them again.
	if got := enforcertest.Value(reg, "tollgate_enforcer_settle_answered_kept"); got != 3 {
		t.Fatalf("%v kept after they were sent again, want 3", got)
	}
}

// A rebuild the control plane noted as for Redis alone, Postgres found as it was,
// sends nothing again: every answered settlement is in the database. Any other sends
// the window again. Each is counted by what was done.
func TestARebuildThatKeptPostgresSendsNothingAgain(t *testing.T) {
	l := newLedger()
	reg := prometheus.NewRegistry()
	logs := &logBuf{}
	q := runningWith(t, l, fastConfig(), metrics.New(reg), slog.New(slog.NewTextHandler(logs, nil)))
	settleAll(t, q, 100, "req_a", "req_b")
	q.MirrorRebuilt(true)
	waitIdle(t, q)
	if sent, _ := l.state(); len(sent) != 2 {
		t.Fatalf("sent %v after a rebuild that kept Postgres, want the two first sendings only", sent)
	}
	if !strings.Contains(logs.String(), "no settlement is sent again") || !strings.Contains(logs.String(), "answered_in_window=2") {
		t.Errorf("the rebuild that needed nothing sent is not logged with its window:\n%s", logs)
	}
	q.MirrorRebuilt(false)
	waitIdle(t, q)
	if sent, _ := l.state(); len(sent) != 4 {
		t.Fatalf("sent %v after a rebuild that may have lost Postgres, want both sent again", sent)
	}
	for action, want := range map[string]float64{"not_needed": 1, "sent_again": 1} {
		if got := enforcertest.Value(reg, "tollgate_enforcer_mirror_rebuilds_total", "settlements", action); got != want {
			t.Errorf("mirror_rebuilds_total{settlements=%q} = %v, want %v", action, got, want)
		}
	}
}

// Only the settlements answered within the window are kept, at most Capacity of them,
// and none with a negative window.
func TestAnsweredSettlementsAreKeptForTheWindowOnly(t *testing.T) {
	run := func(cfg settleq.Config) (*settleq.Queue, *prometheus.Registry) {
		reg := prometheus.NewRegistry()
		return runningWith(t, newLedger(), cfg, metrics.New(reg), slog.New(slog.DiscardHandler)), reg
	}
	cfg := fastConfig()
	cfg.ResendWindow = time.Second // req_new must be sent again within it, however loaded the machine
	q, _ := run(cfg)
	settleAll(t, q, 1, "req_old1", "req_old2")
	time.Sleep(cfg.ResendWindow + 100*time.Millisecond) // past the window: the two are forgotten
	settleAll(t, q, 1, "req_new")
	if n := q.SendAnsweredAgain(); n != 1 {
		t.Errorf("sent again %d, want only the one answered within the window", n)
	}

	cfg = fastConfig()
	cfg.Capacity = 3
	q, reg := run(cfg)
	for _, id := range []string{"req_1", "req_2", "req_3", "req_4", "req_5"} {
		settleAll(t, q, 1, id) // one at a time: the queue's own capacity is 3 too
	}
	if got := enforcertest.Value(reg, "tollgate_enforcer_settle_answered_kept"); got != 3 {
		t.Errorf("%v kept with a capacity of 3", got)
	}

	cfg = fastConfig()
	cfg.ResendWindow = -1
	q, reg = run(cfg)
	settleAll(t, q, 1, "req_x")
	if n := q.SendAnsweredAgain(); n != 0 || enforcertest.Value(reg, "tollgate_enforcer_settle_answered_kept") != 0 {
		t.Errorf("a negative window kept settlements: sent again %d", n)
	}
}

// Settlements sent again that are still unanswered when the process stops are dropped
// quietly, and counted: each was answered once, so none is logged or counted as lost.
func TestSettlementsSentAgainAreNotLostAtShutdown(t *testing.T) {
	l := newLedger()
	reg := prometheus.NewRegistry()
	logs := &logBuf{}
	q := settleq.New(l, fastConfig(), metrics.New(reg), slog.New(slog.NewTextHandler(logs, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { q.Run(ctx); close(stopped) }()
	settleAll(t, q, 1, "req_a", "req_b")
	l.setDown(true)
	if n := q.SendAnsweredAgain(); n != 2 {
		t.Fatalf("sent again %d, want 2", n)
	}
	cancel()
	<-stopped
	drainCtx, cancelDrain := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancelDrain()
	q.Drain(drainCtx)
	if q.Depth() != 0 {
		t.Fatalf("depth %d after the drain", q.Depth())
	}
	if got := enforcertest.Value(reg, "tollgate_enforcer_settle_sent_again_total", "outcome", "unanswered"); got != 2 {
		t.Errorf("sent_again{unanswered} = %v, want 2", got)
	}
	if got := enforcertest.Value(reg, "tollgate_enforcer_settlements_total", "outcome", "abandoned"); got != 0 || strings.Contains(logs.String(), "NOT DELIVERED") {
		t.Errorf("settlements sent again were reported lost (abandoned %v):\n%s", got, logs)
	}
	if n := q.SendAnsweredAgain(); n != 0 {
		t.Errorf("a drained queue took %d settlements to send again", n)
	}
}

// BenchmarkKeepAnswered measures what keeping an answered settlement for a rebuild
// costs: B/op is its memory (marshaled, plus its share of the slice), for a settlement
// of a durable start as the gateway sends one, and for one carrying its admission
// snapshot (admitted without a durable start).
func BenchmarkKeepAnswered(b *testing.B) {
	cost := int64(1234)
	durable := &internalv1.SettleItem{RequestId: "req_01m90a2nrwf4mt6nfvfxztsr7w", OrganizationId: "org_01m90a2n1pedwt723k5h025e2f",
		MemberId: "om_01m90a2n1pedwt723k5h025e2f", Model: "gpt-4.1-mini-2025-04-14", InputTokens: 1200, OutputTokens: 350, CachedInputTokens: 1024,
		UpstreamCostMicroUsd: &cost, Complete: true, FinishedAtUnixMs: 1_796_000_000_000, UpstreamStatus: 200, UpstreamHost: "api.openai.com"}
	withSnapshot := proto.CloneOf(durable)
	withSnapshot.Snapshot = &internalv1.Snapshot{Version: 2, AdmittedAtUnixMs: 1_796_000_000_000, TrackingVersion: 7}
	for _, tf := range []string{"day", "week", "month"} {
		withSnapshot.Snapshot.Buckets = append(withSnapshot.Snapshot.Buckets, &internalv1.SnapshotBucket{Timeframe: tf,
			WindowStartUnixMs: 1_795_900_000_000, WindowEndUnixMs: 1_796_900_000_000, BucketId: "ub_01m90a2n1pedwt723k5h025e2f",
			PolicyId: "up_01m90a2n1pedwt723k5h025e2f", PolicyRevision: 3, BaseMicroUsd: 5_000_000, HardLimit: true})
	}
	for _, c := range []struct {
		name string
		item *internalv1.SettleItem
	}{{"durable", durable}, {"snapshot", withSnapshot}} {
		b.Run(c.name, func(b *testing.B) {
			cfg := fastConfig()
			cfg.Capacity = b.N + 1
			q := settleq.New(newLedger(), cfg, metrics.Discard(), slog.New(slog.DiscardHandler))
			b.ReportAllocs()
			for b.Loop() {
				q.KeepAnswered(c.item)
			}
			b.ReportMetric(float64(proto.Size(c.item)), "marshaled-bytes")
		})
	}
}

// held is a ledger whose first Settle call waits until release is closed.
type held struct {
	*ledger
	started chan struct{}
	release chan struct{}
	once    sync.Once
}

func (h *held) Settle(ctx context.Context, in *internalv1.SettleRequest, opts ...grpc.CallOption) (*internalv1.SettleResponse, error) {
	first := false
	h.once.Do(func() { first = true })
	if first {
		close(h.started)
		<-h.release
	}
	return h.ledger.Settle(ctx, in, opts...)
}

// A window of settlements sent again does not hold up a live one: a settlement due
// while the first batch of them is out goes in the very next call. (With a linger, a
// live one waits for its linger as before, and batches sent again fill that wait.)
func TestSettlementsSentAgainGoAfterTheLiveOnes(t *testing.T) {
	l := newLedger()
	cfg := fastConfig() // MaxBatch 8, one worker
	cfg.Linger = -1     // due at once
	var ids []string
	for i := range 3 * cfg.MaxBatch {
		ids = append(ids, fmt.Sprintf("req_%02d", i))
	}
	h := &held{ledger: l, started: make(chan struct{}), release: make(chan struct{})}
	q := runningWith(t, h, cfg, metrics.Discard(), slog.New(slog.DiscardHandler))
	for _, id := range ids {
		q.KeepAnswered(&internalv1.SettleItem{RequestId: id, MemberId: "om_a"})
	}
	if n := q.SendAnsweredAgain(); n != len(ids) {
		t.Fatalf("sent again %d, want %d", n, len(ids))
	}
	<-h.started // the first batch sent again is out
	cost := int64(1)
	if err := q.Enqueue(&internalv1.SettleItem{RequestId: "req_live", MemberId: "om_a", UpstreamCostMicroUsd: &cost, Complete: true}, nil, nil); err != nil {
		t.Fatal(err)
	}
	close(h.release)
	waitIdle(t, q)
	after, _ := l.state()
	if i := slices.Index(after, "req_live"); i != cfg.MaxBatch {
		t.Fatalf("the live settlement went %dth of %d calls' items (%v), want right after the first batch sent again (%d)", i, len(after), after, cfg.MaxBatch)
	}
}

// A settlement sent again after a rebuild is in the spool until it is answered again:
// each was acknowledged there when first answered, and a process that dies before the
// second answer (a crash, a shutdown whose drain ran out, in the same outage that
// replaced Postgres) leaves it to the next start, which sends it again; one the
// database lost is charged. Answered, it is acknowledged again and the next start sends
// nothing. Until 2026-12-07 they were never spooled: such a restart lost what the
// replaced database had lost.
func TestSettlementsSentAgainSurviveARestart(t *testing.T) {
	dir := t.TempDir()
	quiet := slog.New(slog.DiscardHandler)
	openSpool := func() (*spool.Spool, []spool.Pending) {
		t.Helper()
		sp, pending, err := spool.Open(spool.Config{Dir: dir}, metrics.Discard(), quiet)
		if err != nil {
			t.Fatal(err)
		}
		return sp, pending
	}
	l := newLedger()
	sp, _ := openSpool()
	q := settleq.New(l, fastConfig(), metrics.Discard(), quiet)
	q.UseSpool(sp, nil)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { q.Run(ctx); close(stopped) }()
	settleAll(t, q, 100, "req_a", "req_b")
	// The failover lost req_b, and the control plane is not answering yet.
	l.lose("req_b")
	l.setDown(true)
	if n := q.SendAnsweredAgain(); n != 2 {
		t.Fatalf("sent again %d, want 2", n)
	}
	// The process dies (no drain; Close only lets the lock go, as the kernel would).
	cancel()
	<-stopped
	sp.Close()

	sp2, pending := openSpool()
	ids := make([]string, 0, len(pending))
	for _, p := range pending {
		ids = append(ids, p.Item.GetRequestId())
	}
	if !slices.Equal(ids, []string{"req_a", "req_b"}) {
		sp2.Close()
		t.Fatalf("the next start replays %v, want [req_a req_b]: settlements sent again were not in the spool", ids)
	}
	l.setDown(false)
	reg := prometheus.NewRegistry()
	q2 := runningWith(t, l, fastConfig(), metrics.New(reg), quiet)
	q2.UseSpool(sp2, pending)
	waitIdle(t, q2)
	if _, costs := l.state(); costs != 200 {
		t.Fatalf("the ledger holds %d, want 200: req_b, lost by the failover, charged again and nothing twice", costs)
	}
	sp2.Close()
	sp3, pending := openSpool()
	defer sp3.Close()
	if len(pending) != 0 {
		t.Fatalf("answered settlements replayed again at the next start: %d", len(pending))
	}

	// Answered in the same process: acknowledged, and not replayed by the next start.
	q3 := runningWith(t, l, fastConfig(), metrics.Discard(), quiet)
	q3.UseSpool(sp3, nil)
	settleAll(t, q3, 100, "req_c")
	if n := q3.SendAnsweredAgain(); n != 1 {
		t.Fatalf("sent again %d, want 1", n)
	}
	waitIdle(t, q3)
	sp3.Close()
	sp4, pending := openSpool()
	defer sp4.Close()
	if len(pending) != 0 {
		t.Fatalf("a settlement sent again and answered is replayed at the next start")
	}
}
