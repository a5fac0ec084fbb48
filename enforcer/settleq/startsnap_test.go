package settleq_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/enforcer/settleq"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// startLedger settles as the control plane does when a start may be missing: a
// settlement whose start it has, or that carries a snapshot, is charged once by request
// id; one with neither is quarantined (no_snapshot). It keeps every item it received.
type startLedger struct {
	mu       sync.Mutex
	starts   map[string]bool
	receipts map[string]bool
	received []*internalv1.SettleItem
}

func newStartLedger(starts ...string) *startLedger {
	l := &startLedger{starts: map[string]bool{}, receipts: map[string]bool{}}
	for _, id := range starts {
		l.starts[id] = true
	}
	return l
}

func (l *startLedger) Settle(_ context.Context, in *internalv1.SettleRequest, _ ...grpc.CallOption) (*internalv1.SettleResponse, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	resp := &internalv1.SettleResponse{}
	for _, it := range in.GetItems() {
		id := it.GetRequestId()
		l.received = append(l.received, proto.CloneOf(it))
		r := &internalv1.SettleResult{RequestId: id}
		switch {
		case l.receipts[id]:
			r.Outcome = internalv1.SettleOutcome_SETTLE_OUTCOME_DUPLICATE
		case it.GetVoided():
			r.Outcome = internalv1.SettleOutcome_SETTLE_OUTCOME_VOIDED
		case l.starts[id] || it.GetSnapshot() != nil:
			l.starts[id], l.receipts[id] = true, true
			r.Outcome = internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED
		default:
			r.Outcome = internalv1.SettleOutcome_SETTLE_OUTCOME_NO_SNAPSHOT
		}
		resp.Results = append(resp.Results, r)
	}
	return resp, nil
}

// lose forgets the starts and receipts of ids: a replica promoted without them.
func (l *startLedger) lose(ids ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range ids {
		delete(l.starts, id)
		delete(l.receipts, id)
	}
}

// charged tells whether the ledger holds a receipt of id.
func (l *startLedger) charged(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.receipts[id]
}

// snapshotsSent are the snapshots the items of id carried, in the order sent (nil: none).
func (l *startLedger) snapshotsSent(id string) []*internalv1.Snapshot {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*internalv1.Snapshot
	for _, it := range l.received {
		if it.GetRequestId() == id {
			out = append(out, it.GetSnapshot())
		}
	}
	return out
}

// admissionSnapshot is a version-2 snapshot as the gate makes one for member om_a of
// organization org_a (decision.Decision.Snapshot), admitted at ms.
func admissionSnapshot(ms int64) *internalv1.Snapshot {
	return memberSnapshot("org_a", "om_a", ms)
}

// memberSnapshot is admissionSnapshot for another member.
func memberSnapshot(orgID, memberID string, ms int64) *internalv1.Snapshot {
	s := &internalv1.Snapshot{Version: 2, AdmittedAtUnixMs: ms, TrackingVersion: 7}
	start := time.UnixMilli(1_795_900_000_000)
	for _, tf := range window.Timeframes {
		s.Buckets = append(s.Buckets, &internalv1.SnapshotBucket{Timeframe: string(tf), WindowStartUnixMs: start.UnixMilli(),
			WindowEndUnixMs: 1_796_900_000_000, BucketId: window.BucketID(orgID, memberID, tf, start),
			PolicyId: "up_01m90a2n1pedwt723k5h025e2f", PolicyRevision: 3, BaseMicroUsd: 5_000_000, HardLimit: true})
	}
	return s
}

// reserved enqueues item with a reservation that keeps snap as its start's snapshot.
func reserved(t *testing.T, q *settleq.Queue, item *internalv1.SettleItem, snap *internalv1.Snapshot) {
	t.Helper()
	res, ok := q.Reserve()
	if !ok {
		t.Fatal("no reservation")
	}
	res.KeepStart(snap)
	if err := q.Enqueue(item, res, nil); err != nil {
		t.Fatal(err)
	}
}

