package gate

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/enforcer/decision"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// Header names of the blocking signal and of admissions.
const (
	HeaderErrorCode  = "X-Service-Error-Code"
	HeaderUsageState = "X-Service-Usage-State"
	HeaderRetryAfter = "Retry-After"
	// HeaderShouldRetry is "false" on the usage-limit 429: the official OpenAI and
	// Anthropic SDKs obey it, where they would otherwise sleep for Retry-After (hours,
	// until the window resets) before retrying.
	HeaderShouldRetry = "X-Should-Retry"
	// HeaderRequestID is added to the upstream request of an admitted request; ext_proc
	// and /settle name the request by it.
	HeaderRequestID = "X-Service-Request-Id"
	// HeaderCodexPromoMessage repeats, on a usage-limit 429, the message's way to ask
	// for more (Answer.Ask). OpenAI's Codex shows no 429's message: on its usage-limit
	// 429 it says "You've hit your usage limit." and, when this header is there, the
	// header's words, then "or try again at <time>." (seen with Codex 0.171;
	// TestCodexThroughTheGateway). Without it a Codex user learned the wait and not the
	// way out.
	HeaderCodexPromoMessage = "X-Codex-Promo-Message"
)

// Error codes of X-Service-Error-Code.
const (
	CodeUsageLimitExceeded    = "service_gateway_usage_limit_exceeded"
	CodeAccountingUnavailable = "service_gateway_accounting_unavailable"
	// CodeModelNotPriced refuses a request for a model nobody priced, in an organization
	// that refuses such models (403, docs/prices.md).
	CodeModelNotPriced = "service_gateway_model_not_priced"
	// CodeBillingDeferred refuses a request whose cost the provider bills later, out of
	// the enforcer's sight (a batch, a background response...; 403, docs/enforcer.md).
	CodeBillingDeferred = "service_gateway_billing_deferred"
	// CodeConcurrencyLimitExceeded refuses a request of a member who has the most
	// requests in flight the winning policy allows (429, docs/usage-limits.md).
	CodeConcurrencyLimitExceeded = "service_gateway_concurrency_limit_exceeded"
	// CodeInFlightReserved refuses a request because settled spend plus the reservations
	// of the member's requests in flight reach a hard limit (429, docs/usage-limits.md).
	// It is not the usage-limit code: no limit is spent yet, so the status read cannot
	// corroborate a block, and the refusal lifts when a request in flight finishes.
	CodeInFlightReserved = "service_gateway_in_flight_reserved"
	// CodeResponseFormatUnsupported refuses a request whose query asks for an answer
	// the usage reader cannot read (400, requestbody.UnreadableAnswer: Google's alt
	// other than json or sse, callback, $ct), or, at /check, a response field mask the
	// proxy cannot drop (docs/gateway.md, docs/enforcer.md).
	CodeResponseFormatUnsupported = "service_gateway_response_format_unsupported"
	// CodeMethodOverrideUnsupported refuses, at /check, a request naming another method
	// in a header (X-HTTP-Method-Override, X-HTTP-Method, X-Method-Override), which a
	// forward-auth answer cannot remove (400, docs/enforcer.md).
	CodeMethodOverrideUnsupported = "service_gateway_method_override_unsupported"
	// CodeMethodUnsupported refuses, at every front door, a request whose method has
	// the upstream echo the request, the provider's credential in it (TRACE, TRACK; 405,
	// MethodRefusal).
	CodeMethodUnsupported = "service_gateway_method_unsupported"
	// CodePathUnsupported refuses, at the gateway and /check, a path with a dot segment
	// ("." or "..", in any encoding), which the upstream may resolve to another path than
	// the one judged (400, PathRefusal).
	CodePathUnsupported = "service_gateway_path_unsupported"
	// CodeEnforcerUnavailable is never the enforcer's answer: it is the proxy's, when the
	// enforcer did not answer its check at all (Envoy's ext_authz failing closed, 503,
	// deploy/envoy/envoy.yaml's local_reply_config; docs/enforcer.md, "Answers").
	CodeEnforcerUnavailable = "service_gateway_enforcer_unavailable"
)

