package httpapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/extension"
	"github.com/tollgate-dev/tollgate/controlplane/fault"
	"github.com/tollgate-dev/tollgate/controlplane/jsonx"
	"github.com/tollgate-dev/tollgate/controlplane/limits"
	"github.com/tollgate-dev/tollgate/controlplane/store"
)

// Extension (reset) requests: the routes of package extension's Submit and Decide, and
// the lists.

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
	if r.Status == extension.Pending && !now.Before(r.WindowEnd) {
		v.Status = extension.Expired
		reason := string(limits.WindowEnded)
		v.ExpiredReason = &reason
	}
	return v
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
	var out store.UsageRequest
	err := c.Tx(func(tx pgx.Tx) error {
		// A removal's fence then expires the request, or the submit is refused. The
		// member's row is locked before Submit takes the usage lock, the order in which
		// a removal takes them.
		if err := c.lockCaller(tx); err != nil {
			return err
		}
		// Submit takes the usage lock too (again, at once): taken here, the request is
		// decided at the instant it holds it (lockUsage).
		if err := c.lockUsage(tx); err != nil {
			return err
		}
		var err error
		out, err = extension.Submit(c.Ctx, tx, c, extension.Submission{OrganizationID: c.OrgID(), MemberID: c.Member.ID,
			BucketID: *in.BucketID, Reason: reason}, c.now)
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, viewResetRequest(out, c.now))
}

// decodeOptionalJSON decodes a body that may be left out entirely (approve takes `{}`
// or nothing: no Content-Type and no content); a body that is present, which a named
// Content-Type says there is, is decoded strictly (jsonx.ReadOptionalBody).
func (c *Call) decodeOptionalJSON(v any) error {
	body, err := jsonx.ReadOptionalBody(c.R)
	if err != nil || body == nil {
		return err
	}
	return jsonx.DecodeBytes(body, v)
}

func (s *Server) approveResetRequest(c *Call) error {
	var in struct{}
	return s.decide(c, &in, extension.Approved, nil)
}

func (s *Server) denyResetRequest(c *Call) error {
	var in struct {
		Note jsonx.Optional[string] `json:"note"`
	}
	return s.decide(c, &in, extension.Denied, func(p *fault.Problems) *string {
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

// decide approves or denies a request (extension.Decide).
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
	var out store.UsageRequest
	err = c.Tx(func(tx pgx.Tx) error {
		if err := c.usageManagerNow(tx); err != nil {
			return err
		}
		if err := c.lockUsage(tx); err != nil { // decided when it holds the lock
			return err
		}
		r, changed, err := extension.Decide(c.Ctx, tx, c, extension.Decision{OrganizationID: c.OrgID(), RequestID: id, To: to,
			By: c.Member.ID, Note: noteText}, c.now)
		out = r
		return s.entitlementChanged(c, tx, c.OrgID(), changed, err)
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, viewResetRequest(out, c.now))
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

// parseCursor reads a cursor's fields, whatever list it names; decodeCursor holds them
// to the list asked for.
func parseCursor(s string) (resetCursor, bool) {
	var rc resetCursor
	if len(s) > maxResetCursorLen {
		return rc, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return rc, false
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return rc, dec.Decode(&rc) == nil
}

func decodeCursor(s string, want resetCursor) (*store.UsageRequestPosition, error) {
	bad := fault.InvalidAt("is not a cursor of this list; start again without a cursor", "cursor")
	rc, ok := parseCursor(s)
	if !ok {
		return nil, bad
	}
	// The id goes to Postgres as text: a forged one that is not storable (a NUL) is
	// refused here, not by Postgres as an error answered 503.
	if rc.List != want.List || rc.View != want.View || rc.Org != want.Org || rc.Member != want.Member ||
		rc.ID == "" || !storableText(rc.ID) {
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
// of the same list. pendingCount counts the whole live queue of the list, not the page,
// as of the same snapshot as the page.
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
	want := resetCursor{List: list, View: view, Org: c.OrgID(), Member: memberID}
	limit, after := readPage(q, &p, want)
	if err := p.Err(); err != nil {
		return err
	}
	// The page and the pending count are one read-only snapshot (Call.ReadTx), as a status
	// read is: a decision or submit committing between them would otherwise show a
	// request pending on the page next to a count without it, or the other way round.
	var rows []store.UsageRequest
	var pending int64
	err := c.ReadTx(func(tx pgx.Tx) error {
		var err error
		rows, err = store.ListUsageRequests(c.Ctx, tx, store.UsageRequestPage{OrganizationID: c.OrgID(), MemberID: memberID,
			History: view == "history", Now: c.now, Limit: limit, After: after})
		if err != nil {
			return err
		}
		pending, err = store.CountPendingUsageRequests(c.Ctx, tx, c.OrgID(), memberID, c.now)
		return err
	})
	if err != nil {
		return err
	}
	rows, hasMore, next := cutPage(rows, limit, want, func(r store.UsageRequest) (time.Time, string) { return r.CreatedAt, r.ID })
	views := make([]resetRequestView, len(rows))
	for i, r := range rows {
		views[i] = viewResetRequest(r, c.now)
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

// cutPage trims rows, read one past limit, to the page, and tells whether more follow;
// then next is the cursor of the following page, at the page's last row (position
// gives its time and id) in the list want names.
func cutPage[T any](rows []T, limit int, want resetCursor, position func(T) (time.Time, string)) (page []T, hasMore bool, next *string) {
	if len(rows) <= limit {
		return rows, false, nil
	}
	rows = rows[:limit]
	at, id := position(rows[limit-1])
	cur := want
	cur.CreatedAt, cur.ID = at.UTC().Format(time.RFC3339Nano), id
	s := cur.encode()
	return rows, true, &s
}

// readPage reads a page's limit (1 to 100, default 50, digits only) and cursor (from the
// previous page of the list want names), adding their problems to p; the cursor is read
// only when nothing else is wrong.
func readPage(q url.Values, p *fault.Problems, want resetCursor) (int, *store.UsageRequestPosition) {
	return readPageWithin(q, p, want, resetPageDefault, resetPageMax)
}

// readPageWithin is readPage with the list's own default and largest limit.
func readPageWithin(q url.Values, p *fault.Problems, want resetCursor, def, most int) (int, *store.UsageRequestPosition) {
	limit := def
	if v := q["limit"]; len(v) > 0 {
		n, err := strconv.Atoi(v[0])
		if len(v) > 1 || !digitsOnly(v[0]) || err != nil || n < 1 || n > most {
			p.Add(fmt.Sprintf("must be an integer from 1 to %d, digits only", most), "limit")
		} else {
			limit = n
		}
	}
	var after *store.UsageRequestPosition
	if v := q["cursor"]; len(v) > 0 && p.Err() == nil {
		var err error
		if after, err = decodeCursor(v[0], want); err != nil || len(v) > 1 {
			p.Add("is not a cursor of this list; start again without a cursor", "cursor")
		}
	}
	return limit, after
}
