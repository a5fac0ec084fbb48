package gate

import (
	"log/slog"

	"github.com/tollgate-dev/tollgate/enforcer/decision"
)

// Reason is why a check was answered as it was. Its label (String) is the reason label
// of tollgate_enforcer_decisions_total and of log lines: dashboards and alerts select on
// these values, so a label never changes. A refusal's reason carries the whole
// refusal: status, decision, headers and, unless it is rendered per answer, body. The
// table below (reasons) is the one place they are written down.
type Reason uint8

// The reasons. The zero Reason is no answer at all (a check its caller abandoned).
const (
	reasonNone Reason = iota

	// Admissions, by the usage state they are admitted in.
	ReasonWithinLimit
	ReasonOverLimit
	ReasonUnlimited

	// 401: no Tollgate credential of an active member.
	ReasonNoCredential      // none, malformed, or not a tgk_/tgs_ credential
	ReasonUnknownCredential // unknown, revoked or expired
	ReasonInactiveMember    // the member was removed

	// 429: a hard limit is exhausted (body rendered per decision, see blockedBody).
	ReasonUsageLimit
	// 429 from the in-flight guard (docs/usage-limits.md, "Bounded overshoot"), decided
	// by the control plane when it records the start (body rendered per answer, see
	// guardBody): settled spend plus in-flight reservations reached a hard limit, or the
	// member has the most requests in flight its policy allows.
	ReasonUsageReserved
	ReasonConcurrencyLimit

	// 403, from the request-body ext_proc filter: a model nobody priced, in an
	// organization that refuses such models (body names the model).
	ReasonModelNotPriced
	// 403, from the request-body ext_proc filter and the gateway: an endpoint whose cost
	// is billed later, out of the enforcer's sight (body names the endpoint).
	ReasonBillingDeferred

	// 503 decisions: refused in both failure modes.
	ReasonCaptureSuspended
	ReasonEpochChanged // the capture fence moved twice during one check
	ReasonStartRefused // the control plane refused a start for another reason

	// 503 infrastructure failures: in open failure mode admitted as fail_open instead.
	ReasonControlPlane
	ReasonRedis
	ReasonStartQueueFull
	ReasonStartQueueMemberShare
	ReasonStartQueueDeadline
	ReasonStartQueueSettleCapacity
	ReasonStartQueueClosed
	ReasonStartQueueCancelled

	numReasons
)

// reasonSpec is one row of the table.
type reasonSpec struct {
	// label is the metric label and log value.
	label string
	// decision is the decision label of an answer for this reason (for a failure,
	// the closed-mode one: open mode answers fail_open).
	decision string
	// status is the HTTP status: 200 for admissions.
	status int
	// failure: an infrastructure failure, which open failure mode admits.
	failure bool
	// headers are a refusal's response headers, in order. Retry-After's value is the
	// answer's (RetryAfter), not the table's.
	headers []Header
	// body is a refusal's body; nil when it is rendered per answer (429, 403).
	body []byte
}

var (
	headerJSON = Header{"Content-Type", "application/json"}
	// headerNoStore: a refusal is never cached, whichever front door answers it (the
	// gateway, /check, ext_authz, ext_proc), since it holds for this request only.
	headerNoStore = Header{"Cache-Control", "no-store"}
	// Every 503 says accounting is unavailable; the body's details tell capture
	// suspension from the rest.
	unavailableHeaders = []Header{headerJSON, headerNoStore, {HeaderErrorCode, CodeAccountingUnavailable}}
	// A suspended capture lasts until an operator resumes it: X-Should-Retry false, or
	// the official OpenAI and Anthropic SDKs send the call twice more, a second or so
	// apart, each refused again (since 2026-12-07, TestSuspendedCaptureIsNotRetriedBySDKs
	// in enforcer/httpcheck). The other 503s are transient: the SDKs' retries may meet
	// accounting back.
	suspendedHeaders   = []Header{headerJSON, headerNoStore, {HeaderErrorCode, CodeAccountingUnavailable}, {HeaderShouldRetry, "false"}}
	unauthorizedHeader = []Header{headerJSON, headerNoStore}
)

