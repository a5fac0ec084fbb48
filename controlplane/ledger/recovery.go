package ledger

import (
	"fmt"
	"time"

	"github.com/tollgate-dev/tollgate/controlplane/accounting"
	"github.com/tollgate-dev/tollgate/controlplane/store"
)

// RecoveryWrites closes abandoned pending starts as unknown and incomplete: each gets a
// receipt of unknown cost (outcome recovered, cost basis none, with the operator's review reference),
// zero charges on its snapshot's original buckets (so a later known cost is promoted
// once, charging the difference), one more unpriced and incomplete request on each of
// those buckets and on the member, and one pending request less. The last settlement
// fields do not move: nothing was settled. The caller locks the starts and then the
// members' tracking rows before writing, in that order.
func RecoveryWrites(starts []store.StoredStart, reviewReference string, now time.Time) (store.SettleWrites, error) {
	s := &settlement{now: now, w: store.SettleWrites{CloseState: "recovered"}, buckets: map[string]*store.BucketDelta{},
		members: map[string]*store.TrackingDelta{}, bump: map[string]bool{}}
	ref := reviewReference
	for _, st := range starts {
		if st.State != "pending" {
			return store.SettleWrites{}, fmt.Errorf("start %s is %s, not pending", st.RequestID, st.State)
		}
		d := accounting.Decide(nil, accounting.Report{Cost: 0, Source: accounting.SourceUnknown, Complete: false, Basis: accounting.BasisNone})
		rw := store.ReceiptWrite{RequestID: st.RequestID, OrganizationID: st.OrganizationID, MemberID: st.MemberID,
			Source: accounting.SourceUnknown, Basis: accounting.BasisNone, Outcome: "recovered", ReviewReference: &ref}
		s.charge(st, nil, d, rw, true)
	}
	s.finish()
	return s.w, nil
}