// Decision labels of metrics and answers.
const (
	Admitted     = "admitted"
	Blocked      = "blocked"
	Unavailable  = "unavailable"
	Unauthorized = "unauthorized"
	FailOpen     = "fail_open"
)

// Answer is the outcome of a check, protocol-neutral. The gate's constructors fill it
// from its Reason (Refusal, ModelNotPricedRefusal, and the gate's own admissions).
type Answer struct {
	// Status is 200 (admitted or fail_open) or the refusal's: Reason.Status().
	Status int
	// Decision labels metrics: admitted, fail_open, or the reason's refusal decision
	// (blocked, unauthorized, unavailable).
	Decision string
	// Reason is why; its label is the reason label of metrics and logs.
	Reason Reason
	// RequestID is set when admitted: the upstream request carries it.
	RequestID string
	// MemberID and OrganizationID name the member the credential identified, on every
	// answer decided after that (admitted, blocked, suspended...); empty on a refused or
	// unknown credential. The gateway's access log names them.
	MemberID, OrganizationID string
	// Guarded: admitted with a durable start under the in-flight guard (it reserves, or
	// its member has a cap). Until its settlement commits the guard counts it in flight,
	// so a front door settles it before the client sees its response end
	// (docs/usage-limits.md, "Bounded overshoot").
	Guarded bool
	// UsageState is X-Service-Usage-State: sent to the client on admission; "blocked"
	// on a 429, whose reason's headers carry it.
	UsageState string
	// RetryAfter is the Retry-After value in seconds (429).
	RetryAfter string
	// Limits are, when admitted on a member's record or refused for its usage limit, the
	// member's limited windows as the check found them, sent to the client in Codex's
	// rate-limit headers (AdmittedHeaders, DeniedHeaders).
	Limits Limits
	// ask is, on a usage-limit 429 whose listed window lets the member ask for more, the
	// message's sentence saying how (Ask), unless kept is set.
	ask string
	// kept is the kept refusal (of keptBy) a blocked member was refused from, if any:
	// its way to ask is found from it when the headers are written (Ask), not on every
	// check, since ext_authz mostly answers from the response it encoded before.
	kept   *blockedEntry
	keptBy *BlockedMembers
	// Body is the JSON body of a refusal: the reason's, or one rendered for this answer
	// (429, 403). The reasons' bodies and a blocked member's kept 429 body are shared
	// bytes, handed out again for the same body (package authz keys on them).
	Body []byte
	// Took is how long the check took; RecordWait the part of it spent reading the
	// member's usage record (Redis, and the control plane when the mirror did not know
	// the member; 0 when none was read); StartWait the part spent waiting for the
	// durable start (queue and call; 0 when none was made). The gateway can report them
	// to the client (Server-Timing).
	Took, RecordWait, StartWait time.Duration
}

// Header is one response or request header.
type Header struct{ Name, Value string }

// Allowed reports whether the request may go upstream.
func (a *Answer) Allowed() bool { return a.Status == 200 }

// DeniedHeaders are the headers of a refusal, in a stable order: its reason's, with
// this answer's Retry-After, and its usage state where the table leaves it open; then
// X-Codex-Promo-Message when the answer names a way to ask for more in printable ASCII
// (a header's value; a member API URL with other characters leaves it to the body);
// then a usage-limit 429's limits (Limits.AppendHeaders), which Codex shows spent.
func (a *Answer) DeniedHeaders() []Header {
	spec := a.Reason.spec().headers
	h := make([]Header, len(spec), len(spec)+7)
	copy(h, spec)
	for i := range h {
		switch {
		case h[i].Name == HeaderRetryAfter:
			h[i].Value = a.RetryAfter
		case h[i].Name == HeaderUsageState && h[i].Value == "":
			h[i].Value = a.UsageState
		}
	}
	if ask := a.Ask(); ask != "" && printableASCII(ask) {
		h = append(h, Header{HeaderCodexPromoMessage, ask})
	}
	return a.Limits.AppendHeaders(h)
}

