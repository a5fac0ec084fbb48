package httpapi

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/accounting"
	"github.com/tollgate-dev/tollgate/controlplane/fault"
	"github.com/tollgate-dev/tollgate/controlplane/jsonx"
	"github.com/tollgate-dev/tollgate/controlplane/recovery"
	"github.com/tollgate-dev/tollgate/controlplane/store"
)

// Abandonment recovery (operators): list the durable starts still pending that were
// admitted before a cutoff, and close chosen ones as unknown and incomplete (package
// recovery).

// defaultRecoveryAge is the cutoff when none is given: a request admitted more than an
// hour ago and still unsettled is almost surely abandoned.
const defaultRecoveryAge = time.Hour

// maxRecoveryCutoffAhead is how far past the control plane's clock a cutoff may be: an
// operator's clock a little ahead of it (a restore's runbook lists with now+1s), not a
// typed year (2027 for 2026), which would have recover --apply close every request
// still in flight and free its reservation while it streams.
const maxRecoveryCutoffAhead = time.Minute

type pendingStartView struct {
	RequestID       string              `json:"requestId"`
	MemberID        string              `json:"memberId"`
	AdmittedAt      jsonx.Time          `json:"admittedAt"`
	RecordedAt      jsonx.Time          `json:"recordedAt"`
	TrackingVersion int64               `json:"trackingVersion"`
	Buckets         []pendingBucketView `json:"buckets"`
}

type pendingBucketView struct {
	BucketID    string     `json:"bucketId"`
	Timeframe   string     `json:"timeframe"`
	WindowStart jsonx.Time `json:"windowStart"`
	ResetAt     jsonx.Time `json:"resetAt"`
}

func (s *Server) listPendingStarts(c *Call) error {
	q := c.R.URL.Query()
	var p fault.Problems
	before := c.now.Add(-defaultRecoveryAge)
	if v := q["before"]; len(v) > 0 {
		t, err := time.Parse(time.RFC3339Nano, v[0])
		switch {
		case len(v) > 1 || err != nil || !inInstantRange(t):
			p.Add("must be an RFC 3339 date-time with an offset, from the year 2000 to 9998", "before")
		case t.After(c.now.Add(maxRecoveryCutoffAhead)):
			p.Add("must not be more than a minute after now: a later cutoff lists requests still in flight", "before")
		default:
			before = t.UTC()
		}
	} else if c := q.Get("cursor"); c != "" {
		// Without before, the cutoff is the one the list began with (its cursor names
		// it), not an hour before this call: a client following nextCursor as it came
		// would otherwise have every later page refused, its default cutoff having moved.
		if t, ok := cursorCutoff(c); ok {
			before = t
		}
	}
	memberID := ""
	if v := q["memberId"]; len(v) > 0 {
		if len(v) > 1 || len(v[0]) < 1 || len(v[0]) > 64 {
			p.Add("must be 1 to 64 characters", "memberId")
		} else {
			memberID = v[0]
		}
	}
	want := resetCursor{List: "recovery", View: before.Format(time.RFC3339Nano), Org: c.OrgID(), Member: memberID}
	limit, after := readPage(q, &p, want)
	if err := p.Err(); err != nil {
		return err
	}
	page := store.PendingStartPage{OrganizationID: c.OrgID(), MemberID: memberID, Before: before, Limit: limit}
	if after != nil {
		page.AfterAdmittedAt, page.AfterRequestID = &after.CreatedAt, after.ID
	}
	rows, err := store.ListPendingStarts(c.Ctx, c.DB(), page)
	if err != nil {
		return err
	}
	rows, hasMore, next := cutPage(rows, limit, want, func(r store.PendingStart) (time.Time, string) { return r.AdmittedAt, r.RequestID })
	out := make([]pendingStartView, 0, len(rows))
	for _, r := range rows {
		var snap accounting.Snapshot
		if err := json.Unmarshal(r.Snapshot, &snap); err != nil {
			return err
		}
		v := pendingStartView{RequestID: r.RequestID, MemberID: r.MemberID, AdmittedAt: jsonx.Time(r.AdmittedAt),
			RecordedAt: jsonx.Time(r.CreatedAt), TrackingVersion: r.TrackingVersion, Buckets: []pendingBucketView{}}
		for _, b := range snap.Buckets {
			v.Buckets = append(v.Buckets, pendingBucketView{BucketID: b.BucketID, Timeframe: string(b.Timeframe),
				WindowStart: jsonx.Time(b.WindowStart()), ResetAt: jsonx.Time(time.UnixMilli(b.WindowEndUnixMs).UTC())})
		}
		out = append(out, v)
	}
	return c.JSON(http.StatusOK, map[string]any{"pending": out, "before": jsonx.Time(before), "hasMore": hasMore, "nextCursor": next})
}

// The instants the accounting routes take (a cutoff, an admission instant): the answer
// renders them and their windows back with a four-digit year, as the OpenAPI document's
// timestamps have; 9999-12-31 (any offset) would name windows of the year 10000, and
// 0001-01-01 one of the year 0000. No request was admitted outside this range.
var minInstant, maxInstant = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

func inInstantRange(t time.Time) bool { return !t.Before(minInstant) && t.Before(maxInstant) }

// cursorCutoff is the cutoff a recovery list's cursor was made for (its view), if s is
// a cursor that names one; decodeCursor still checks the whole cursor.
func cursorCutoff(s string) (time.Time, bool) {
	rc, ok := parseCursor(s)
	if !ok || rc.List != "recovery" {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, rc.View)
	return t.UTC(), err == nil && inInstantRange(t)
}

type recoveryResultView struct {
	RequestID string `json:"requestId"`
	// Outcome: recovered (applied), would_recover (preview), not_pending (already closed;
	// State says how), not_found (no start of this organization has this id).
	Outcome  string  `json:"outcome"`
	MemberID *string `json:"memberId"`
	State    *string `json:"state"`
}

func (s *Server) recoverStarts(c *Call) error {
	var in struct {
		RequestIDs      []*string            `json:"requestIds"`
		ReviewReference *string              `json:"reviewReference"`
		Apply           jsonx.Optional[bool] `json:"apply"`
	}
	if err := c.Decode(&in); err != nil {
		return err
	}
	var p fault.Problems
	ref, apply := reviewFields(&p, in.ReviewReference, in.Apply)
	reviewList(&p, in.RequestIDs != nil, len(in.RequestIDs), "requestIds", "request ids")
	var ids []string
	seen := map[string]bool{}
	for i, id := range in.RequestIDs {
		if v, ok := reviewRequestID(&p, id, seen, "requestIds", i); ok {
			ids = append(ids, v)
		}
	}
	if err := p.Err(); err != nil {
		return err
	}
	var results []recoveryResultView
	err := c.Tx(func(tx pgx.Tx) error {
		// The caller's role as it is now, held until the end (usageManagerNow): recovery
		// may wait for starts and tracking rows that settlement holds.
		if err := c.usageManagerNow(tx); err != nil {
			return err
		}
		rs, err := recovery.Recover(c.Ctx, tx, c, recovery.Request{OrganizationID: c.OrgID(), RequestIDs: ids,
			ReviewReference: ref, Apply: apply}, c.now)
		results = make([]recoveryResultView, len(rs))
		for i, r := range rs {
			results[i] = recoveryResultView{RequestID: r.RequestID, Outcome: r.Outcome, MemberID: optional(r.MemberID),
				State: optional(r.State)}
		}
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"applied": apply, "reviewReference": ref, "results": results})
}

// optional is nil for "", else a pointer to s (a JSON null for an absent value).
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
