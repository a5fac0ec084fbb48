// Package recovery owns abandonment recovery's writes: closing chosen durable starts
// that are still pending as unknown and incomplete. Closing decrements the member's
// pending count exactly once and counts an unpriced and incomplete request on the
// original windows (ledger.RecoveryWrites); a real settlement arriving later still
// promotes its known cost, once.
//
// Recover takes the transaction, its inputs and the instant. Lock order: the starts,
// then the members' tracking rows, then the buckets (in the settlement writes) — the
// order the ledger uses, so recovery never deadlocks against settlement.
package recovery

import (
	"context"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/ledger"
	"github.com/tollgate-dev/tollgate/controlplane/store"
)

// Auditor records an audit event of the caller inside tx.
type Auditor interface {
	Audit(tx pgx.Tx, action, targetID string, details any) error
}

// Outcomes of one request id.
const (
	Recovered    = "recovered"     // closed (applied)
	WouldRecover = "would_recover" // would be closed (preview)
	NotPending   = "not_pending"   // already closed; State says how
	NotFound     = "not_found"     // no start of this organization has this id
)

// Result is the outcome of one request id.
type Result struct {
	RequestID string
	Outcome   string
	// MemberID and State are set when the start exists (State only for NotPending).
	MemberID, State string
}

// Request closes RequestIDs (distinct) of the organization, or previews it.
type Request struct {
	OrganizationID  string
	RequestIDs      []string
	ReviewReference string
	Apply           bool
}

// Recover answers each request id in the order given; applied, it closes the pending
// ones and records the audit event (every applied call is audited, even one that found
// nothing to close).
func Recover(ctx context.Context, tx pgx.Tx, a Auditor, r Request, now time.Time) ([]Result, error) {
	starts, err := store.LockStartsInOrg(ctx, tx, r.OrganizationID, r.RequestIDs)
	if err != nil {
		return nil, err
	}
	results := make([]Result, 0, len(r.RequestIDs))
	var closing []store.StoredStart
	var members []string
	for _, id := range r.RequestIDs {
		res := Result{RequestID: id}
		st, ok := starts[id]
		switch {
		case !ok:
			res.Outcome = NotFound
		case st.State != "pending":
			res.Outcome, res.MemberID, res.State = NotPending, st.MemberID, st.State
		default:
			res.Outcome, res.MemberID = WouldRecover, st.MemberID
			if r.Apply {
				res.Outcome = Recovered
			}
			closing = append(closing, st)
			members = append(members, st.MemberID)
		}
		results = append(results, res)
	}
	if !r.Apply {
		return results, nil
	}
	if len(closing) > 0 {
		if _, err := store.LockTracking(ctx, tx, members); err != nil {
			return nil, err
		}
		w, err := ledger.RecoveryWrites(closing, r.ReviewReference, now)
		if err != nil {
			return nil, err
		}
		if _, err := store.WriteSettlements(ctx, tx, w, now); err != nil {
			return nil, err
		}
	}
	recovered := make([]string, len(closing))
	for i, st := range closing {
		recovered[i] = st.RequestID
	}
	slices.Sort(recovered)
	err = a.Audit(tx, "usage.recovery.recover", r.OrganizationID, map[string]any{"reviewReference": r.ReviewReference,
		"requestIds": recovered, "count": len(recovered), "asked": len(r.RequestIDs)})
	if err != nil {
		return nil, err
	}
	return results, nil
}
