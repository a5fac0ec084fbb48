package httpapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/fault"
	"github.com/tollgate-dev/tollgate/controlplane/jsonx"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/controlplane/usage"
	"github.com/tollgate-dev/tollgate/pkg/money"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
)

// Extension (reset) requests: a member asks for one extension of their own current
// winning bucket; an owner or admin approves (granting ceil(base/4) once per bucket) or
// denies. Statuses: pending, approved, denied, expired.

const (
	resetPending  = "pending"
	resetApproved = "approved"
	resetDenied   = "denied"
	resetExpired  = "expired"
)

type resetRequestView struct {
	ID                    string      `json:"id"`
	OrganizationID        string      `json:"organizationId"`
	MemberID              string      `json:"memberId"`
	MemberName            string      `json:"memberName"`
	MemberEmail           string      `json:"memberEmail"`
	BucketID              string      `json:"bucketId"`
	Timeframe             string      `json:"timeframe"`
	WindowStart           jsonx.Time  `json:"windowStart"`
	ResetAt               jsonx.Time  `json:"resetAt"`
	PolicyID              string      `json:"policyId"`
	PolicyName            string      `json:"policyName"`
	PolicyRevision        int64       `json:"policyRevision"`
	BaseAllowanceMicroUsd int64       `json:"baseAllowanceMicroUsd"`
	ExtensionMicroUsd     int64       `json:"extensionMicroUsd"`
	UsedMicroUsd          int64       `json:"usedMicroUsd"`
	Reason                string      `json:"reason"`
	Status                string      `json:"status"`
	ExpiredReason         *string     `json:"expiredReason"`
	Note                  *string     `json:"note"`
	CreatedAt             jsonx.Time  `json:"createdAt"`
	DecidedAt             *jsonx.Time `json:"decidedAt"`
	DecidedByMemberID     *string     `json:"decidedByMemberId"`
}

// viewResetRequest renders a request as of now. A pending request whose window has
// ended is shown as expired (window_ended) without rewriting the row: reads never write.
func viewResetRequest(r store.UsageRequest, now time.Time) resetRequestView {
	v := resetRequestView{ID: r.ID, OrganizationID: r.OrganizationID, MemberID: r.MemberID, MemberName: r.MemberName,
		MemberEmail: r.MemberEmail, BucketID: r.BucketID, Timeframe: string(r.Timeframe), WindowStart: jsonx.Time(r.WindowStart),
		ResetAt: jsonx.Time(r.WindowEnd), PolicyID: r.PolicyID, PolicyName: r.PolicyName, PolicyRevision: r.PolicyRevision,
		BaseAllowanceMicroUsd: r.BaseMicroUSD, ExtensionMicroUsd: r.ExtensionMicroUSD, UsedMicroUsd: r.UsedMicroUSD,
		Reason: r.Reason, Status: r.Status, ExpiredReason: r.ExpiredReason, Note: r.Note, CreatedAt: jsonx.Time(r.CreatedAt),
		DecidedAt: jsonx.TimePtr(r.DecidedAt), DecidedByMemberID: r.DecidedByMemberID}
	if r.Status == resetPending && !now.Before(r.WindowEnd) {
		v.Status = resetExpired
		reason := string(usage.WindowEnded)
		v.ExpiredReason = &reason
	}
	return v
}

func errResetRequestNotFound() error {
	return fault.NotFoundf("reset_request_not_found", "No extension request with this id in the organization.")
}

var refusalMessages = map[usage.Refusal]string{
	usage.NoUsageLimit:          "No usage limit applies to this bucket, so there is nothing to extend.",
	usage.ResetRequestsDisabled: "The policy limiting this bucket does not allow extension requests.",
	usage.ZeroBaseAllowance:     "The bucket's base allowance is zero; it cannot be extended.",
	usage.ExtensionAlreadyUsed:  "The bucket's one extension was already granted.",
	usage.UsageLimitNotReached:  "The bucket still has allowance left; ask when spend reaches the allowance.",
}

