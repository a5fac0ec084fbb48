package limits

import (
	"time"

	"github.com/tollgate-dev/tollgate/pkg/money"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// Counter is one member-period counter as stored; a missing row is the zero Counter.
type Counter struct {
	Used      int64
	Extension int64
	Legacy    bool
	// Incomplete counts the incomplete receipts charged to this period. Coverage judges a
	// period's completeness on it: the tracking row's count spans every period.
	Incomplete int64
}

// Bucket is one limited timeframe of a member's status: the winner and the counter of
// the current window.
type Bucket struct {
	ID      string
	Window  window.Window
	Winner  *Winner
	Counter Counter
	// PendingRequest: the member has a pending extension request for this bucket.
	PendingRequest bool
}

// Allowance is base + extension. Bases are bounded by money.MaxAllowanceMicroUSD and
// extensions by ceil(base/4), so this cannot overflow for stored values; the check
// guards against corrupt rows all the same.
func (b Bucket) Allowance() (int64, error) {
	return money.AddChecked(b.Winner.Base, b.Counter.Extension)
}

// Remaining is allowance - used; negative when in-flight work overshot the limit.
func (b Bucket) Remaining() (int64, error) {
	a, err := b.Allowance()
	if err != nil {
		return 0, err
	}
	return money.SubChecked(a, b.Counter.Used)
}

// Exhausted tells whether spend reached the allowance.
func (b Bucket) Exhausted() (bool, error) {
	a, err := b.Allowance()
	return b.Counter.Used >= a, err
}

// State is a member's overall usage state.
type State string

// The states of ACCOUNTING.md.
const (
	Unlimited   State = "unlimited"
	Blocked     State = "blocked"
	OverLimit   State = "over_limit"
	WithinLimit State = "within_limit"
)

// StateOf derives the state from a member's limited buckets: unlimited when there are
// none, blocked when a hard bucket is exhausted, over_limit when a soft one is, else
// within_limit. Blocked outranks over_limit because it is what admission acts on.
func StateOf(buckets []Bucket) (State, error) {
	if len(buckets) == 0 {
		return Unlimited, nil
	}
	state := WithinLimit
	for _, b := range buckets {
		done, err := b.Exhausted()
		if err != nil {
			return "", err
		}
		if !done {
			continue
		}
		if b.Winner.Policy.HardLimit {
			return Blocked, nil
		}
		state = OverLimit
	}
	return state, nil
}

// Refusal is why a member may not ask for an extension of a bucket; empty means they may.
// The values are the error codes of the submit route.
type Refusal string

// The refusals, in the order Eligibility checks them.
const (
	Eligible              Refusal = ""
	NoUsageLimit          Refusal = "no_usage_limit"
	ResetRequestsDisabled Refusal = "reset_requests_disabled"
	ZeroBaseAllowance     Refusal = "zero_base_allowance"
	ExtensionAlreadyUsed  Refusal = "extension_already_used"
	UsageLimitNotReached  Refusal = "usage_limit_not_reached"
)

// Eligibility applies the rules for asking: the timeframe has a winner, the policy allows
// requests, the base is above zero, the bucket's one extension is unused, and spend has
// reached the allowance. (One pending request per bucket is the caller's concern: a
// duplicate submit answers the pending request instead of refusing.)
func Eligibility(b Bucket) (Refusal, error) {
	switch {
	case b.Winner == nil:
		return NoUsageLimit, nil
	case !b.Winner.Policy.AllowRequestReset:
		return ResetRequestsDisabled, nil
	case b.Winner.Base <= 0:
		return ZeroBaseAllowance, nil
	case b.Counter.Extension > 0:
		return ExtensionAlreadyUsed, nil
	}
	done, err := b.Exhausted()
	if err != nil {
		return "", err
	}
	if !done {
		return UsageLimitNotReached, nil
	}
	return Eligible, nil
}

// CanRequestReset is what status reads show: eligible and nothing pending already.
func CanRequestReset(b Bucket) (bool, error) {
	r, err := Eligibility(b)
	return r == Eligible && !b.PendingRequest, err
}

// Tracking is a member's tracking row (the capture fence and settlement progress).
type Tracking struct {
	Version                 int64
	CaptureEnabled          bool
	Pending                 int64 // starts still pending (counted from usage_request_starts when read)
	StartedAt               time.Time
	LastSettlementAt        *time.Time
	LastSettlementRequestID *string
	// LastSettlementCostBasis is the cost basis of the last settled receipt.
	LastSettlementCostBasis *string
	Unpriced                int64
	Incomplete              int64
	// Estimated counts the tracked receipts whose tokens the enforcer estimated.
	Estimated int64
}

// Historical coverage values and the reasons history is unknown.
const (
	CoverageUnknown           = "unknown"
	CoverageTrackedSinceEpoch = "tracked_since_epoch"

	ReasonTrackingNotStarted     = "tracking_not_started"
	ReasonPeriodPredatesTracking = "period_predates_tracking"
	ReasonLegacyCounter          = "legacy_counter"
)

// Coverage is the coverage object of every status read.
type Coverage struct {
	TrackingVersion         int64
	CaptureEnabled          bool
	PendingRequests         *int64 // nil before tracking starts
	SettlementReady         bool
	TrackingStartedAt       *time.Time
	HistoricalCoverage      string
	HistoricalUnknownReason *string
	LastSettlementAt        *time.Time
	LastSettlementRequestID *string
	LastSettlementCostBasis *string
	UnpricedRequests        int64
	IncompleteRequests      int64
	EstimatedRequests       int64
	Complete                bool
}

// CoverageOf builds the coverage object from the tracking row (nil when none) and the
// member's current windows and counters. A period is historical-unknown when tracking
// has not started, when it began before the tracking epoch (its early part may hold
// untracked spend), or when its counter came from a legacy writer; the reasons are
// checked in that order. While capture is suspended every current period reads as
// beginning before the epoch (period_predates_tracking), a period that began during the
// suspension too: the member's next epoch begins only when capture resumes (resume
// restarts trackingStartedAt, after which that period predates it anyway), and a
// suspension is how an operator lets a writer without durable tracking (a rollback, a
// legacy writer) charge the counters meanwhile, so nothing in such a period is known
// to be tracked. settlementReady means only that nothing is pending;
// complete additionally needs known history and no incomplete receipt in the periods
// shown (spec rule 13: "later fully tracked periods become complete only when no
// pending or incomplete receipts remain"). So it reads the current counters' own
// incomplete counts, not the tracking row's, which counts every tracked receipt since
// the epoch (rule 18) and would keep every later period incomplete after one cut stream.
// Pending stays the member's whole count (settlementReady, as ACCOUNTING.md defines
// complete): a start pending since an earlier period would charge that period, but it is
// an abandoned request that coverage keeps counting until recovery closes it, and that
// ends, unlike a count of receipts.
func CoverageOf(tr *Tracking, windows [3]window.Window, counters [3]Counter) Coverage {
	c := Coverage{CaptureEnabled: true, HistoricalCoverage: CoverageTrackedSinceEpoch}
	var reason string
	if tr == nil {
		reason = ReasonTrackingNotStarted
	} else {
		c.TrackingVersion = tr.Version
		c.CaptureEnabled = tr.CaptureEnabled
		pending := tr.Pending
		c.PendingRequests = &pending
		c.SettlementReady = tr.Pending == 0
		started := tr.StartedAt
		c.TrackingStartedAt = &started
		c.LastSettlementAt = tr.LastSettlementAt
		c.LastSettlementRequestID = tr.LastSettlementRequestID
		c.LastSettlementCostBasis = tr.LastSettlementCostBasis
		c.UnpricedRequests = tr.Unpriced
		c.IncompleteRequests = tr.Incomplete
		c.EstimatedRequests = tr.Estimated
		if !tr.CaptureEnabled {
			reason = ReasonPeriodPredatesTracking // the next epoch begins at the resume
		}
		for _, w := range windows {
			if w.Start.Before(tr.StartedAt) {
				reason = ReasonPeriodPredatesTracking
				break
			}
		}
	}
	if reason == "" {
		for _, k := range counters {
			if k.Legacy {
				reason = ReasonLegacyCounter
				break
			}
		}
	}
	if reason != "" {
		c.HistoricalCoverage = CoverageUnknown
		c.HistoricalUnknownReason = &reason
	}
	incomplete := false
	for _, k := range counters {
		incomplete = incomplete || k.Incomplete > 0
	}
	c.Complete = reason == "" && !incomplete && c.SettlementReady
	return c
}
