package reconcile_test

import (
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/controlplane/accounting"
	"github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	"github.com/tollgate-dev/tollgate/controlplane/reconcile"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// The ledger takes a snapshot admitted up to accounting.MaxClockSkew after its own clock
// (an enforcer's clock a little ahead). A settlement of such a snapshot that the fence
// quarantined (epoch_changed, capture_suspended) carries an admission instant after the
// record was first seen; reconciliation demands exactly that instant as proof, and
// refused it as "admitted after the settlement was seen": the record could never be
// reconciled, whatever proof the operator gave.
func TestReconcileAcceptsASnapshotAdmittedWithinTheClockSkew(t *testing.T) {
	f := setup(t)
	now := f.e.Clock.Now()
	id := accountingtest.ReqID()
	snapAt := now.Add(2 * time.Minute).Truncate(time.Millisecond) // the enforcer's clock, 2 minutes ahead
	f.quarantineWithSnapshot(t, id, now, snapAt)
	ans := f.reconcile(t, true, reconcile.Item{RequestID: id, MemberID: f.member, AdmittedAt: snapAt, Cost: 40})
	if !ans.Applied || ans.Results[0].Outcome != reconcile.Reconciled {
		t.Fatalf("the snapshot's own admission instant, %v after the record was first seen: %+v", snapAt.Sub(now), ans.Results)
	}
	if got := f.e.Used(t, f.org, f.member, window.Day, snapAt); got != 40 {
		t.Fatalf("charged %d, want 40", got)
	}
	// Beyond the skew the ledger accepts, it is still refused.
	far := accountingtest.ReqID()
	f.quarantine(t, far, 10)
	ans = f.reconcile(t, false, reconcile.Item{RequestID: far, MemberID: f.member, AdmittedAt: now.Add(accounting.MaxClockSkew + time.Second), Cost: 1})
	if ans.Results[0].Outcome != reconcile.AdmissionOutOfBounds {
		t.Fatalf("admitted past the clock skew after the settlement was seen: %+v", ans.Results)
	}
	accountingtest.Check(t, f.e.Store)
}

// An enforcer's spool never gives a settlement up for its age (docs/enforcer.md): one
// back after a week away (its node down, its volume kept) brings its snapshot, and the
// fence may have moved meanwhile (an operator suspended and resumed the member's
// capture), so it is quarantined epoch_changed with an admission more than 7 days
// before it was first seen. Reconciliation demands exactly that instant as proof, and
// refused it as "too long before the settlement was seen": the record could never be
// reconciled, stayed open for good (retention keeps open records) and its cost was
// charged by no path. The record's own snapshot is the proof the bound stood in for.
func TestReconcileAcceptsTheSnapshotOfASettlementSpooledForAWeek(t *testing.T) {
	f := setup(t)
	now := f.e.Clock.Now()
	id := accountingtest.ReqID()
	snapAt := now.Add(-(reconcile.MaxAdmissionLead + 36*time.Hour)).Truncate(time.Millisecond)
	f.quarantineWithSnapshot(t, id, now, snapAt)
	ans := f.reconcile(t, true, reconcile.Item{RequestID: id, MemberID: f.member, AdmittedAt: snapAt, Cost: 70})
	if !ans.Applied || ans.Results[0].Outcome != reconcile.Reconciled {
		t.Fatalf("the snapshot's own admission instant, %v before the record was first seen: %+v", now.Sub(snapAt), ans.Results)
	}
	if got := f.e.Used(t, f.org, f.member, window.Day, snapAt); got != 70 {
		t.Fatalf("charged %d on the admission day, want 70", got)
	}
	// Without a snapshot, the operator's proof alone stays bounded.
	bare := accountingtest.ReqID()
	f.quarantine(t, bare, 10)
	ans = f.reconcile(t, false, reconcile.Item{RequestID: bare, MemberID: f.member, AdmittedAt: snapAt, Cost: 1})
	if ans.Results[0].Outcome != reconcile.AdmissionOutOfBounds {
		t.Fatalf("a proof without a snapshot admitted %v before the settlement was seen: %+v", now.Sub(snapAt), ans.Results)
	}
	accountingtest.Check(t, f.e.Store)
}