// A settlement sent again after a rebuild carries its durable start's snapshot, so
// that a database which lost the start with the receipt charges it instead of
// quarantining it; the first sending carried none. A void carries none, and a
// fail-open admission's settlement carries its own.
func TestSettlementsSentAgainCarryTheirStartsSnapshot(t *testing.T) {
	l := newStartLedger("req_durable", "req_void")
	q := runningWith(t, l, fastConfig(), metrics.Discard(), slog.New(slog.DiscardHandler))
	durableSnap, ownSnap := admissionSnapshot(1_796_000_000_123), admissionSnapshot(1_796_000_000_456)
	cost := int64(100)
	reserved(t, q, &internalv1.SettleItem{RequestId: "req_durable", OrganizationId: "org_a", MemberId: "om_a", UpstreamCostMicroUsd: &cost, Complete: true}, durableSnap)
	reserved(t, q, &internalv1.SettleItem{RequestId: "req_void", OrganizationId: "org_a", MemberId: "om_a", Voided: true}, admissionSnapshot(1))
	reserved(t, q, &internalv1.SettleItem{RequestId: "req_failopen", OrganizationId: "org_a", MemberId: "om_a", Snapshot: ownSnap}, nil)
	waitIdle(t, q)
	if first := l.snapshotsSent("req_durable"); len(first) != 1 || first[0] != nil {
		t.Fatalf("the first sending of a durable start's settlement carried %v, want one without a snapshot", first)
	}

	l.lose("req_durable", "req_void", "req_failopen")
	if n := q.SendAnsweredAgain(); n != 3 {
		t.Fatalf("sent again %d, want 3", n)
	}
	waitIdle(t, q)
	if sent := l.snapshotsSent("req_durable"); len(sent) != 2 || !proto.Equal(sent[1], durableSnap) {
		t.Errorf("sent again with snapshot %v, want the start's %v", sent[len(sent)-1], durableSnap)
	}
	if !l.charged("req_durable") {
		t.Errorf("the settlement whose start was lost was not charged when sent again")
	}
	if sent := l.snapshotsSent("req_void"); len(sent) != 2 || sent[1] != nil {
		t.Errorf("a void was sent again with a snapshot: %v", sent)
	}
	if sent := l.snapshotsSent("req_failopen"); len(sent) != 2 || !proto.Equal(sent[1], ownSnap) {
		t.Errorf("a fail-open settlement was sent again with %v, want its own snapshot", sent)
	}
}

// After a rebuild, the settlements of requests admitted before it carry their start's
// snapshot too (their starts may have been lost with the tail), however long they
// took; those of requests admitted after it, and all of them before any rebuild, do
// not. Without a window nothing is kept, so nothing is attached.
func TestSettlementsOfRequestsAdmittedBeforeARebuildCarryTheirStartsSnapshot(t *testing.T) {
	l := newStartLedger("req_before", "req_after")
	q := runningWith(t, l, fastConfig(), metrics.Discard(), slog.New(slog.DiscardHandler))
	admittedBefore := admissionSnapshot(time.Now().Add(-time.Hour).UnixMilli()) // a long stream
	reserved(t, q, &internalv1.SettleItem{RequestId: "req_before", OrganizationId: "org_a", MemberId: "om_a"}, admittedBefore)
	waitIdle(t, q)
	q.SendAnsweredAgain()
	waitIdle(t, q)
	reserved(t, q, &internalv1.SettleItem{RequestId: "req_lost", OrganizationId: "org_a", MemberId: "om_a"}, admittedBefore) // its start in the lost tail
	admittedAfter := admissionSnapshot(time.Now().Add(2 * time.Second).UnixMilli())
	reserved(t, q, &internalv1.SettleItem{RequestId: "req_after", OrganizationId: "org_a", MemberId: "om_a"}, admittedAfter)
	waitIdle(t, q)
	if sent := l.snapshotsSent("req_lost"); len(sent) != 1 || !proto.Equal(sent[0], admittedBefore) {
		t.Errorf("the settlement of a request admitted before the rebuild was sent with %v, want its start's snapshot", sent)
	}
	if !l.charged("req_lost") {
		t.Errorf("a settlement whose start was lost was not charged")
	}
	if sent := l.snapshotsSent("req_before"); sent[0] != nil {
		t.Errorf("a settlement before any rebuild carried a snapshot")
	}
	if sent := l.snapshotsSent("req_after"); len(sent) != 1 || sent[0] != nil {
		t.Errorf("the settlement of a request admitted after the rebuild carried %v, want none", sent)
	}

	cfg := fastConfig()
	cfg.ResendWindow = -1
	l = newStartLedger()
	q = runningWith(t, l, cfg, metrics.Discard(), slog.New(slog.DiscardHandler))
	q.SendAnsweredAgain()
	reserved(t, q, &internalv1.SettleItem{RequestId: "req_none", OrganizationId: "org_a", MemberId: "om_a"}, admittedBefore)
	waitIdle(t, q)
	if sent := l.snapshotsSent("req_none"); len(sent) != 1 || sent[0] != nil {
		t.Errorf("without a window a settlement carried %v", sent)
	}
}

