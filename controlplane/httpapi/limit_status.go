package httpapi

import (
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/accounting"
	"github.com/tollgate-dev/tollgate/controlplane/jsonx"
	"github.com/tollgate-dev/tollgate/controlplane/limits"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// Views.

type usageStatusView struct {
	OrganizationID string     `json:"organizationId"`
	MemberID       string     `json:"memberId"`
	State          string     `json:"state"`
	EvaluatedAt    jsonx.Time `json:"evaluatedAt"`
	// Buckets are the limited timeframes (those with a winning policy), day, week, month.
	Buckets []usageBucketView `json:"buckets"`
	// Windows are all three current windows with their spend, limited or not: spend is
	// counted even where no policy applies.
	Windows  []usageWindowView `json:"windows"`
	Coverage usageCoverageView `json:"coverage"`
}

type usageBucketView struct {
	ID                    string                `json:"id"`
	Timeframe             string                `json:"timeframe"`
	PolicyID              string                `json:"policyId"`
	PolicyName            string                `json:"policyName"`
	PolicyRevision        int64                 `json:"policyRevision"`
	Provenance            []usageProvenanceView `json:"provenance"`
	BaseAllowanceMicroUsd int64                 `json:"baseAllowanceMicroUsd"`
	ExtensionMicroUsd     int64                 `json:"extensionMicroUsd"`
	AllowanceMicroUsd     int64                 `json:"allowanceMicroUsd"`
	UsedMicroUsd          int64                 `json:"usedMicroUsd"`
	// ReservedMicroUsd is held by the member's requests in flight under the winning
	// policy's in-flight guard (Tollgate's extension; 0 without it).
	ReservedMicroUsd  int64      `json:"reservedMicroUsd"`
	RemainingMicroUsd int64      `json:"remainingMicroUsd"`
	WindowStart       jsonx.Time `json:"windowStart"`
	ResetAt           jsonx.Time `json:"resetAt"`
	HardLimit         bool       `json:"hardLimit"`
	AllowRequestReset bool       `json:"allowRequestReset"`
	CanRequestReset   bool       `json:"canRequestReset"`
	// ResetRequestStatus is the status of the bucket's newest extension request; null
	// when there is none.
	ResetRequestStatus *string `json:"resetRequestStatus"`
}

type usageProvenanceView struct {
	Kind         string  `json:"kind"`
	AssignmentID string  `json:"assignmentId"`
	MemberID     *string `json:"memberId"`
	TeamID       *string `json:"teamId"`
	TeamName     *string `json:"teamName,omitempty"`
}

type usageWindowView struct {
	Timeframe    string     `json:"timeframe"`
	BucketID     string     `json:"bucketId"`
	WindowStart  jsonx.Time `json:"windowStart"`
	ResetAt      jsonx.Time `json:"resetAt"`
	UsedMicroUsd int64      `json:"usedMicroUsd"`
	// ReservedMicroUsd: the reservations of the member's requests in flight admitted in
	// this window (0 unless a policy's in-flight guard reserves).
	ReservedMicroUsd int64 `json:"reservedMicroUsd"`
	Limited          bool  `json:"limited"`
}

type usageCoverageView struct {
	TrackingVersion         int64       `json:"trackingVersion"`
	CaptureEnabled          bool        `json:"captureEnabled"`
	PendingRequests         *int64      `json:"pendingRequests"`
	SettlementReady         bool        `json:"settlementReady"`
	TrackingStartedAt       *jsonx.Time `json:"trackingStartedAt"`
	HistoricalCoverage      string      `json:"historicalCoverage"`
	HistoricalUnknownReason *string     `json:"historicalUnknownReason"`
	LastSettlementAt        *jsonx.Time `json:"lastSettlementAt"`
	LastSettlementRequestID *string     `json:"lastSettlementRequestId"`
	// LastSettlementCostBasis is how the last settled receipt's cost was known
	// (upstream_cost, reported_usage, estimate, none); null before the first.
	LastSettlementCostBasis *string `json:"lastSettlementCostBasis"`
	UnpricedRequests        int64   `json:"unpricedRequests"`
	IncompleteRequests      int64   `json:"incompleteRequests"`
	// EstimatedRequests counts the tracked receipts whose tokens the enforcer estimated
	// from the bytes it saw (cost basis estimate).
	EstimatedRequests int64 `json:"estimatedRequests"`
	Complete          bool  `json:"complete"`
}

func viewCoverage(cv limits.Coverage) usageCoverageView {
	return usageCoverageView{TrackingVersion: cv.TrackingVersion, CaptureEnabled: cv.CaptureEnabled,
		PendingRequests: cv.PendingRequests, SettlementReady: cv.SettlementReady,
		TrackingStartedAt: jsonx.TimePtr(cv.TrackingStartedAt), HistoricalCoverage: cv.HistoricalCoverage,
		HistoricalUnknownReason: cv.HistoricalUnknownReason, LastSettlementAt: jsonx.TimePtr(cv.LastSettlementAt),
		LastSettlementRequestID: cv.LastSettlementRequestID, LastSettlementCostBasis: cv.LastSettlementCostBasis,
		UnpricedRequests: cv.UnpricedRequests, IncompleteRequests: cv.IncompleteRequests, EstimatedRequests: cv.EstimatedRequests,
		Complete: cv.Complete}
}

func viewProvenance(ps []limits.Source) []usageProvenanceView {
	out := make([]usageProvenanceView, len(ps))
	for i, p := range ps {
		v := usageProvenanceView{Kind: string(p.Kind), AssignmentID: p.AssignmentID}
		switch p.Kind {
		case limits.Direct:
			v.MemberID = &p.MemberID
		case limits.Team:
			v.TeamID, v.TeamName = &p.TeamID, &p.TeamName
		}
		out[i] = v
	}
	return out
}

func viewBucket(b limits.Bucket, latest *store.UsageRequest) (usageBucketView, error) {
	w := b.Winner
	allowance, err := b.Allowance()
	if err != nil {
		return usageBucketView{}, err
	}
	remaining, err := b.Remaining()
	if err != nil {
		return usageBucketView{}, err
	}
	can, err := limits.CanRequestReset(b)
	if err != nil {
		return usageBucketView{}, err
	}
	v := usageBucketView{ID: b.ID, Timeframe: string(b.Window.Timeframe), PolicyID: w.Policy.ID, PolicyName: w.Policy.Name,
		PolicyRevision: w.Policy.Revision, Provenance: viewProvenance(w.Provenance), BaseAllowanceMicroUsd: w.Base,
		ExtensionMicroUsd: b.Counter.Extension, AllowanceMicroUsd: allowance, UsedMicroUsd: b.Counter.Used,
		RemainingMicroUsd: remaining, WindowStart: jsonx.Time(b.Window.Start), ResetAt: jsonx.Time(b.Window.End),
		HardLimit: w.Policy.HardLimit, AllowRequestReset: w.Policy.AllowRequestReset, CanRequestReset: can}
	if latest != nil {
		st := latest.Status
		v.ResetRequestStatus = &st
	}
	return v, nil
}

// statusView renders a member's status at now.
func statusView(mu store.MemberUsage, tr *limits.Tracking, reserved []int64, now time.Time) (usageStatusView, error) {
	v := usageStatusView{OrganizationID: mu.OrgID, MemberID: mu.MemberID, EvaluatedAt: jsonx.Time(now),
		Buckets: []usageBucketView{}, Windows: make([]usageWindowView, 3)}
	var limited []limits.Bucket
	for i := range window.Timeframes {
		b := mu.Bucket(i)
		w := mu.Windows[i]
		v.Windows[i] = usageWindowView{Timeframe: string(w.Timeframe), BucketID: b.ID, WindowStart: jsonx.Time(w.Start),
			ResetAt: jsonx.Time(w.End), UsedMicroUsd: b.Counter.Used, ReservedMicroUsd: reserved[i], Limited: b.Winner != nil}
		if b.Winner == nil {
			continue
		}
		limited = append(limited, b)
		var latest *store.UsageRequest
		if r, ok := mu.Latest[b.ID]; ok {
			latest = &r
		}
		bv, err := viewBucket(b, latest)
		if err != nil {
			return v, err
		}
		// The bucket shows the reservations only where its winner's guard reserves: only
		// there does the guard weigh them against its allowance (accounting.CheckGuard,
		// which refuses at a hard one). Elsewhere they are another window's, and no
		// request is refused for them here; the window view still shows them.
		if b.Winner.Policy.Guard.ReserveInFlight {
			bv.ReservedMicroUsd = reserved[i]
		}
		v.Buckets = append(v.Buckets, bv)
	}
	state, err := limits.StateOf(limited)
	if err != nil {
		return v, err
	}
	v.State = string(state)
	v.Coverage = viewCoverage(limits.CoverageOf(tr, mu.Windows, mu.Counters))
	return v, nil
}

func (s *Server) usageStatusMe(c *Call) error { return s.usageStatus(c, c.Member.ID, false) }

func (s *Server) usageStatusMember(c *Call) error {
	id, err := c.usagePathID("memberId")
	if err != nil {
		return err
	}
	return s.usageStatus(c, id, true)
}

// usageStatus answers a status read. Its reads (the member, the tracking row with the
// pending count, the in-flight reservations, the winners, the counters and each bucket's
// newest extension request) are one read-only REPEATABLE READ transaction (Call.ReadTx):
// one snapshot, no lock and no write (rule 19). So a write committing while the read runs
// shows entirely or not at all: an approval never shows as resetRequestStatus "approved"
// next to the counters from before its grant (state blocked, extension 0), and a
// settlement, which closes its start and charges the counters in one transaction, never
// shows as pending 0 next to the spend from before it. Before, they were separate
// statements, each seeing what had committed by its own start.
// checkMember: the member must be active in the organization (else 404); the caller's own
// read (me) skips it, since authentication found them active.
func (s *Server) usageStatus(c *Call, memberID string, checkMember bool) error {
	var v usageStatusView
	err := c.ReadTx(func(tx pgx.Tx) error {
		if checkMember {
			ok, err := store.ActiveMemberExists(c.Ctx, tx, c.OrgID(), memberID)
			if err != nil {
				return err
			}
			if !ok {
				return errMemberNotFound()
			}
		}
		tr, err := store.UsageTracking(c.Ctx, tx, memberID)
		if err != nil {
			return err
		}
		ws := window.Current(c.now)
		reserved, err := store.InFlightReservations(c.Ctx, tx, memberID, ws[:], c.now.Add(-accounting.GuardHorizon))
		if err != nil {
			return err
		}
		mu, err := store.LoadMemberUsage(c.Ctx, tx, c.OrgID(), memberID, c.now)
		if err != nil {
			return err
		}
		v, err = statusView(mu, tr, reserved, c.now)
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, v)
}
