package httpapi

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/fault"
	"github.com/tollgate-dev/tollgate/controlplane/jsonx"
	"github.com/tollgate-dev/tollgate/controlplane/reconcile"
	"github.com/tollgate-dev/tollgate/controlplane/store"
)

// Reviewed reconciliation (operators): list the quarantined settlements of the
// organization, and charge chosen ones with explicit proof (package reconcile).

type quarantinedView struct {
	RequestID string `json:"requestId"`
	Reason    string `json:"reason"`
	// MemberID is the member the enforcer claimed (null when it named none).
	MemberID    *string    `json:"memberId"`
	FirstSeenAt jsonx.Time `json:"firstSeenAt"`
	LastSeenAt  jsonx.Time `json:"lastSeenAt"`
	Repeats     int64      `json:"repeats"`
	// Settlement is the settlement as the enforcer sent it (the internal API's
	// SettleItem in its JSON form): the evidence to review.
	Settlement     json.RawMessage      `json:"settlement"`
	Reconciliation *reconciliationProof `json:"reconciliation"`
}

type reconciliationProof struct {
	ReconciledAt    jsonx.Time `json:"reconciledAt"`
	ReviewReference string     `json:"reviewReference"`
	MemberID        string     `json:"memberId"`
	AdmittedAt      jsonx.Time `json:"admittedAt"`
	CostMicroUsd    int64      `json:"costMicroUsd"`
}

