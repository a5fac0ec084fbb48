package httpapi

import (
	"fmt"
	"net/http"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/accounting"
	"github.com/tollgate-dev/tollgate/controlplane/capture"
	"github.com/tollgate-dev/tollgate/controlplane/fault"
	"github.com/tollgate-dev/tollgate/controlplane/jsonx"
)

// The capture fence (operators): the routes of package capture's suspend and resume.

// maxReviewItems bounds the members or request ids of one capture or recovery call.
const maxReviewItems = 100

type captureBody struct {
	Members []struct {
		MemberID        *string `json:"memberId"`
		TrackingVersion *int64  `json:"trackingVersion"`
	} `json:"members"`
	ReviewReference *string              `json:"reviewReference"`
	Apply           jsonx.Optional[bool] `json:"apply"`
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

// reviewFields validates the fields every capture and recovery body shares. apply is a
// boolean or absent (a preview); null is refused, as the OpenAPI document's type is
// boolean, rather than read as a preview.
func reviewFields(p *fault.Problems, ref *string, apply jsonx.Optional[bool]) (string, bool) {
	r := trimmedText(p, ref, 1, 200, "reviewReference")
	if apply.Set && apply.Null {
		p.Add("must be a boolean", "apply")
	}
	return r, apply.Value
}

// reviewList checks the list of a reviewed operation: present (not null), with 1 to
// maxReviewItems entries (of what, for the message).
func reviewList(p *fault.Problems, present bool, n int, field, what string) {
	switch {
	case !present:
		p.Add("is required", field)
	case n == 0 || n > maxReviewItems:
		p.Add(fmt.Sprintf("must list 1 to %d %s", maxReviewItems, what), field)
	}
}

// reviewRequestID checks one request id of a reviewed operation's list: well formed and
// listed once (seen holds those before it).
func reviewRequestID(p *fault.Problems, id *string, seen map[string]bool, path ...any) (string, bool) {
	switch {
	case id == nil || !accounting.ValidRequestID(*id):
		p.Add("must be a request id: 1 to 128 letters, digits and . _ : -", path...)
	case seen[*id]:
		p.Add("lists a request id twice", path...)
	default:
		seen[*id] = true
		return *id, true
	}
	return "", false
}

func (s *Server) suspendCapture(c *Call) error { return s.moveCapture(c, false) }
func (s *Server) resumeCapture(c *Call) error  { return s.moveCapture(c, true) }

func (s *Server) moveCapture(c *Call, enable bool) error {
	var in captureBody
	if err := c.Decode(&in); err != nil {
		return err
	}
	var p fault.Problems
	ref, apply := reviewFields(&p, in.ReviewReference, in.Apply)
	reviewList(&p, in.Members != nil, len(in.Members), "members", "members")
	req := capture.Request{OrganizationID: c.OrgID(), Enable: enable, Apply: apply, ReviewReference: ref}
	seen := map[string]bool{}
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
		if seen[id] {
			p.Add("lists a member twice", "members", i, "memberId")
			continue
		}
		seen[id] = true
		req.Members = append(req.Members, capture.Expected{MemberID: id, TrackingVersion: *m.TrackingVersion})
	}
	if err := p.Err(); err != nil {
		return err
	}
	view := captureView{Action: req.Action(), Applied: apply, ReviewReference: ref, Members: []captureMemberView{}}
	err := c.Tx(func(tx pgx.Tx) error {
		// The caller's role as it is now, held until the end (usageManagerNow): the move
		// may wait for tracking rows that settlement holds.
		if err := c.usageManagerNow(tx); err != nil {
			return err
		}
		moved, err := capture.Move(c.Ctx, tx, c, req, c.now)
		if err != nil {
			return err
		}
		view.Members = view.Members[:0]
		ids := make([]string, len(moved))
		for i, m := range moved {
			mv := captureMemberView{MemberID: m.MemberID, PreviousTrackingVersion: m.PreviousVersion, TrackingVersion: m.NextVersion,
				CaptureEnabled: m.CaptureEnabled}
			if m.StartedAt != nil {
				at := jsonx.Time(*m.StartedAt)
				mv.TrackingStartedAt = &at
			}
			view.Members = append(view.Members, mv)
			ids[i] = m.MemberID
		}
		if !apply {
			return nil
		}
		return s.entitlementChanged(c, tx, c.OrgID(), ids, nil)
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, view)
}

// maxSafeInteger is 2^53-1, the largest integer JSON clients read exactly.
const maxSafeInteger = 9007199254740991