// submitResetRequest asks for an extension of one of the caller's own current winning
// buckets. A duplicate submit (a request for the bucket is already pending) answers that
// request. A refused submit writes nothing.
func (s *Server) submitResetRequest(c *Call) error {
	var in struct {
		BucketID *string `json:"bucketId"`
		Reason   *string `json:"reason"`
	}
	if err := c.Decode(&in); err != nil {
		return err
	}
	var p fault.Problems
	if in.BucketID == nil {
		p.Add("is required", "bucketId")
	} else {
		usagePlainID(&p, *in.BucketID, "bucketId")
	}
	reason := trimmedText(&p, in.Reason, 1, 2000, "reason")
	if err := p.Err(); err != nil {
		return err
	}
	orgID, memberID := c.OrgID(), c.Member.ID
	var out store.UsageRequest
	err := c.Tx(func(tx pgx.Tx) error {
		// The lock orders this submit against fences and reviews, so the winner checked
		// here is the one the request is stored against.
		if err := store.LockUsage(c.Ctx, tx, orgID); err != nil {
			return err
		}
		mu, err := loadMemberUsage(c.Ctx, tx, orgID, memberID, c.now)
		if err != nil {
			return err
		}
		i := -1
		for j, id := range mu.BucketIDs {
			if id == *in.BucketID {
				i = j
			}
		}
		if i < 0 {
			return fault.NotFoundf("bucket_not_found", "This is not one of your current buckets; read GET /v1/gateway/usage-limits/me for their ids.")
		}
		b := mu.Bucket(i)
		if b.Winner != nil && b.PendingRequest {
			out, err = store.PendingUsageRequest(c.Ctx, tx, b.ID)
			return err
		}
		refusal, err := usage.Eligibility(b)
		if err != nil {
			return err
		}
		if refusal != usage.Eligible {
			return fault.Conflictf(string(refusal), "%s", refusalMessages[refusal])
		}
		r := store.UsageRequest{ID: newID(typeid.ResetRequest), OrganizationID: orgID, MemberID: memberID, BucketID: b.ID,
			Timeframe: b.Window.Timeframe, WindowStart: b.Window.Start, WindowEnd: b.Window.End, PolicyID: b.Winner.Policy.ID,
			PolicyRevision: b.Winner.Policy.Revision, BaseMicroUSD: b.Winner.Base, ExtensionMicroUSD: money.ExtensionFor(b.Winner.Base),
			UsedMicroUSD: b.Counter.Used, Reason: reason, CreatedAt: c.now}
		added, err := store.InsertUsageRequest(c.Ctx, tx, r)
		if err != nil {
			return err
		}
		if added {
			if err := c.Audit(tx, "usage_reset_request.submit", r.ID, map[string]any{"bucketId": r.BucketID,
				"timeframe": r.Timeframe, "policyId": r.PolicyID, "policyRevision": r.PolicyRevision}); err != nil {
				return err
			}
		}
		out, err = store.PendingUsageRequest(c.Ctx, tx, b.ID)
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, viewResetRequest(out, c.now))
}

// decodeOptionalJSON decodes a body that may be left out entirely (approve takes `{}`
// or nothing); a body that is present is decoded strictly.
func (c *Call) decodeOptionalJSON(v any) error {
	body, err := io.ReadAll(io.LimitReader(c.R.Body, jsonx.MaxBodyBytes+1))
	if err != nil {
		return fault.InvalidAt("could not read the request body")
	}
	if len(body) > jsonx.MaxBodyBytes {
		return fault.InvalidAt(fmt.Sprintf("request body exceeds %d bytes", jsonx.MaxBodyBytes))
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	return jsonx.DecodeBytes(body, v)
}

func (s *Server) approveResetRequest(c *Call) error {
	var in struct{}
	return s.decide(c, &in, resetApproved, nil)
}

func (s *Server) denyResetRequest(c *Call) error {
	var in struct {
		Note jsonx.Optional[string] `json:"note"`
	}
	return s.decide(c, &in, resetDenied, func(p *fault.Problems) *string {
		if !in.Note.Set || in.Note.Null {
			return nil
		}
		note := trimmedText(p, &in.Note.Value, 0, 2000, "note")
		if note == "" {
			return nil
		}
		return &note
	})
}

// decide approves or denies a request. Deciding again the way it was decided answers
// the request as it is (a retried review succeeds, and concurrent approvals grant one
// extension); the opposite decision is 409. A request that went stale (the member left,
// the window ended, the winner or its revision changed) is expired instead and answered
// with status expired.
func (s *Server) decide(c *Call, in any, to string, note func(*fault.Problems) *string) error {
	id, err := c.usagePathID("requestId")
	if err != nil {
		return err
	}
	if err := c.decodeOptionalJSON(in); err != nil {
		return err
	}
	var p fault.Problems
	var noteText *string
	if note != nil {
		noteText = note(&p)
	}
	if err := p.Err(); err != nil {
		return err
	}
	orgID := c.OrgID()
	var out store.UsageRequest
	err = c.Tx(func(tx pgx.Tx) error {
		if err := store.LockUsage(c.Ctx, tx, orgID); err != nil {
			return err
		}
		r, err := store.UsageRequestInOrg(c.Ctx, tx, orgID, id)
		if errors.Is(err, store.ErrNotFound) {
			return errResetRequestNotFound()
		}
		if err != nil {
			return err
		}
		out = r
		switch r.Status {
		case to, resetExpired:
			return nil
		case resetApproved, resetDenied:
			return fault.Conflictf("reset_request_decided", "The request was already %s.", r.Status)
		}
		stale, err := s.staleness(c.Ctx, tx, r, c.now)
		if err != nil {
			return err
		}
		if stale != usage.NotStale {
			reason := string(stale)
			if err := store.DecideUsageRequest(c.Ctx, tx, r.ID, resetExpired, c.now, nil, nil, &reason); err != nil {
				return err
			}
			if err := c.Audit(tx, "usage_reset_request.expire", r.ID, map[string]any{"reason": reason, "attempted": to}); err != nil {
				return err
			}
		} else {
			if to == resetApproved {
				if err := s.grant(c, tx, r); err != nil {
					return err
				}
			}
			by := c.Member.ID
			if err := store.DecideUsageRequest(c.Ctx, tx, r.ID, to, c.now, &by, noteText, nil); err != nil {
				return err
			}
			details := map[string]any{"bucketId": r.BucketID, "memberId": r.MemberID}
			if to == resetApproved {
				details["extensionMicroUsd"] = r.ExtensionMicroUSD
			}
			if err := c.Audit(tx, "usage_reset_request."+map[string]string{resetApproved: "approve", resetDenied: "deny"}[to], r.ID, details); err != nil {
				return err
			}
		}
		out, err = store.UsageRequestInOrg(c.Ctx, tx, orgID, id)
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, viewResetRequest(out, c.now))
}

// staleness re-derives the member's current winner for the request's timeframe; the
// caller holds the usage lock, so nothing can change it before the decision commits.
func (s *Server) staleness(ctx context.Context, tx pgx.Tx, r store.UsageRequest, now time.Time) (usage.StaleReason, error) {
	active, err := store.ActiveMemberExists(ctx, tx, r.OrganizationID, r.MemberID)
	if err != nil {
		return "", err
	}
	var current *usage.Winner
	if active {
		model, subject, err := store.LoadUsageMember(ctx, tx, r.OrganizationID, r.MemberID)
		if err != nil {
			return "", err
		}
		current = model.Winners(subject).Get(r.Timeframe)
	}
	snap := usage.RequestSnapshot{Timeframe: r.Timeframe, WindowEnd: r.WindowEnd, PolicyID: r.PolicyID, PolicyRevision: r.PolicyRevision}
	return usage.Staleness(snap, active, current, now), nil
}

// grant records the approved extension on the bucket (once per bucket; spend and the
// reset time are untouched) and schedules the enforcer notification.
func (s *Server) grant(c *Call, tx pgx.Tx, r store.UsageRequest) error {
	// The request's base is the current winner's base (the revision is unchanged), so
	// base + ceil(base/4) stays within the safe-integer bound; check it all the same.
	if _, err := money.AddChecked(r.BaseMicroUSD, r.ExtensionMicroUSD); err != nil {
		return err
	}
	key := store.UsageBucketKey{ID: r.BucketID, OrganizationID: r.OrganizationID, MemberID: r.MemberID, Timeframe: r.Timeframe,
		WindowStart: r.WindowStart, WindowEnd: r.WindowEnd}
	ok, err := store.GrantUsageExtension(c.Ctx, tx, key, r.ExtensionMicroUSD, r.ID, r.PolicyID, r.PolicyRevision, c.now)
	if err != nil {
		return err
	}
	if !ok {
		// Unreachable while every grant and fence holds the usage lock: a pending request
		// exists only for a bucket without an extension. Refuse rather than grant twice.
		return fault.Conflictf(string(usage.ExtensionAlreadyUsed), "%s", refusalMessages[usage.ExtensionAlreadyUsed])
	}
	ctx := context.WithoutCancel(c.Ctx)
	orgID, memberID := r.OrganizationID, r.MemberID
	c.AfterCommit(func() { s.events.EntitlementChanged(ctx, orgID, []string{memberID}) })
	return nil
}

// Lists.

// resetCursor is the position after the last row of a page, bound to the list it came
// from (which list, which view, which organization and, for "me", which member). It is
// opaque to clients: base64url of this JSON. Binding is a correctness check, not a
// secret: forging a cursor can only move within lists the caller may read anyway.
type resetCursor struct {
	List      string `json:"l"`
	View      string `json:"v"`
	Org       string `json:"o"`
	Member    string `json:"m,omitempty"`
	CreatedAt string `json:"t"`
	ID        string `json:"i"`
}

const maxResetCursorLen = 1024

func (rc resetCursor) encode() string {
	b, _ := json.Marshal(rc)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string, want resetCursor) (*store.UsageRequestPosition, error) {
	bad := fault.InvalidAt("is not a cursor of this list; start again without a cursor", "cursor")
	if len(s) > maxResetCursorLen {
		return nil, bad
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, bad
	}
	var rc resetCursor
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rc); err != nil {
		return nil, bad
	}
	if rc.List != want.List || rc.View != want.View || rc.Org != want.Org || rc.Member != want.Member || rc.ID == "" {
		return nil, bad
	}
	t, err := time.Parse(time.RFC3339Nano, rc.CreatedAt)
	if err != nil {
		return nil, bad
	}
	return &store.UsageRequestPosition{CreatedAt: t, ID: rc.ID}, nil
}

const (
	resetPageDefault = 50
	resetPageMax     = 100
)

func (s *Server) listMyResetRequests(c *Call) error { return s.listResets(c, "me", c.Member.ID) }
func (s *Server) listResetRequests(c *Call) error   { return s.listResets(c, "org", "") }

// listResets answers one page of a request list: view=pending (default; the live queue,
// oldest first) or history (decided requests and pending ones whose window ended,
// newest first); limit 1 to 100 (default 50, digits only); cursor from the previous page
// of the same list. pendingCount counts the whole live queue of the list, not the page.
func (s *Server) listResets(c *Call, list, memberID string) error {
	q := c.R.URL.Query()
	var p fault.Problems
	view := "pending"
	if v := q["view"]; len(v) > 0 {
		view = v[0]
		if len(v) > 1 || (view != "pending" && view != "history") {
			p.Add("must be pending or history", "view")
		}
	}
	limit := resetPageDefault
	if v := q["limit"]; len(v) > 0 {
		n, err := strconv.Atoi(v[0])
		if len(v) > 1 || !digitsOnly(v[0]) || err != nil || n < 1 || n > resetPageMax {
			p.Add("must be an integer from 1 to 100, digits only", "limit")
		} else {
			limit = n
		}
	}
	want := resetCursor{List: list, View: view, Org: c.OrgID(), Member: memberID}
	var after *store.UsageRequestPosition
	if v := q["cursor"]; len(v) > 0 && p.Err() == nil {
		var err error
		if after, err = decodeCursor(v[0], want); err != nil || len(v) > 1 {
			p.Add("is not a cursor of this list; start again without a cursor", "cursor")
		}
	}
	if err := p.Err(); err != nil {
		return err
	}
	rows, err := store.ListUsageRequests(c.Ctx, c.DB(), store.UsageRequestPage{OrganizationID: c.OrgID(), MemberID: memberID,
		History: view == "history", Now: c.now, Limit: limit, After: after})
	if err != nil {
		return err
	}
	pending, err := store.CountPendingUsageRequests(c.Ctx, c.DB(), c.OrgID(), memberID, c.now)
	if err != nil {
		return err
	}
	hasMore := len(rows) > limit
	if hasMore {
		rows = rows[:limit]
	}
	views := make([]resetRequestView, len(rows))
	for i, r := range rows {
		views[i] = viewResetRequest(r, c.now)
	}
	var next *string
	if hasMore {
		last := rows[len(rows)-1]
		cur := want
		cur.CreatedAt, cur.ID = last.CreatedAt.UTC().Format(time.RFC3339Nano), last.ID
		s := cur.encode()
		next = &s
	}
	return c.JSON(http.StatusOK, map[string]any{"requests": views, "view": view, "limit": limit, "hasMore": hasMore,
		"nextCursor": next, "pendingCount": pending})
}

func digitsOnly(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
