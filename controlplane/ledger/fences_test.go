package ledger_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	at "github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// A start batch of members whose fences the ledger has seen commits in one round trip
// on those fences; when a member's fence has moved meanwhile, its starts are judged
// again against the moved fence, and nothing is recorded on the old one.
func TestFencedStartsFollowAMovedFence(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 1)
	m := ms[0]
	now := e.Clock.Now()
	path := func(p string) int { return int(testutil.ToFloat64(e.Metrics.StartBatches.WithLabelValues(p))) }
	paths := func() [3]int { return [3]int{path("read_first"), path("fenced"), path("fence_moved")} }
	start := func(version int64, want internalv1.StartOutcome, wantPaths [3]int) string {
		t.Helper()
		id := at.ReqID()
		if r := start1(t, e, at.StartItem(id, org, m, now, version)); r.Outcome != want {
			t.Fatalf("start of version %d: %v, want %v", version, r, want)
		}
		if got := paths(); got != wantPaths {
			t.Fatalf("batches (read_first, fenced, fence_moved) %v, want %v", got, wantPaths)
		}
		return id
	}
	moveFence := func(version int64, capture bool) {
		t.Helper()
		if _, err := e.Store.Pool.Exec(ctx, `UPDATE usage_member_tracking SET tracking_version = $2, capture_enabled = $3 WHERE member_id = $1`,
			m, version, capture); err != nil {
			t.Fatal(err)
		}
	}
	recorded := func(id string) int64 {
		t.Helper()
		return e.Int64s(t, `SELECT 'n', count(*) FROM usage_request_starts WHERE request_id = $1`, id)["n"]
	}

	start(0, internalv1.StartOutcome_START_OUTCOME_RECORDED, [3]int{1, 0, 0}) // creates the tracking row: read first
	start(1, internalv1.StartOutcome_START_OUTCOME_RECORDED, [3]int{1, 1, 0}) // on the remembered fence

	// Capture suspended behind the ledger's back (version 2): the remembered fence
	// admits, the locked row does not, so the start is judged again and refused.
	moveFence(2, false)
	if id := start(1, internalv1.StartOutcome_START_OUTCOME_CAPTURE_SUSPENDED, [3]int{2, 2, 1}); recorded(id) != 0 {
		t.Fatal("a start was recorded while capture was suspended")
	}
	// Resumed at version 3: the remembered fence (2, off) refuses, the row has moved
	// again, so the start is judged against version 3: from an older epoch.
	moveFence(3, true)
	start(1, internalv1.StartOutcome_START_OUTCOME_EPOCH_CHANGED, [3]int{3, 3, 2})
	// Now remembered: a stale start is refused and a current one recorded, each in one
	// round trip.
	start(1, internalv1.StartOutcome_START_OUTCOME_EPOCH_CHANGED, [3]int{3, 4, 2})
	start(3, internalv1.StartOutcome_START_OUTCOME_RECORDED, [3]int{3, 5, 2})
	if _, pending, _, _, _ := e.Tracking(t, m); pending != 3 {
		t.Fatalf("pending %d, want the 3 recorded starts", pending)
	}
	at.Check(t, e.Store)
}