func (s *Server) listQuarantined(c *Call) error {
	q := c.R.URL.Query()
	var p fault.Problems
	state := "open"
	if v := q["state"]; len(v) > 0 {
		if len(v) > 1 || (v[0] != "open" && v[0] != "reconciled" && v[0] != "all") {
			p.Add("must be open, reconciled or all", "state")
		} else {
			state = v[0]
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
	want := resetCursor{List: "quarantine", View: state, Org: c.OrgID(), Member: memberID}
	limit, after := readPage(q, &p, want)
	var afterID, afterReason string
	if after != nil {
		var ok bool
		if afterID, afterReason, ok = strings.Cut(after.ID, "/"); !ok {
			p.Add("is not a cursor of this list; start again without a cursor", "cursor")
		}
	}
	if err := p.Err(); err != nil {
		return err
	}
	page := store.QuarantinePage{OrganizationID: c.OrgID(), MemberID: memberID, State: state, Limit: limit}
	if after != nil {
		page.AfterFirstSeenAt, page.AfterRequestID, page.AfterReason = &after.CreatedAt, afterID, afterReason
	}
	rows, err := store.ListQuarantined(c.Ctx, c.DB(), page)
	if err != nil {
		return err
	}
	rows, hasMore, next := cutPage(rows, limit, want, func(r store.QuarantinedSettlement) (time.Time, string) {
		return r.FirstSeenAt, r.RequestID + "/" + r.Reason
	})
	out := make([]quarantinedView, 0, len(rows))
	for _, r := range rows {
		v := quarantinedView{RequestID: r.RequestID, Reason: r.Reason, MemberID: optional(r.MemberID), FirstSeenAt: jsonx.Time(r.FirstSeenAt),
			LastSeenAt: jsonx.Time(r.LastSeenAt), Repeats: r.Repeats, Settlement: json.RawMessage(r.Payload)}
		if r.ReconciledAt != nil {
			v.Reconciliation = &reconciliationProof{ReconciledAt: jsonx.Time(*r.ReconciledAt), ReviewReference: *r.ReviewReference,
				MemberID: *r.ProvenMemberID, AdmittedAt: jsonx.Time(*r.ProvenAdmittedAt), CostMicroUsd: *r.ProvenCost}
		}
		out = append(out, v)
	}
	return c.JSON(http.StatusOK, map[string]any{"quarantined": out, "state": state, "hasMore": hasMore, "nextCursor": next})
}

type reconcileResultView struct {
	RequestID string `json:"requestId"`
	// Outcome: reconciled (applied), would_reconcile, or why the request was refused.
	Outcome string              `json:"outcome"`
	Message *string             `json:"message"`
	Buckets []pendingBucketView `json:"buckets"`
}

func (s *Server) reconcileQuarantined(c *Call) error {
	var in struct {
		Items []*struct {
			RequestID    *string `json:"requestId"`
			MemberID     *string `json:"memberId"`
			AdmittedAt   *string `json:"admittedAt"`
			CostMicroUsd *int64  `json:"costMicroUsd"`
		} `json:"items"`
		ReviewReference *string              `json:"reviewReference"`
		Apply           jsonx.Optional[bool] `json:"apply"`
	}
	if err := c.Decode(&in); err != nil {
		return err
	}
	var p fault.Problems
	ref, apply := reviewFields(&p, in.ReviewReference, in.Apply)
	reviewList(&p, in.Items != nil, len(in.Items), "items", "requests")
	req := reconcile.Request{OrganizationID: c.OrgID(), ReviewReference: ref, Apply: apply}
	seen := map[string]bool{}
	for i, it := range in.Items {
		if it == nil {
			p.Add("must be an object", "items", i)
			continue
		}
		var item reconcile.Item
		item.RequestID, _ = reviewRequestID(&p, it.RequestID, seen, "items", i, "requestId")
		if it.MemberID == nil || len(*it.MemberID) < 1 || len(*it.MemberID) > 64 {
			p.Add("is required: the member charged, 1 to 64 characters", "items", i, "memberId")
		} else {
			item.MemberID = *it.MemberID
		}
		if it.AdmittedAt == nil {
			p.Add("is required: the request's admission instant (RFC 3339 with an offset)", "items", i, "admittedAt")
		} else if t, err := time.Parse(time.RFC3339Nano, *it.AdmittedAt); err != nil || !inInstantRange(t) {
			p.Add("must be an RFC 3339 date-time with an offset, from the year 2000 to 9998", "items", i, "admittedAt")
		} else {
			item.AdmittedAt = t
		}
		if it.CostMicroUsd == nil || *it.CostMicroUsd < 0 || *it.CostMicroUsd > reconcile.MaxCostMicroUSD {
			p.Add("is required: the proven charge, an integer from 0 to 1000000000 micro-USD", "items", i, "costMicroUsd")
		} else {
			item.Cost = *it.CostMicroUsd
		}
		req.Items = append(req.Items, item)
	}
	if err := p.Err(); err != nil {
		return err
	}
	var ans reconcile.Answer
	err := c.Tx(func(tx pgx.Tx) error {
		// The caller's role as it is now, held until the end (usageManagerNow): the
		// charges may wait for tracking rows and buckets that settlement holds.
		if err := c.usageManagerNow(tx); err != nil {
			return err
		}
		var err error
		if ans, err = reconcile.Reconcile(c.Ctx, tx, c, req, c.now); err != nil {
			return err
		}
		// The counters moved: the enforcers' records must show the new spend.
		return s.entitlementChanged(c, tx, c.OrgID(), ans.Members, nil)
	})
	if err != nil {
		return err
	}
	if ans.Applied {
		s.metrics.Reconciliations.Add(float64(len(ans.Results)))
	}
	results := make([]reconcileResultView, len(ans.Results))
	for i, r := range ans.Results {
		v := reconcileResultView{RequestID: r.RequestID, Outcome: r.Outcome, Message: optional(r.Message), Buckets: []pendingBucketView{}}
		for _, b := range r.Buckets {
			v.Buckets = append(v.Buckets, pendingBucketView{BucketID: b.BucketID, Timeframe: string(b.Timeframe),
				WindowStart: jsonx.Time(b.WindowStart()), ResetAt: jsonx.Time(time.UnixMilli(b.WindowEndUnixMs).UTC())})
		}
		results[i] = v
	}
	return c.JSON(http.StatusOK, map[string]any{"applied": ans.Applied, "reviewReference": ref, "results": results})
}
