package inflight

import (
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/enforcer/settleq"
	"github.com/tollgate-dev/tollgate/pkg/clock"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

type queue struct {
	mu    sync.Mutex
	items []*internalv1.SettleItem
}

func (q *queue) Enqueue(item *internalv1.SettleItem, _ *settleq.Reservation, _ func(settleq.Result)) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.items = append(q.items, item)
	return nil
}

func TestReapSettlesUnreportedRequestsAsIncomplete(t *testing.T) {
	q := &queue{}
	clk := clock.NewManual(time.Date(2026, 9, 16, 12, 0, 0, 0, time.UTC))
	tr := New(q, clk, metrics.Discard(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	snap := &internalv1.Snapshot{Version: 2}
	tr.Admitted(&Request{ID: "req_durable", OrganizationID: "org", MemberID: "om", Snapshot: snap, Durable: true, AdmittedAt: clk.Now()})
	tr.Admitted(&Request{ID: "req_failopen", OrganizationID: "org", MemberID: "om", Snapshot: snap, AdmittedAt: clk.Now()})
	tr.Admitted(&Request{ID: "req_streaming", OrganizationID: "org", MemberID: "om", Snapshot: snap, Durable: true, AdmittedAt: clk.Now()})
	if !tr.Follow("req_streaming") || tr.Follow("req_unknown") {
		t.Fatal("follow")
	}
	clk.Advance(10 * time.Minute)
	if n := tr.Reap(15 * time.Minute); n != 0 {
		t.Fatalf("reaped %d too early", n)
	}
	clk.Advance(6 * time.Minute)
	if n := tr.Reap(15 * time.Minute); n != 2 {
		t.Fatalf("reaped %d", n)
	}
	byID := map[string]*internalv1.SettleItem{}
	for _, it := range q.items {
		byID[it.GetRequestId()] = it
	}
	if it := byID["req_durable"]; it == nil || it.GetComplete() || it.GetSnapshot() != nil || it.GetMemberId() != "om" {
		t.Fatalf("durable %v", it)
	}
	if it := byID["req_failopen"]; it == nil || it.GetSnapshot() == nil {
		t.Fatalf("fail-open settlement must carry its snapshot: %v", it)
	}
	if byID["req_streaming"] != nil || tr.Len() != 1 {
		t.Fatal("a followed stream was reaped")
	}
	// The stream ends; then a late duplicate report is settled by id only.
	_ = tr.Finish("req_streaming", Usage{Model: "m", InputTokens: 1, OutputTokens: 2, Complete: true}, nil)
	_ = tr.Finish("req_streaming", Usage{}, nil)
	last := q.items[len(q.items)-1]
	if last.GetRequestId() != "req_streaming" || last.GetMemberId() != "" || tr.Len() != 0 {
		t.Fatalf("late report %v", last)
	}
}