// The snapshots of every member's requests in the same windows under the same
// policies are kept once: they differ only by their admission instants, tracking
// versions and bucket ids, which each reservation keeps or which are computed again
// from the settlement's member. What is sent is each request's own snapshot.
func TestKeptStartsShareTheirSnapshot(t *testing.T) {
	l := newStartLedger()
	q := runningWith(t, l, fastConfig(), metrics.Discard(), slog.New(slog.DiscardHandler))
	keep := func(s *internalv1.Snapshot) *settleq.Reservation {
		res, ok := q.Reserve()
		if !ok {
			t.Fatal("no reservation")
		}
		res.KeepStart(s)
		return res
	}
	mine, theirs := admissionSnapshot(1_796_000_000_001), memberSnapshot("org_b", "om_b", 1_796_000_000_002)
	theirs.TrackingVersion = 99
	a, b := keep(mine), keep(theirs)
	other := admissionSnapshot(1_796_000_000_003)
	other.Buckets[0].PolicyRevision = 4
	if !settleq.ShareKeptStart(a, b) {
		t.Errorf("two members' snapshots under the same policies and windows are kept twice")
	}
	if settleq.ShareKeptStart(a, keep(other)) {
		t.Errorf("snapshots under different policy revisions are kept as one")
	}
	// Each is sent as it was admitted: a rebuild makes both settlements carry theirs.
	q.SendAnsweredAgain()
	for _, c := range []struct {
		res  *settleq.Reservation
		item *internalv1.SettleItem
		want *internalv1.Snapshot
	}{{a, &internalv1.SettleItem{RequestId: "req_mine", OrganizationId: "org_a", MemberId: "om_a"}, mine},
		{b, &internalv1.SettleItem{RequestId: "req_theirs", OrganizationId: "org_b", MemberId: "om_b"}, theirs}} {
		if err := q.Enqueue(c.item, c.res, nil); err != nil {
			t.Fatal(err)
		}
	}
	waitIdle(t, q)
	if sent := l.snapshotsSent("req_mine"); len(sent) != 1 || !proto.Equal(sent[0], mine) {
		t.Errorf("req_mine was sent with %v, want %v", sent, mine)
	}
	if sent := l.snapshotsSent("req_theirs"); len(sent) != 1 || !proto.Equal(sent[0], theirs) {
		t.Errorf("req_theirs was sent with %v, want %v", sent, theirs)
	}
}

// BenchmarkKeepStart measures what keeping a durable start's snapshot adds to each
// admission (the tracker calls KeepStart on the check's path): time and allocations,
// for a member whose snapshot is already interned.
//
//	go test -run '^$' -bench KeepStart -benchmem ./enforcer/settleq
func BenchmarkKeepStart(b *testing.B) {
	cfg := fastConfig()
	cfg.Capacity = 1 << 30
	q := settleq.New(newStartLedger(), cfg, metrics.Discard(), slog.New(slog.DiscardHandler))
	res, _ := q.Reserve()
	snap := admissionSnapshot(1_796_000_000_000)
	b.ReportAllocs()
	for b.Loop() {
		res.KeepStart(snap)
	}
}

// BenchmarkKeptStartsOfDistinctMembers measures the memory a kept start costs when no
// other request shares its snapshot: every reservation a different member's (ids as
// long as the real ones), so each interns a snapshot of its own. B/member is the heap
// each adds, its 16-byte handle included.
//
//	go test -run '^$' -bench KeptStartsOfDistinctMembers -benchtime 1x ./enforcer/settleq
func BenchmarkKeptStartsOfDistinctMembers(b *testing.B) {
	const members = 20_000
	cfg := fastConfig()
	cfg.Capacity = 1 << 30
	q := settleq.New(newStartLedger(), cfg, metrics.Discard(), slog.New(slog.DiscardHandler))
	start := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	snaps := make([]*internalv1.Snapshot, members)
	for i := range snaps {
		member := fmt.Sprintf("om_01kbq6e2v8f3m9x4t7c5%06d", i)
		s := &internalv1.Snapshot{Version: 2, AdmittedAtUnixMs: start.UnixMilli() + int64(i), TrackingVersion: int64(i)}
		for _, tf := range window.Timeframes {
			s.Buckets = append(s.Buckets, &internalv1.SnapshotBucket{Timeframe: string(tf), WindowStartUnixMs: start.UnixMilli(),
				WindowEndUnixMs: start.AddDate(0, 1, 0).UnixMilli(), BucketId: window.BucketID("org_01kbq6e2v8f3m9x4t7c5n0r2dh", member, tf, start),
				PolicyId: "up_01kbq6e2v8f3m9x4t7c5n0r2dh", PolicyRevision: 3, BaseMicroUsd: 5_000_000, HardLimit: true})
		}
		snaps[i] = s
	}
	var perMember float64
	for b.Loop() {
		kept := make([]*settleq.Reservation, 0, members)
		perMember = heapPer(members, func(i int) {
			res, _ := q.Reserve()
			res.KeepStart(snaps[i])
			kept = append(kept, res)
		})
		for _, r := range kept {
			r.Release()
		}
	}
	b.ReportMetric(perMember, "B/member")
}
