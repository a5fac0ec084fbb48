// Package fault defines the typed errors that domain and store code return for failures a
// caller can act on. It knows the error kinds and their machine codes, never HTTP: the
// httpapi package is the one place that maps a kind to a status and a body shape.
package fault

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Kind classifies an error the way a client must react to it.
type Kind int

// The kinds, each mapped to one HTTP status by httpapi.
const (
	Invalid      Kind = iota + 1 // 400
	Unauthorized                 // 401
	Forbidden                    // 403
	NotFound                     // 404
	Conflict                     // 409
	Gone                         // 410
	TooMany                      // 429
	Unavailable                  // 503
)

// Detail is one problem of an invalid request, with the path of the offending field.
type Detail struct {
	Message string `json:"message"`
	Path    []any  `json:"path,omitempty"`
}

// Error is a failure with a machine code and a human message.
type Error struct {
	Kind    Kind
	Code    string // the body's "error" value, e.g. "plugin_not_found"
	Message string
	Reason  string   // forbidden bodies: e.g. "fresh_auth_required"
	Details []Detail // invalid-request bodies
	// RetryAfter, when set, becomes a Retry-After header.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	if e.Message != "" {
		return e.Code + ": " + e.Message
	}
	if len(e.Details) > 0 {
		return e.Code + ": " + e.Details[0].Message
	}
	return e.Code
}

// As extracts an *Error from err.
func As(err error) (*Error, bool) {
	var fe *Error
	ok := errors.As(err, &fe)
	return fe, ok
}

// New builds an error of the given kind and code.
func New(kind Kind, code, format string, args ...any) *Error {
	return &Error{Kind: kind, Code: code, Message: fmt.Sprintf(format, args...)}
}

// NotFoundf is a 404-kind error with a specific code such as "plugin_not_found".
func NotFoundf(code, format string, args ...any) *Error {
	return New(NotFound, code, format, args...)
}

// Conflictf is a 409-kind error.
func Conflictf(code, format string, args ...any) *Error {
	return New(Conflict, code, format, args...)
}

// Forbiddenf is a 403 "forbidden" error.
func Forbiddenf(format string, args ...any) *Error {
	return New(Forbidden, "forbidden", format, args...)
}

// ErrUnauthorized is the answer to a missing or bad credential.
var ErrUnauthorized = &Error{Kind: Unauthorized, Code: "unauthorized"}

// Problems accumulates the details of an invalid request.
type Problems []Detail

// Add records a problem at a field path.
func (p *Problems) Add(message string, path ...any) {
	*p = append(*p, Detail{Message: message, Path: path})
}

// Err returns nil when there are no problems, else an invalid_request error.
func (p Problems) Err() error {
	if len(p) == 0 {
		return nil
	}
	return &Error{Kind: Invalid, Code: "invalid_request", Details: p}
}

// InvalidAt returns an invalid_request error with one detail.
func InvalidAt(message string, path ...any) *Error {
	return &Error{Kind: Invalid, Code: "invalid_request", Details: []Detail{{Message: message, Path: path}}}
}

// WithMessage turns an invalid-request error with details into the {error, message}
// shape that some routes answer with, joining the details as "path: message".
func WithMessage(err error) error {
	fe, ok := As(err)
	if !ok || fe.Kind != Invalid || len(fe.Details) == 0 {
		return err
	}
	parts := make([]string, 0, len(fe.Details))
	for _, d := range fe.Details {
		if len(d.Path) == 0 {
			parts = append(parts, d.Message)
			continue
		}
		segs := make([]string, len(d.Path))
		for i, s := range d.Path {
			segs[i] = fmt.Sprint(s)
		}
		parts = append(parts, strings.Join(segs, ".")+": "+d.Message)
	}
	out := *fe
	out.Details = nil
	out.Message = strings.Join(parts, "; ")
	return &out
}
