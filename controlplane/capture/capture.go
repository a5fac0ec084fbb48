// Package capture owns the capture fence's workflow: suspending and resuming usage
// capture per member, each at the tracking version the operator expects (optimistic),
// previewed unless applied. Both move the version to a new epoch
// (accounting.NextFenceVersion) and restart trackingStartedAt, which marks the current
// periods historical-unknown; neither touches spend. While a member's capture is
// suspended the ledger refuses their new starts (503 capture_suspended at the gateway)
// and snapshots of older versions (capture_epoch_changed).
//
// Move takes the transaction, its inputs and the instant, and returns typed errors
// (package fault); the caller tells the enforcers after commit.
package capture

import (
	"context"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/accounting"
	"github.com/tollgate-dev/tollgate/controlplane/fault"
	"github.com/tollgate-dev/tollgate/controlplane/store"
)

// Auditor records an audit event of the caller inside tx.
type Auditor interface {
	Audit(tx pgx.Tx, action, targetID string, details any) error
}

// Expected is a member and the tracking version the operator read (0 before tracking
// starts).
type Expected struct {
	MemberID        string
	TrackingVersion int64
}

// Moved is one member's move.
type Moved struct {
	MemberID                     string
	PreviousVersion, NextVersion int64
	CaptureEnabled               bool
	// StartedAt is the new trackingStartedAt when applied; nil in a preview.
	StartedAt *time.Time
}

// Request is one suspend or resume.
type Request struct {
	OrganizationID string
	// Members are distinct; their order is not significant.
	Members []Expected
	// Enable resumes capture; otherwise it is suspended.
	Enable bool
	// Apply writes; otherwise the answer is a preview.
	Apply           bool
	ReviewReference string
}

// Action names the move: "resume" or "suspend".
func (r Request) Action() string {
	if r.Enable {
		return "resume"
	}
	return "suspend"
}

// Move checks every member (active, at the expected version, not already in the wanted
// state) under the tracking rows' locks and, when applied, moves them all to the next
// epoch, bumps their mirror versions and records the audit event. It answers the moves
// in member id order; any refusal (404 member_not_found, 409 capture_version_conflict,
// capture_not_suspended, capture_already_suspended) writes nothing.
func Move(ctx context.Context, tx pgx.Tx, a Auditor, r Request, now time.Time) ([]Moved, error) {
	expected := make(map[string]int64, len(r.Members))
	ids := make([]string, 0, len(r.Members))
	for _, m := range r.Members {
		expected[m.MemberID] = m.TrackingVersion
		ids = append(ids, m.MemberID)
	}
	slices.Sort(ids)
	for _, id := range ids {
		ok, err := store.ActiveMemberExists(ctx, tx, r.OrganizationID, id)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fault.NotFoundf("member_not_found", "No active member %s in the organization.", id)
		}
	}
	rows, err := store.LockTracking(ctx, tx, ids)
	if err != nil {
		return nil, err
	}
	out := make([]Moved, 0, len(ids))
	for _, id := range ids {
		cur, capture := int64(0), true
		if tr, ok := rows[id]; ok {
			cur, capture = tr.Version, tr.CaptureEnabled
		}
		switch {
		case cur != expected[id]:
			return nil, fault.Conflictf("capture_version_conflict", "Member %s is at tracking version %d, not %d; read their status and try again.", id, cur, expected[id])
		case r.Enable && capture:
			return nil, fault.Conflictf("capture_not_suspended", "Capture of member %s is not suspended.", id)
		case !r.Enable && !capture:
			return nil, fault.Conflictf("capture_already_suspended", "Capture of member %s is already suspended.", id)
		}
		m := Moved{MemberID: id, PreviousVersion: cur, NextVersion: accounting.NextFenceVersion(cur), CaptureEnabled: r.Enable}
		if r.Apply {
			started := now
			m.StartedAt = &started
			moved, err := store.SetCapture(ctx, tx, r.OrganizationID, id, cur, m.NextVersion, r.Enable, now)
			if err != nil {
				return nil, err
			}
			if !moved {
				// The member had no tracking row when locked, and one was created since
				// (another move of version 0, or a first start): the expected version is
				// no longer the member's.
				again, err := store.LockTracking(ctx, tx, []string{id})
				if err != nil {
					return nil, err
				}
				return nil, fault.Conflictf("capture_version_conflict", "Member %s is at tracking version %d, not %d; read their status and try again.", id, again[id].Version, expected[id])
			}
		}
		out = append(out, m)
	}
	if !r.Apply {
		return out, nil
	}
	if _, err := store.BumpMirrorVersions(ctx, tx, ids); err != nil {
		return nil, err
	}
	changes := make([]map[string]any, len(out))
	for i, m := range out {
		changes[i] = map[string]any{"memberId": m.MemberID, "from": m.PreviousVersion, "to": m.NextVersion}
	}
	if err := a.Audit(tx, "usage.capture."+r.Action(), r.OrganizationID, map[string]any{"reviewReference": r.ReviewReference,
		"members": changes}); err != nil {
		return nil, err
	}
	return out, nil
}
