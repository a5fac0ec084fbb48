package inflight

import (
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/enforcer/metrics"
	"github.com/tollgate-dev/tollgate/pkg/clock"
)

// The table holds at most its capacity of unreported requests, whatever the capacity:
// TOLLGATE_ENFORCER_INFLIGHT_CAPACITY is at most the settle capacity minus the start
// capacity so that kept requests' reservations never take the starts' (a table past it
// refuses admissions with start_queue_settle_capacity while it holds requests nobody
// reports).
func TestCapacityBoundsTheWholeTable(t *testing.T) {
	for _, capacity := range []int{1, 10, 36, 1000, 1001} {
		q := &queue{}
		clk := clock.NewManual(time.Date(2026, 9, 16, 12, 0, 0, 0, time.UTC))
		tr := New(q, clk, metrics.Discard(), slog.New(slog.NewTextHandler(io.Discard, nil)))
		tr.SetCapacity(capacity)
		most := 0
		for i := range 20 * capacity {
			tr.Admitted(&Request{ID: fmt.Sprintf("req_%d_%d", capacity, i), OrganizationID: "org", MemberID: "om", Durable: true, AdmittedAt: clk.Now()})
			clk.Advance(time.Millisecond)
			most = max(most, tr.Len())
		}
		if most > capacity {
			t.Errorf("capacity %d: up to %d requests kept", capacity, most)
		}
		q.mu.Lock()
		settled := len(q.items)
		q.mu.Unlock()
		if settled+tr.Len() != 20*capacity {
			t.Fatalf("capacity %d: %d settled and %d kept of %d", capacity, settled, tr.Len(), 20*capacity)
		}
	}
}
