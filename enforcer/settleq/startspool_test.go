package settleq_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/enforcer/settleq"
	"github.com/tollgate-dev/tollgate/enforcer/spool"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// failingFirst fails its first n calls (the control plane still down), then settles
// through next.
type failingFirst struct {
	n    int
	next settleq.Settler
}

func (f *failingFirst) Settle(ctx context.Context, in *internalv1.SettleRequest, opts ...grpc.CallOption) (*internalv1.SettleResponse, error) {
	if f.n > 0 { // one worker in fastConfig: no lock needed
		f.n--
		return nil, status.Error(codes.Unavailable, "down")
	}
	return f.next.Settle(ctx, in, opts...)
}

// settling answers every item settled, keeping nothing.
type settling struct{}

func (settling) Settle(_ context.Context, in *internalv1.SettleRequest, _ ...grpc.CallOption) (*internalv1.SettleResponse, error) {
	resp := &internalv1.SettleResponse{Results: make([]*internalv1.SettleResult, len(in.GetItems()))}
	for i, it := range in.GetItems() {
		resp.Results[i] = &internalv1.SettleResult{RequestId: it.GetRequestId(), Outcome: internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED}
	}
	return resp, nil
}

// An enforcer that crashes while Postgres is replaced by a copy without some starts
// (a failover's lost tail) leaves their settlements in its spool; the next process
// cannot know the snapshots the crashed one kept. So a durable start's settlement is
// spooled with its start's snapshot, and a replayed one is sent with it, every time
// it is sent: the replaced database charges it instead of quarantining it. The queue's
// own copy stays without it; a void is spooled without one; a fail-open admission's
// settlement keeps its own.
func TestSettlementsReplayedFromTheSpoolCarryTheirStartsSnapshot(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	dir := t.TempDir()
	sp, _, err := spool.Open(spool.Config{Dir: dir}, metrics.Discard(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	down := &failingFirst{n: 1 << 30}
	q := settleq.New(down, fastConfig(), metrics.Discard(), quiet)
	q.UseSpool(sp, nil)
	durable := admissionSnapshot(1_796_000_000_001)
	lost := &internalv1.SettleItem{RequestId: "req_lost", OrganizationId: "org_a", MemberId: "om_a", InputTokens: 10}
	reserved(t, q, lost, durable)
	reserved(t, q, &internalv1.SettleItem{RequestId: "req_void", OrganizationId: "org_a", MemberId: "om_a", Voided: true}, admissionSnapshot(1_796_000_000_002))
	openMode := admissionSnapshot(1_796_000_000_003)
	openMode.Buckets[0].PolicyId = "unknown"
	if err := q.Enqueue(&internalv1.SettleItem{RequestId: "req_open", OrganizationId: "org_a", MemberId: "om_a", Snapshot: openMode}, nil, nil); err != nil {
		t.Fatal(err)
	}
	if lost.GetSnapshot() != nil {
		t.Errorf("the queued settlement holds its start's snapshot: only its spooled record should")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	q.Drain(ctx) // the control plane never answered: all three stay in the spool
	sp.Close()

	sp2, pending, err := spool.Open(spool.Config{Dir: dir}, metrics.Discard(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer sp2.Close()
	onDisk := map[string]*internalv1.Snapshot{}
	for _, p := range pending {
		onDisk[p.Item.GetRequestId()] = proto.CloneOf(p.Item.GetSnapshot())
	}
	if len(onDisk) != 3 || !proto.Equal(onDisk["req_lost"], durable) || onDisk["req_void"] != nil || !proto.Equal(onDisk["req_open"], openMode) {
		t.Fatalf("spooled snapshots %v, want req_lost's start's, none for the void, req_open's own", onDisk)
	}

	l := newStartLedger("req_void") // the replaced database lost req_lost's start
	q2 := settleq.New(&failingFirst{n: 1, next: l}, fastConfig(), metrics.Discard(), quiet)
	q2.UseSpool(sp2, pending)
	runCtx, stop := context.WithCancel(context.Background())
	defer stop()
	go q2.Run(runCtx)
	waitIdle(t, q2)
	if !l.charged("req_lost") {
		t.Errorf("a replayed settlement whose start the database lost was not charged")
	}
	if sent := l.snapshotsSent("req_lost"); len(sent) != 1 || !proto.Equal(sent[0], durable) {
		t.Errorf("after a failed call the replayed settlement was sent with %v, want its start's snapshot", sent)
	}
	if sent := l.snapshotsSent("req_void"); len(sent) != 1 || sent[0] != nil {
		t.Errorf("the replayed void was sent with %v, want none", sent)
	}
	if sent := l.snapshotsSent("req_open"); len(sent) != 1 || !proto.Equal(sent[0], openMode) || !l.charged("req_open") {
		t.Errorf("the replayed fail-open settlement was sent with %v, want its own snapshot", sent)
	}
}

// BenchmarkEnqueueSpooled measures what spooling a durable start's snapshot with its
// settlement adds to Enqueue (the gateway calls it when a response ends): with-start
// against bare, each settlement reserved, written to a spool and answered.
//
//	go test -run '^$' -bench EnqueueSpooled -benchmem ./enforcer/settleq
func BenchmarkEnqueueSpooled(b *testing.B) {
	for _, tc := range []struct {
		name string
		snap *internalv1.Snapshot
	}{{"bare", nil}, {"with-start", admissionSnapshot(1_796_000_000_000)}} {
		b.Run(tc.name, func(b *testing.B) {
			quiet := slog.New(slog.DiscardHandler)
			sp, _, err := spool.Open(spool.Config{Dir: b.TempDir()}, metrics.Discard(), quiet)
			if err != nil {
				b.Fatal(err)
			}
			defer sp.Close()
			cfg := fastConfig()
			cfg.Capacity = 1 << 30
			q := settleq.New(settling{}, cfg, metrics.Discard(), quiet)
			q.UseSpool(sp, nil)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go q.Run(ctx)
			b.ReportAllocs()
			for b.Loop() {
				res, _ := q.Reserve()
				res.KeepStart(tc.snap)
				_ = q.Enqueue(&internalv1.SettleItem{RequestId: "req_01k7x0e5a2fq1s7b8c9d0e1f2g", OrganizationId: "org_a", MemberId: "om_a"}, res, nil)
			}
			b.StopTimer()
			waitCtx, cancelWait := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancelWait()
			if err := q.WaitIdle(waitCtx); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// The default spool holds the default settle capacity of settlements spooled with
// their start's snapshot: the capacity bounds what waits for the control plane in
// memory, so a crash in a long outage finds all of it on disk. Measured on the spool
// itself, with ids as long as the real ones (window.BucketID's 64 hex digits).
func TestDefaultSpoolHoldsTheDefaultCapacityWithStarts(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	sp := tempSpool(t, metrics.Discard(), quiet)
	q := settleq.New(settling{}, settleq.Config{}, metrics.Discard(), quiet)
	q.UseSpool(sp, nil)
	const (
		n    = 1000
		ulid = "01kbq6e2v8f3m9x4t7c5n0r2dh"
	)
	start := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	snap := &internalv1.Snapshot{Version: 2, AdmittedAtUnixMs: start.UnixMilli() + 86_399_999, TrackingVersion: 1_234_567}
	for _, tf := range window.Timeframes {
		snap.Buckets = append(snap.Buckets, &internalv1.SnapshotBucket{Timeframe: string(tf), WindowStartUnixMs: start.UnixMilli(),
			WindowEndUnixMs: start.AddDate(0, 1, 0).UnixMilli(), BucketId: window.BucketID("org_"+ulid, "om_"+ulid, tf, start),
			PolicyId: "up_" + ulid, PolicyRevision: 12, BaseMicroUsd: 1_500_000_000, HardLimit: true, ReserveInFlight: true})
	}
	for range n {
		res, _ := q.Reserve()
		res.KeepStart(snap)
		item := &internalv1.SettleItem{RequestId: "req_" + ulid, OrganizationId: "org_" + ulid, MemberId: "om_" + ulid,
			Model: longestModel, InputTokens: 123_456, OutputTokens: 12_345, CachedInputTokens: 100_000,
			Complete: true, FinishedAtUnixMs: snap.AdmittedAtUnixMs + 90_000, UpstreamStatus: 200}
		if err := q.Enqueue(item, res, nil); err != nil {
			t.Fatal(err)
		}
	}
	perRecord := sp.Bytes() / n
	if perRecord < 500 {
		t.Fatalf("%d bytes a spooled settlement: its start's snapshot is missing", perRecord)
	}
	if perRecord > settleq.SpoolBytesPerSettlement {
		t.Errorf("%d bytes a spooled settlement, over settleq.SpoolBytesPerSettlement %d: raise it (the chart's spool check and the enforcer's warning use it)",
			perRecord, settleq.SpoolBytesPerSettlement)
	}
	if held := spool.DefaultConfig.MaxBytes / perRecord; held < int64(settleq.DefaultConfig.Capacity) {
		t.Errorf("the default spool holds %d settlements of %d bytes, under the default settle capacity %d",
			held, perRecord, settleq.DefaultConfig.Capacity)
	}
	t.Logf("%d bytes a settlement spooled with its start's snapshot; the default spool holds %d", perRecord, spool.DefaultConfig.MaxBytes/perRecord)
}