// reasons is the table: every reason, its label, and its answer.
var reasons = [numReasons]reasonSpec{
	reasonNone: {label: "none"},

	ReasonWithinLimit: {label: "within_limit", decision: Admitted, status: 200},
	ReasonOverLimit:   {label: "over_limit", decision: Admitted, status: 200},
	ReasonUnlimited:   {label: "unlimited", decision: Admitted, status: 200},

	ReasonNoCredential:      {label: "no_credential", decision: Unauthorized, status: 401, headers: unauthorizedHeader, body: bodyUnauthorized},
	ReasonUnknownCredential: {label: "unknown_credential", decision: Unauthorized, status: 401, headers: unauthorizedHeader, body: bodyUnauthorized},
	ReasonInactiveMember:    {label: "inactive_member", decision: Unauthorized, status: 401, headers: unauthorizedHeader, body: bodyUnauthorized},

	ReasonUsageLimit: {label: "usage_limit", decision: Blocked, status: 429, headers: []Header{headerJSON, headerNoStore,
		{HeaderErrorCode, CodeUsageLimitExceeded}, {HeaderUsageState, "blocked"}, {HeaderRetryAfter, ""}, {HeaderShouldRetry, "false"}}},

	// Both guard refusals lift when requests in flight finish: a short Retry-After and
	// X-Should-Retry true let the SDKs wait and try again by themselves. Neither is the
	// specification's usage-limit block: each has its own code and carries the member's
	// usage state (per answer), which says blocked only for a spent limit. A reserved
	// limit is not spent (settled spend is below it), and a client corroborates a block
	// with a status read, which judges settled spend: claiming blocked here would be a
	// block no read could ever confirm.
	ReasonUsageReserved: {label: "usage_reserved", decision: Blocked, status: 429, headers: []Header{headerJSON, headerNoStore,
		{HeaderErrorCode, CodeInFlightReserved}, {HeaderUsageState, ""}, {HeaderRetryAfter, ""}, {HeaderShouldRetry, "true"}}},
	ReasonConcurrencyLimit: {label: "concurrency_limit", decision: Blocked, status: 429, headers: []Header{headerJSON, headerNoStore,
		{HeaderErrorCode, CodeConcurrencyLimitExceeded}, {HeaderUsageState, ""}, {HeaderRetryAfter, ""}, {HeaderShouldRetry, "true"}}},

	ReasonModelNotPriced: {label: "model_not_priced", decision: Unauthorized, status: 403,
		headers: []Header{headerJSON, headerNoStore, {HeaderErrorCode, CodeModelNotPriced}}},
	ReasonBillingDeferred: {label: "billing_deferred", decision: Unauthorized, status: 403,
		headers: []Header{headerJSON, headerNoStore, {HeaderErrorCode, CodeBillingDeferred}}},

	ReasonCaptureSuspended: {label: "capture_suspended", decision: Unavailable, status: 503, headers: suspendedHeaders, body: bodyCaptureSuspended},
	ReasonEpochChanged:     {label: "epoch_changed", decision: Unavailable, status: 503, headers: unavailableHeaders, body: bodyUnavailable},
	ReasonStartRefused:     {label: "start_refused", decision: Unavailable, status: 503, headers: unavailableHeaders, body: bodyUnavailable},

	ReasonControlPlane:             {label: "controlplane", decision: Unavailable, status: 503, failure: true, headers: unavailableHeaders, body: bodyUnavailable},
	ReasonRedis:                    {label: "redis", decision: Unavailable, status: 503, failure: true, headers: unavailableHeaders, body: bodyUnavailable},
	ReasonStartQueueFull:           {label: "start_queue_full", decision: Unavailable, status: 503, failure: true, headers: unavailableHeaders, body: bodyUnavailable},
	ReasonStartQueueMemberShare:    {label: "start_queue_member_share", decision: Unavailable, status: 503, failure: true, headers: unavailableHeaders, body: bodyUnavailable},
	ReasonStartQueueDeadline:       {label: "start_queue_deadline", decision: Unavailable, status: 503, failure: true, headers: unavailableHeaders, body: bodyUnavailable},
	ReasonStartQueueSettleCapacity: {label: "start_queue_settle_capacity", decision: Unavailable, status: 503, failure: true, headers: unavailableHeaders, body: bodyUnavailable},
	ReasonStartQueueClosed:         {label: "start_queue_closed", decision: Unavailable, status: 503, failure: true, headers: unavailableHeaders, body: bodyUnavailable},
	ReasonStartQueueCancelled:      {label: "start_queue_cancelled", decision: Unavailable, status: 503, failure: true, headers: unavailableHeaders, body: bodyUnavailable},
}

func (r Reason) spec() *reasonSpec {
	if r >= numReasons {
		return &reasons[reasonNone]
	}
	return &reasons[r]
}

// String is the reason's label.
func (r Reason) String() string { return r.spec().label }

// LogValue logs the label (slog.LogValuer), in text and JSON logs alike.
func (r Reason) LogValue() slog.Value { return slog.StringValue(r.spec().label) }

// Status is the HTTP status of an answer for r: 200 for admissions, else the refusal's
// (a failure's 503 is what closed mode answers).
func (r Reason) Status() int { return r.spec().status }

// Decision is the decision label of an answer for r (for a failure, closed mode's).
func (r Reason) Decision() string { return r.spec().decision }

// Failure reports whether r is an infrastructure failure, which open failure mode
// admits instead of refusing.
func (r Reason) Failure() bool { return r.spec().failure }

// ErrorCode is the X-Service-Error-Code of a refusal for r ("" when it has none).
func (r Reason) ErrorCode() string {
	for _, h := range r.spec().headers {
		if h.Name == HeaderErrorCode {
			return h.Value
		}
	}
	return ""
}

// Reasons lists every reason, in the table's order.
func Reasons() []Reason {
	rs := make([]Reason, 0, numReasons-1)
	for r := reasonNone + 1; r < numReasons; r++ {
		rs = append(rs, r)
	}
	return rs
}

// admissionReason is the reason of an admission in usage state s (decision.Decide
// admits only within_limit, over_limit and unlimited).
func admissionReason(s decision.State) Reason {
	switch s {
	case decision.OverLimit:
		return ReasonOverLimit
	case decision.Unlimited:
		return ReasonUnlimited
	}
	return ReasonWithinLimit
}

// startFailure is the reason of a start the queue could not make durable, by
// startq.Reason's classification: the queue's own refusals, else the control plane.
func startFailure(queueReason string) Reason {
	switch queueReason {
	case "full":
		return ReasonStartQueueFull
	case "member_share":
		return ReasonStartQueueMemberShare
	case "deadline":
		return ReasonStartQueueDeadline
	case "settle_capacity":
		return ReasonStartQueueSettleCapacity
	case "closed":
		return ReasonStartQueueClosed
	case "cancelled":
		return ReasonStartQueueCancelled
	}
	return ReasonControlPlane
}
