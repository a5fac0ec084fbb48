package inflight

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/pkg/clock"
)

func TestReaperReapsUntilCancelled(t *testing.T) {
	q := &queue{}
	clk := clock.NewManual(time.Date(2026, 9, 16, 12, 0, 0, 0, time.UTC))
	tr := New(q, clk, metrics.Discard(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	tr.Admitted(&Request{ID: "req_old", OrganizationID: "org", MemberID: "om", Durable: true, AdmittedAt: clk.Now()})
	clk.Advance(16 * time.Minute)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Reaper{Tracker: tr, Every: time.Millisecond, After: 15 * time.Minute}.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for tr.Len() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the reaper did not reap")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return on cancel")
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) != 1 || q.items[0].GetRequestId() != "req_old" || q.items[0].GetComplete() {
		t.Fatalf("settled %v", q.items)
	}
}
