package httpapi

import (
	"context"
	"net/http"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/accounting"
	"github.com/tollgate-dev/tollgate/controlplane/fault"
	"github.com/tollgate-dev/tollgate/controlplane/jsonx"
	"github.com/tollgate-dev/tollgate/controlplane/store"
)

// The capture fence (operators): suspend and resume usage capture per member with the
// tracking version they expect (optimistic), previewed unless apply is true. Both move
// the version to a new epoch and restart trackingStartedAt, which marks the current
// periods historical-unknown; neither touches spend. While a member's capture is
// suspended the ledger refuses their new starts (503 capture_suspended at the gateway)
// and snapshots of older versions (capture_epoch_changed).

// maxReviewItems bounds the members or request ids of one capture or recovery call.
const maxReviewItems = 100

type captureBody struct {
	Members []struct {
		MemberID        *string `json:"memberId"`
		TrackingVersion *int64  `json:"trackingVersion"`
	} `json:"members"`
	ReviewReference *string `json:"reviewReference"`
	Apply           *bool   `json:"apply"`
}

type captureMemberView struct {
	MemberID                string      `json:"memberId"`
	PreviousTrackingVersion int64       `json:"previousTrackingVersion"`
	TrackingVersion         int64       `json:"trackingVersion"`
	CaptureEnabled          bool        `json:"captureEnabled"`
	TrackingStartedAt       *jsonx.Time `json:"trackingStartedAt"`
}

type captureView struct {
	Action          string              `json:"action"`
	Applied         bool                `json:"applied"`
	ReviewReference string              `json:"reviewReference"`
	Members         []captureMemberView `json:"members"`
}

// reviewFields validates the fields every capture and recovery body shares.
func reviewFields(p *fault.Problems, ref *string, apply *bool) (string, bool) {
	r := trimmedText(p, ref, 1, 200, "reviewReference")
	return r, apply != nil && *apply
}

func (s *Server) suspendCapture(c *Call) error { return s.moveCapture(c, false) }
func (s *Server) resumeCapture(c *Call) error  { return s.moveCapture(c, true) }

func (s *Server) moveCapture(c *Call, enable bool) error {
	action := "suspend"
	if enable {
		action = "resume"
	}
	var in captureBody
	if err := c.Decode(&in); err != nil {
		return err
	}
	var p fault.Problems
	ref, apply := reviewFields(&p, in.ReviewReference, in.Apply)
	switch {
	case in.Members == nil:
		p.Add("is required", "members")
	case len(in.Members) == 0 || len(in.Members) > maxReviewItems:
		p.Add("must list 1 to 100 members", "members")
	}
	expected := map[string]int64{}
	var ids []string
	for i, m := range in.Members {
		id := ""
		switch {
		case m.MemberID == nil:
			p.Add("is required", "members", i, "memberId")
		case len(*m.MemberID) < 1 || len(*m.MemberID) > 64:
			p.Add("must be 1 to 64 characters", "members", i, "memberId")
		default:
			id = *m.MemberID
		}
		switch {
		case m.TrackingVersion == nil:
			p.Add("is required: the member's current trackingVersion (0 before tracking starts)", "members", i, "trackingVersion")
		case *m.TrackingVersion < 0 || *m.TrackingVersion > maxSafeInteger:
			p.Add("must be an integer from 0 to 9007199254740991", "members", i, "trackingVersion")
		}
		if id == "" || m.TrackingVersion == nil {
			continue
		}
		if _, dup := expected[id]; dup {
			p.Add("lists a member twice", "members", i, "memberId")
			continue
		}
		expected[id] = *m.TrackingVersion
		ids = append(ids, id)
	}
	if err := p.Err(); err != nil {
		return err
	}
	slices.Sort(ids)
	view := captureView{Action: action, Applied: apply, ReviewReference: ref, Members: []captureMemberView{}}
	err := c.Tx(func(tx pgx.Tx) error {
		view.Members = view.Members[:0]
		for _, id := range ids {
			ok, err := store.ActiveMemberExists(c.Ctx, tx, c.OrgID(), id)
			if err != nil {
				return err
			}
			if !ok {
				return fault.NotFoundf("member_not_found", "No active member %s in the organization.", id)
			}
		}
		rows, err := store.LockTracking(c.Ctx, tx, ids)
		if err != nil {
			return err
		}
		for _, id := range ids {
			cur, capture := int64(0), true
			if tr, ok := rows[id]; ok {
				cur, capture = tr.Version, tr.CaptureEnabled
			}
			switch {
			case cur != expected[id]:
				return fault.Conflictf("capture_version_conflict", "Member %s is at tracking version %d, not %d; read their status and try again.", id, cur, expected[id])
			case enable && capture:
				return fault.Conflictf("capture_not_suspended", "Capture of member %s is not suspended.", id)
			case !enable && !capture:
				return fault.Conflictf("capture_already_suspended", "Capture of member %s is already suspended.", id)
			}
			next := accounting.NextFenceVersion(cur)
			mv := captureMemberView{MemberID: id, PreviousTrackingVersion: cur, TrackingVersion: next, CaptureEnabled: enable}
			if apply {
				started := jsonx.Time(c.now)
				mv.TrackingStartedAt = &started
				if err := store.SetCapture(c.Ctx, tx, c.OrgID(), id, next, enable, c.now); err != nil {
					return err
				}
			}
			view.Members = append(view.Members, mv)
		}
		if !apply {
			return nil
		}
		if _, err := store.BumpMirrorVersions(c.Ctx, tx, ids); err != nil {
			return err
		}
		changes := make([]map[string]any, len(view.Members))
		for i, m := range view.Members {
			changes[i] = map[string]any{"memberId": m.MemberID, "from": m.PreviousTrackingVersion, "to": m.TrackingVersion}
		}
		if err := c.Audit(tx, "usage.capture."+action, c.OrgID(), map[string]any{"reviewReference": ref, "members": changes}); err != nil {
			return err
		}
		orgID := c.OrgID()
		ctx := context.WithoutCancel(c.Ctx)
		c.AfterCommit(func() { s.events.EntitlementChanged(ctx, orgID, ids) })
		return nil
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, view)
}

// maxSafeInteger is 2^53-1, the largest integer JSON clients read exactly.
const maxSafeInteger = 9007199254740991
