package gate

import (
	"fmt"
	"strconv"
	"time"

	"github.com/tollgate-dev/tollgate/enforcer/decision"
	"github.com/tollgate-dev/tollgate/enforcer/settleq"
	"github.com/tollgate-dev/tollgate/enforcer/startq"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/money"
)

// voidFailed voids the start item of a request that will not be forwarded when the
// control plane call that should have recorded it failed (err, startq.Reason
// "controlplane"), and reports whether it did (done is then called once the void is
// answered). Such a start may be durable all the same: the commit went through and its
// answer was lost (a control plane that crashed, or gave up on a Postgres failover after
// committing). Nobody will settle it, and under the in-flight guard it held its
// reservation and its place under the member's cap until the guard's horizon
// (accounting.GuardHorizon, 20 minutes): a capped member was refused "too many requests
// in flight" with none in flight. A void removes it if it was recorded and is nothing to
// do otherwise. Only guarded starts (a reservation or a cap) are voided: an unguarded
// one holds nothing back, and voiding every failed start would fill the settle queue
// with voids during a control plane outage. The void takes a settlement slot of its
// own; with none free it is not sent, and the start is left to the horizon and to
// abandonment recovery, as before (docs/usage-limits.md, "Bounded overshoot").
func (g *Gate) voidFailed(item *internalv1.StartItem, err error, done func(settleq.Result)) bool {
	if startq.Reason(err) != "controlplane" || item.GetReservationMicroUsd() <= 0 && item.GetMaxInFlight() <= 0 {
		return false
	}
	res, ok := g.Settle.Reserve()
	if !ok {
		return false
	}
	g.Inflight.Void(item, res, done)
	return true
}

// GuardRetryAfter is the Retry-After of the in-flight guard's refusals: they lift as soon
// as a request in flight finishes.
const GuardRetryAfter = "1"

type reservedDetails struct {
	Reason            string `json:"reason"`
	Timeframe         string `json:"timeframe"`
	UsedMicroUSD      int64  `json:"usedMicroUsd"`
	ReservedMicroUSD  int64  `json:"reservedMicroUsd"`
	AllowanceMicroUSD int64  `json:"allowanceMicroUsd"`
	InFlightRequests  int64  `json:"inFlightRequests"`
	ResetAt           string `json:"resetAt,omitempty"`
}

type concurrencyDetails struct {
	Reason              string `json:"reason"`
	InFlightRequests    int64  `json:"inFlightRequests"`
	MaxInFlightRequests int32  `json:"maxInFlightRequests"`
}

// guardRefusal is the 429 of a start the control plane's in-flight guard refused, in
// usage state state (the member's, from the decision that admitted it: never blocked,
// since a limit spent in that record is refused before any start, and one spent in
// Postgres only is spentRefusal's).
func guardRefusal(res startq.Result, state decision.State) Answer {
	g := res.Guard
	if res.Outcome == internalv1.StartOutcome_START_OUTCOME_CONCURRENCY_LIMITED {
		a := Refusal(ReasonConcurrencyLimit)
		a.UsageState, a.RetryAfter = string(state), GuardRetryAfter
		a.Body = mustJSON(errorBody{Error: errorObject{Type: "rate_limit_error", Code: CodeConcurrencyLimitExceeded,
			Message: fmt.Sprintf("Too many requests in flight: %d, the most your usage policy allows; retry when one finishes.",
				g.GetInFlight()),
			Details: concurrencyDetails{Reason: "concurrency_limit", InFlightRequests: g.GetInFlight(), MaxInFlightRequests: g.GetMaxInFlight()}}})
		return a
	}
	a := Refusal(ReasonUsageReserved)
	a.UsageState, a.RetryAfter = string(state), GuardRetryAfter
	det := reservedDetails{Reason: "in_flight_reserved", Timeframe: g.GetTimeframe(), UsedMicroUSD: g.GetUsedMicroUsd(),
		ReservedMicroUSD: g.GetReservedMicroUsd(), AllowanceMicroUSD: g.GetAllowanceMicroUsd(), InFlightRequests: g.GetInFlight()}
	if end := g.GetWindowEndUnixMs(); end > 0 {
		det.ResetAt = timestamp(time.UnixMilli(end))
	}
	a.Body = mustJSON(errorBody{Error: errorObject{Type: "usage_limit_error", Code: CodeInFlightReserved,
		Message: fmt.Sprintf("Usage limit reached counting requests in flight (%s): %s USD settled and %s USD reserved by %s in flight, of %s USD; retry when they finish.",
			g.GetTimeframe(), money.FormatUSD(g.GetUsedMicroUsd()), money.FormatUSD(g.GetReservedMicroUsd()),
			plural(g.GetInFlight(), "request"), money.FormatUSD(g.GetAllowanceMicroUsd())),
		Details: det}})
	return a
}

func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.FormatInt(n, 10) + " " + noun + "s"
}

// spentRefusal is the 429 of a start the guard refused because settled spend alone had
// reached a hard limit (START_OUTCOME_LIMIT_RESERVED with the window's used_micro_usd at
// its allowance_micro_usd, reserved aside): d was decided on a record that did
// not hold the last settlements yet. It is the specification's block, as d would have
// been on a fresh record: the guard's window exhausted with the spend and allowance the
// guard read, Retry-After until the latest reset among the exhausted hard windows, and
// X-Should-Retry false. It is not kept (BlockedMembers): the record it corrects lags.
func spentRefusal(res startq.Result, d *decision.Decision, orgID, memberID string, now time.Time, askURL string) Answer {
	g := res.Guard
	fresh := *d
	fresh.Result, fresh.State, fresh.RetryAt = decision.Blocked, decision.StateBlocked, time.Time{}
	for i := range fresh.Buckets {
		b := &fresh.Buckets[i]
		if string(b.Window.Timeframe) == g.GetTimeframe() {
			b.Used, b.Allowance, b.Exhausted = g.GetUsedMicroUsd(), g.GetAllowanceMicroUsd(), true
		}
		if b.Exhausted && b.HardLimit && b.Window.End.After(fresh.RetryAt) {
			fresh.RetryAt = b.Window.End
		}
	}
	if fresh.RetryAt.IsZero() {
		fresh.RetryAt = time.UnixMilli(g.GetWindowEndUnixMs())
	}
	body, ask := blockedBody(&fresh, orgID, memberID, now, askURL)
	return blockedAnswer(decision.SecondsUntil(fresh.RetryAt, now), body, ask, limitsOf(&fresh))
}
