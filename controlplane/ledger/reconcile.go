package ledger

import (
	"time"

	"github.com/tollgate-dev/tollgate/controlplane/accounting"
	"github.com/tollgate-dev/tollgate/controlplane/store"
)

// Reconciled is one reviewed reconciliation to charge: the request's start (recorded
// closed, never pending, in the same transaction) and the charge an operator proved.
type Reconciled struct {
	Start store.StoredStart
	Cost  int64
}

// ReconcileWrites charges reviewed reconciliations of quarantined settlements with the
// settlement's own charging code: each gets a receipt (outcome reconciled, cost source
// reconciled, cost basis reviewed, complete: final, so a later settlement of the same
// request is a duplicate or a cost conflict, never a second charge) whose cost is
// charged once to the buckets of the proven admission instant. The last settlement
// fields do not move (nothing was settled) and no pending count changes (the request
// was never pending). The caller records the starts and locks them, then the members'
// tracking rows and the buckets, before writing.
func ReconcileWrites(items []Reconciled, reviewReference string, now time.Time) store.SettleWrites {
	s := &settlement{now: now, w: store.SettleWrites{CloseState: "settled"}, buckets: map[string]*store.BucketDelta{},
		members: map[string]*store.TrackingDelta{}, bump: map[string]bool{}}
	ref := reviewReference
	for _, it := range items {
		d := accounting.Decide(nil, accounting.Report{Cost: it.Cost, Source: accounting.SourceReconciled, Complete: true,
			Basis: accounting.BasisReviewed})
		rw := store.ReceiptWrite{RequestID: it.Start.RequestID, OrganizationID: it.Start.OrganizationID, MemberID: it.Start.MemberID,
			Cost: d.Receipt.Cost, Source: d.Receipt.Source, Basis: d.Receipt.Basis, Complete: true, Outcome: "reconciled",
			ReviewReference: &ref}
		s.charge(it.Start, nil, d, rw, false)
	}
	s.finish()
	return s.w
}
