package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/tollgate-dev/tollgate/controlplane/fault"
	"github.com/tollgate-dev/tollgate/controlplane/jsonx"
)

var statusOf = map[fault.Kind]int{
	fault.Invalid:      http.StatusBadRequest,
	fault.Unauthorized: http.StatusUnauthorized,
	fault.Forbidden:    http.StatusForbidden,
	fault.NotFound:     http.StatusNotFound,
	fault.Conflict:     http.StatusConflict,
	fault.Gone:         http.StatusGone,
	fault.TooMany:      http.StatusTooManyRequests,
	fault.Unavailable:  http.StatusServiceUnavailable,
}

// errorBody is every error answer: the specification's shapes are subsets of it, and
// empty members are left out.
type errorBody struct {
	Error   string         `json:"error"`
	Message string         `json:"message,omitempty"`
	Reason  string         `json:"reason,omitempty"`
	Details []fault.Detail `json:"details,omitempty"`
}

// writeError is the one place that turns an error into an HTTP answer. Typed errors keep
// their code; anything else is logged with the request id and answered as unavailable,
// never with its text (which could carry SQL or internals).
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, rt *route, err error) {
	fe, ok := fault.As(err)
	if !ok {
		if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
			return // the client went away; nobody is listening
		}
		code := "service_unavailable"
		if rt != nil && rt.unavailable != "" {
			code = rt.unavailable
		}
		s.log.ErrorContext(r.Context(), "request failed", "request_id", requestID(r), "route", r.Pattern, "err", err)
		fe = &fault.Error{Kind: fault.Unavailable, Code: code, Message: "The service is temporarily unavailable; try again shortly."}
	}
	if fe.RetryAfter > 0 {
		secs := int(fe.RetryAfter.Seconds() + 0.999)
		w.Header().Set("Retry-After", strconv.Itoa(max(secs, 1)))
	}
	if rt != nil && (rt.messages || rt.invalidMessages && fe.Kind == fault.Invalid) {
		fe = withMessage(fe)
	}
	body := errorBody{Error: fe.Code, Message: fe.Message, Reason: fe.Reason, Details: fe.Details}
	jsonx.Write(w, statusOf[fe.Kind], body)
}

// defaultMessages fill the message of errors that have none, on routes whose every error
// body is {error, message}.
var defaultMessages = map[fault.Kind]string{
	fault.Invalid:      "The request is invalid.",
	fault.Unauthorized: "Sign in, or send a valid API key.",
	fault.Forbidden:    "You may not do this.",
	fault.NotFound:     "Not found.",
	fault.Conflict:     "The request conflicts with the current state.",
	fault.Gone:         "This feature was removed.",
	fault.TooMany:      "Too many requests; try again later.",
	fault.Unavailable:  "The service is temporarily unavailable; try again shortly.",
}

// withMessage gives an error the {error, message} shape: details are joined into the
// message, and a missing message gets its kind's default.
func withMessage(fe *fault.Error) *fault.Error {
	if m, ok := fault.As(fault.WithMessage(fe)); ok {
		fe = m
	}
	if fe.Message != "" && len(fe.Details) == 0 {
		return fe
	}
	out := *fe
	out.Details = nil
	if out.Message == "" {
		out.Message = defaultMessages[fe.Kind]
	}
	return &out
}