// Ask is, on a usage-limit 429 whose listed window lets the member ask for more, the
// message's sentence saying how (askForMore), sent again as X-Codex-Promo-Message;
// empty on any other answer.
func (a *Answer) Ask() string {
	if a.kept != nil {
		return a.keptBy.askOf(a.kept.key, a.kept.member)
	}
	return a.ask
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// Refusal is the answer refusing a request for r, with the reason's status, decision
// and body (nil for the reasons whose body is rendered per answer: usage_limit and
// model_not_priced).
func Refusal(r Reason) Answer {
	s := r.spec()
	return Answer{Status: s.status, Decision: s.decision, Reason: r, Body: s.body}
}

var (
	// bodyUnauthorized is the 401 of every front door (the gateway, ext_authz, /check):
	// the error object the OpenAI and Anthropic APIs answer, which their SDKs decode
	// into their error types. Before 2026-12-03 it was {"error":"unauthorized"}, whose
	// string error the official OpenAI Go SDK (openai-go) cannot decode: a bad key
	// was a *json.UnmarshalTypeError in its program, with no status to read, not an
	// *openai.Error 401. error.code keeps the old word.
	bodyUnauthorized = UnauthorizedBody("A valid Tollgate API key is required: give the member's key to the client as its API key (Authorization: Bearer or x-api-key).")

	bodyCaptureSuspended = mustJSON(errorBody{Error: errorObject{Type: "api_error", Code: CodeAccountingUnavailable,
		Message: "Usage capture is suspended for this member; requests are refused until an operator resumes it.",
		Details: map[string]string{"reason": "capture_suspended"}}})
	bodyUnavailable = mustJSON(errorBody{Error: errorObject{Type: "api_error", Code: CodeAccountingUnavailable,
		Message: "Usage accounting is temporarily unavailable; retry shortly.",
		Details: map[string]string{"reason": "accounting_unavailable"}}})
)

// BodyEnforcerUnavailable is the 503 body of a proxy in front of the enforcer whose check
// the enforcer did not answer (CodeEnforcerUnavailable): deploy/envoy/envoy.yaml's local
// reply carries it as text (TestEnvoyAnswersAnUnreachableEnforcerInJSON holds the two
// equal), and tollgate dev's demo proxy answers it.
var BodyEnforcerUnavailable = mustJSON(errorBody{Error: errorObject{Type: "api_error", Code: CodeEnforcerUnavailable,
	Message: "Usage limits cannot be checked right now (the enforcer did not answer); retry shortly.",
	Details: map[string]string{"reason": "enforcer_unavailable"}}})

// UnauthorizedBody is a 401's body saying message: the error object of every 401 of the
// front doors (bodyUnauthorized), for a front door's own reason to refuse a key.
func UnauthorizedBody(message string) []byte {
	return mustJSON(errorBody{Error: errorObject{Type: "authentication_error", Code: "unauthorized", Message: message}})
}

// APIErrorBody is the body of a front door's own 5xx with code and message, in the shape
// of every refusal (errorBody), for an answer that is not the gate's (/check's while its
// enforcer shuts down).
func APIErrorBody(code, message string) []byte {
	return mustJSON(errorBody{Error: errorObject{Type: "api_error", Code: code, Message: message}})
}

// errorBody is a refusal's body: the error object the OpenAI and Anthropic APIs answer,
// in Anthropic's envelope, {"type":"error","error":{...}} (an OpenAI client reads the
// object alone). Before 2026-12-07 the envelope's type was missing: the official SDKs
// read the object all the same, but Vercel's AI SDK (@ai-sdk/anthropic) takes a body
// that is not Anthropic's whole shape for no error body at all, and its error said only
// the status text ("Too Many Requests"): a member never read why, nor how to ask for
// more (TestGateAnswers).
type errorBody struct {
	Type  errorEnvelope `json:"type"`
	Error errorObject   `json:"error"`
}

// errorEnvelope is the envelope's type, always "error".
type errorEnvelope struct{}

func (errorEnvelope) MarshalJSON() ([]byte, error) { return []byte(`"error"`), nil }

type errorObject struct {
	Type    string `json:"type"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Details any    `json:"details"`
	// ResetsAt is the usage-limit 429's retryAt in Unix seconds, the field OpenAI's
	// Codex reads beside the type usage_limit_reached (blockedBody); absent elsewhere.
	ResetsAt int64 `json:"resets_at,omitempty"`
}

type blockedDetails struct {
	ExhaustedBuckets []exhaustedBucket `json:"exhaustedBuckets"`
	RetryAt          string            `json:"retryAt"`
}

type exhaustedBucket struct {
	BucketID          string `json:"bucketId"`
	Timeframe         string `json:"timeframe"`
	UsedMicroUSD      int64  `json:"usedMicroUsd"`
	AllowanceMicroUSD int64  `json:"allowanceMicroUsd"`
	ResetAt           string `json:"resetAt"`
	HardLimit         bool   `json:"hardLimit"`
	AllowRequestReset bool   `json:"allowRequestReset"`
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// timestamp renders instants as the REST API does: RFC 3339, UTC, with Z.
func timestamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// ModelNotPricedRefusal is the 403 for a request naming a model that neither the
// organization nor the shipped catalog prices, in an organization that refuses such
// models. The request never goes upstream and is not charged.
func ModelNotPricedRefusal(model string) Answer {
	a := Refusal(ReasonModelNotPriced)
	a.Body = mustJSON(errorBody{Error: errorObject{Type: "invalid_request_error", Code: CodeModelNotPriced,
		Message: "This organization refuses models without a price; ask an owner or admin to price this model.",
		Details: map[string]string{"model": model}}})
	return a
}

// BillingDeferredRefusal is the 403 for a request whose cost the provider bills later,
// out of the enforcer's sight (requestbody.Deferred names the endpoint): a member's
// limit cannot hold over work the enforcer never sees the cost of. The request never
// goes upstream and is not charged. An operator may let such requests through
// (TOLLGATE_DEFERRED_BILLING=allow).
func BillingDeferredRefusal(endpoint string) Answer {
	a := Refusal(ReasonBillingDeferred)
	a.Body = mustJSON(errorBody{Error: errorObject{Type: "invalid_request_error", Code: CodeBillingDeferred,
		Message: "This endpoint's cost is billed later, where Tollgate cannot see or charge it (" + endpoint +
			"); it is refused so that usage limits hold. Send the requests one by one instead, or ask an operator to allow it.",
		Details: map[string]string{"endpoint": endpoint}}})
	return a
}

// FormRefusal is the refusal of a request's form, answered by a front door before the
// request is checked: no decision is made and nothing is admitted or charged, so it is
// no Reason of the table and counts no decision. Every front door answers the same
// status, headers (FormRefusal.Headers) and body.
type FormRefusal struct {
	Status int
	// Code is the X-Service-Error-Code.
	Code string
	Body []byte
	// Allow, when set, is the Allow header of a 405 (MethodRefusal).
	Allow string
}

// Headers are the refusal's response headers: Content-Type, Cache-Control: no-store and
// X-Service-Error-Code, and Allow when it is set.
func (f FormRefusal) Headers() []Header {
	if f.Allow != "" {
		return []Header{headerJSON, headerNoStore, {HeaderErrorCode, f.Code}, {"Allow", f.Allow}}
	}
	return []Header{headerJSON, headerNoStore, {HeaderErrorCode, f.Code}}
}

// Write answers the refusal on an HTTP front door (the gateway, /check).
func (f FormRefusal) Write(w http.ResponseWriter) { WriteHTTP(w, f.Status, f.Headers(), f.Body) }

// WriteHTTP answers status, headers and body on an HTTP front door (a refusal, the
// gateway's or /check's). A refusal's headers say it is never cached (Cache-Control:
// no-store, in Answer.DeniedHeaders and FormRefusal.Headers), so ext_authz and ext_proc,
// which send the same headers, say it too.
func WriteHTTP(w http.ResponseWriter, status int, headers []Header, body []byte) {
	h := w.Header()
	for _, x := range headers {
		h.Set(x.Name, x.Value)
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// ResponseFormatRefusal is the 400 refusing a request whose query parameter param (its
// name decoded, as requestbody.UnreadableAnswer names it) asks for an answer the usage
// reader cannot read, before the request is checked: the gateway's, ext_authz's and
// /check's alike. /check refuses a response field mask the same way (fields, $fields,
// the X-Goog-FieldMask header), since a forward-auth proxy cannot drop it as the others
// do.
func ResponseFormatRefusal(param string) FormRefusal {
	return FormRefusal{Status: 400, Code: CodeResponseFormatUnsupported, Body: mustJSON(errorBody{Error: errorObject{
		Type: "invalid_request_error", Code: CodeResponseFormatUnsupported,
		Message: "The query parameter " + param + " asks for an answer whose usage Tollgate cannot read " +
			"(alt is proxied as json or sse; callback, $callback and $ct are not proxied, nor a response field mask where it cannot be dropped): remove it.",
		Details: map[string]string{"parameter": param}}})}
}

// MethodOverrideRefusal is /check's 400 for a request naming another method in header
// (X-HTTP-Method-Override, X-HTTP-Method, X-Method-Override): a request is judged by
// its own method, and a forward-auth answer cannot remove the header, as the gateway and
// ext_authz do.
func MethodOverrideRefusal(header string) FormRefusal {
	return methodOverrideRefusal("header", "header", header)
}

// MethodOverrideParamRefusal is /check's 400 for a query naming another method
// (Google's $httpMethod, requestbody.MethodOverride), as MethodOverrideRefusal is for a
// header: the gateway and ext_authz drop the parameter, a forward-auth answer cannot.
func MethodOverrideParamRefusal(param string) FormRefusal {
	return methodOverrideRefusal("query parameter", "parameter", param)
}

// methodOverrideRefusal is the 400 of MethodOverrideRefusal and
// MethodOverrideParamRefusal: name is the header or query parameter asking for another
// method, called what in the message ("header", "query parameter") and word where the
// message tells the caller to drop it and as the Details key ("header", "parameter").
func methodOverrideRefusal(what, word, name string) FormRefusal {
	return FormRefusal{Status: 400, Code: CodeMethodOverrideUnsupported, Body: mustJSON(errorBody{Error: errorObject{
		Type: "invalid_request_error", Code: CodeMethodOverrideUnsupported,
		Message: "The " + what + " " + name + " asks the provider to run the request as another method, which Tollgate does not judge it by: " +
			"send the request with its own method, without the " + word + ".",
		Details: map[string]string{word: name}}})}
}

// PathRefusal is the 400 of a request whose path has a dot segment ("." or "..", in any
// encoding: requestbody.DotSegment), before it is checked: the upstream resolves it
// (RFC 3986, 5.2.4: nginx, Tomcat, CDNs), and runs another path than the one judged.
// /check's: a forward-auth proxy sends the path on as it came, and "/v1/batches/." named
// no batch to /check (the gateway answers its own, the same code).
func PathRefusal() FormRefusal {
	return FormRefusal{Status: http.StatusBadRequest, Code: CodePathUnsupported, Body: mustJSON(errorBody{Error: errorObject{
		Type: "invalid_request_error", Code: CodePathUnsupported,
		Message: "The path has a dot segment (\".\" or \"..\", in any encoding), which the upstream would resolve to another path than the one judged: send the path resolved."}})}
}

// MethodRefusal is the 405 of a request whose method no front door lets through, in
// any case (a server that matches methods loosely runs "trace" as TRACE): TRACE and
// TRACK (IIS's), which ask the upstream to echo the request it received (RFC 9110,
// 9.3.8; Apache answers them by default). Proxied, that request carries the provider's
// credential the front door set (the gateway's route credential, ext_authz's
// TOLLGATE_UPSTREAM_AUTHORIZATION, a forward-auth proxy's own header), and the echo
// handed it to the member. No provider's API takes them. Refused before the check:
// nothing is admitted or charged. false for any other method.
func MethodRefusal(method string) (FormRefusal, bool) {
	if !strings.EqualFold(method, "TRACE") && !strings.EqualFold(method, "TRACK") {
		return FormRefusal{}, false
	}
	return FormRefusal{Status: http.StatusMethodNotAllowed, Code: CodeMethodUnsupported, Allow: "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS",
		Body: mustJSON(errorBody{Error: errorObject{Type: "invalid_request_error", Code: CodeMethodUnsupported,
			Message: "The method " + method + " is not proxied: the upstream would echo the request, the provider's credential in it.",
			Details: map[string]string{"method": method}}})}, true
}

// ResetRequestPath is the control plane's route a member asks for more on.
const ResetRequestPath = "/v1/gateway/usage-limit-reset-requests"

// ResetRequestURL is the URL a blocked member's 429 names for asking for more: the
// control plane's REST API as members reach it (memberAPIURL, say
// https://tollgate.example.com) and the route, or the route alone when it is not known.
func ResetRequestURL(memberAPIURL string) string {
	return strings.TrimSuffix(memberAPIURL, "/") + ResetRequestPath
}

// renderMinute is the start of the minute of now: a blocked body counts its "retry in"
// from there, so that bodies rendered in the same minute are the same bytes.
func renderMinute(now time.Time) time.Time { return now.Truncate(time.Minute) }

// blockedBody renders the body of the 429. Only the hard buckets that are exhausted are
// listed: they are why the request is refused, and retryAt is the latest of their
// resets. An exhausted soft bucket does not block and is not listed.
//
// The message says what happened in the words clients read a spent quota by: LangChain
// (@langchain/core's caller, which its agents' modelRetryMiddleware follows) takes a 429
// whose message says "usage quota" or "will reset at" for an exhausted quota and does
// not retry it; any other 429 with a Retry-After over a minute it marks retryable, and
// the middleware then waits out the Retry-After (hours) before it tries again (seen with
// langchain 1.5.14, the message "...; retry at <time>."; TestLangChainCreateAgentThroughTheGateway).
// Qwen Code takes a 429 whose message says "quota", "exceeded" and "will reset" for a
// spent quota too, and fails at once with the whole message; any other 429 it retries
// (seen with 0.24.4; TestQwenCodeThroughTheGateway).
// It then says "Please retry in <n>s.", n the seconds from the start of the minute now
// is in until retryAt: Google's Gemini CLI reads a 429 as a spent quota (not retried)
// only by that sentence with n over 300 (or by Google's own error details, which this
// body does not have); any other 429 it sent again up to 10 times, backing off, over
// 2.5 minutes (seen with 0.61; TestGeminiCLIThroughTheGateway). In the last 5 minutes
// it waits the n seconds and tries again, after the reset. The body is kept per blocked
// member (BlockedMembers) and rendered again each minute: n is never short, and at most
// a minute (and the kept decision's TTL) long. Where a listed bucket's policy lets the
// member ask for more (allowRequestReset), its spend is below the allowance an approval
// brings (decision.Bucket.ExtensionWouldLift: work in flight can settle past it) and its
// extension would lift the block sooner (it resets after every listed bucket that cannot
// be extended: else an approval changes nothing, the member still refused until that one
// resets), the message says how, in full: the request's
// URL (askURL: the control plane's as members reach it, or its path when the enforcer
// was not told it) and the request's body with the first such bucket's bucketId. AI
// tools show the message and not the details, so a member reading it there can ask with
// their key and nothing else (TestDayLimitBlocksAndExtensionAdmits asks so). One bucket
// only: the body is kept per blocked member, budgeted (HeapBytesPerKeptBlock); when a
// second listed window allows asking too, the 429 after the first one's extension names
// it.
//
// The type is usage_limit_reached, with resets_at (retryAt in Unix seconds): the two
// fields OpenAI's Codex reads a spent limit by. It then ends the turn at once with "You've
// hit your usage limit. Try again at <time>."; any other 429 it retries, and it waited
// out the Retry-After (hours) whatever its stream_max_retries said when the refusal met
// its Responses WebSocket's handshake (seen with Codex 0.171 and the type
// usage_limit_error; TestCodexOverTheResponsesWebSocket). The guard's refusals, which
// lift when a request in flight ends, keep types Codex retries. Codex shows its own
// words, not the message: the way to ask, returned as ask, goes in a header it shows
// too (HeaderCodexPromoMessage).
func blockedBody(d *decision.Decision, orgID, memberID string, now time.Time, askURL string) (body []byte, ask string) {
	det := blockedDetails{RetryAt: timestamp(d.RetryAt)}
	var names []string
	// stuck is the latest reset among the refusing windows no extension can lift: asking
	// for another window's helps only when that one resets later (askAfter).
	var stuck time.Time
	// zero names the refusing windows whose limit is 0 USD: their reset admits nothing
	// (used >= 0 in every window), so no extension of another window lifts the block
	// and the message says who can.
	var zero []string
	for i := range d.Buckets {
		b := &d.Buckets[i]
		if !b.Exhausted || !b.HardLimit {
			continue
		}
		if b.Allowance <= 0 {
			zero = append(zero, string(b.Window.Timeframe))
		}
		if !b.ExtensionWouldLift() && b.Window.End.After(stuck) {
			stuck = b.Window.End
		}
	}
	for i := range d.Buckets {
		b := &d.Buckets[i]
		if !b.Exhausted || !b.HardLimit {
			continue
		}
		names = append(names, string(b.Window.Timeframe))
		det.ExhaustedBuckets = append(det.ExhaustedBuckets, exhaustedBucket{
			BucketID:          window.BucketID(orgID, memberID, b.Window.Timeframe, b.Window.Start),
			Timeframe:         string(b.Window.Timeframe),
			UsedMicroUSD:      b.Used,
			AllowanceMicroUSD: b.Allowance,
			ResetAt:           timestamp(b.Window.End),
			HardLimit:         b.HardLimit,
			AllowRequestReset: b.AllowRequestReset,
		})
		if b.ExtensionWouldLift() && ask == "" && zero == nil && b.Window.End.After(stuck) {
			ask = askForMore(askURL, det.ExhaustedBuckets[len(det.ExhaustedBuckets)-1].BucketID, string(b.Window.Timeframe))
		}
	}
	retryIn := decision.SecondsUntil(d.RetryAt, renderMinute(now))
	message := "Usage limit exceeded (" + strings.Join(names, ", ") + "): the usage quota will reset at " + det.RetryAt +
		". Please retry in " + strconv.FormatInt(retryIn, 10) + "s."
	if ask != "" {
		message += " " + ask + "."
	}
	if zero != nil {
		message += zeroLimits(zero)
	}
	return mustJSON(errorBody{Error: errorObject{
		Type:     "usage_limit_reached",
		Code:     CodeUsageLimitExceeded,
		Message:  message,
		Details:  det,
		ResetsAt: d.RetryAt.Unix(),
	}}), ask
}

// zeroLimits is the blocked message's sentence, with its leading space, for the refusing
// windows (timeframes) whose limit is 0 USD: no reset lifts them, and an owner or admin
// can (a higher limit, or an assignment whose allowance wins).
func zeroLimits(timeframes []string) string {
	if len(timeframes) == 1 {
		return " The " + timeframes[0] + " limit is 0 USD: no reset lifts it; ask an owner or admin of the organization for a limit above 0."
	}
	return " The " + strings.Join(timeframes[:len(timeframes)-1], ", ") + " and " + timeframes[len(timeframes)-1] +
		" limits are 0 USD: no reset lifts them; ask an owner or admin of the organization for limits above 0."
}

// askForMore is the sentence (without its full stop) telling a blocked member how to ask
// for more of the window timeframe, the bucket bucketID: the request's URL (askURL) and
// body, with the key the member was refused for.
func askForMore(askURL, bucketID, timeframe string) string {
	return "You may ask for more: POST " + askURL + ` with your API key and {"bucketId":"` + bucketID +
		`","reason":"<why>"} for the ` + timeframe
}
