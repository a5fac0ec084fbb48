package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"unicode"
)

// The exit codes of the program (cmd/tollgate): 0 done, 1 failed, 2 the command line
// was refused before anything was called.
const (
	ExitFailure = 1
	ExitUsage   = 2
)

// ExitCode is the exit code of Run's error.
func ExitCode(err error) int {
	var u usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &u):
		return ExitUsage
	}
	return ExitFailure
}

// usageError is a command line refused before any call: a malformed or missing argument.
// Its message names the argument and the form expected, on one line.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

// errInterrupted is a call cut by the context: Ctrl-C (SIGINT) or SIGTERM.
var errInterrupted = errors.New("interrupted")

// apiError is an error answer of the REST API, said on one line: the API's error code
// and message (with its details), the call, and what to check.
type apiError struct {
	Method, Path string // the path without its query
	Status       int
	Code         string // the body's "error"; empty when the body is not the API's
	Message      string // the body's message and details, or the start of a foreign body
	Hint         string
}

func (e *apiError) Error() string {
	var b strings.Builder
	switch {
	case e.Code != "" && e.Message != "":
		fmt.Fprintf(&b, "%s: %s", e.Code, e.Message)
	case e.Code != "":
		b.WriteString(e.Code)
	default:
		fmt.Fprintf(&b, "HTTP %d %s", e.Status, http.StatusText(e.Status))
		if e.Message != "" {
			fmt.Fprintf(&b, ": %s", e.Message)
		}
	}
	fmt.Fprintf(&b, " (HTTP %d from %s %s)", e.Status, e.Method, e.Path)
	if e.Hint != "" {
		fmt.Fprintf(&b, "; %s", e.Hint)
	}
	return b.String()
}

// unreachableError is a control plane that did not answer at all.
type unreachableError struct {
	base, reason, setting string
}

func (e *unreachableError) Error() string {
	return fmt.Sprintf("cannot reach the control plane (%s): is the control plane running at %s? (%s)", e.reason, e.base, e.setting)
}

// transportError turns a failed http.Client.Do into what the operator acts on: an
// interruption, or an unreachable control plane with the reason in a few words (not Go's
// chain of `Get "...": dial tcp ...: connect: ...`).
func transportError(ctx context.Context, base, setting string, err error) error {
	if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return errInterrupted
	}
	return &unreachableError{base: base, reason: networkReason(err), setting: setting}
}

func networkReason(err error) string {
	var errno syscall.Errno
	var dns *net.DNSError
	var timeout interface{ Timeout() bool }
	switch {
	case errors.As(err, &dns):
		if dns.IsNotFound {
			return "no such host " + dns.Name
		}
		return "cannot resolve " + dns.Name
	case errors.As(err, &errno):
		return errno.Error()
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &timeout) && timeout.Timeout():
		return "timed out"
	}
	for { // the innermost cause: a TLS or protocol problem says what it is
		next := errors.Unwrap(err)
		if next == nil {
			return oneLine(err.Error(), 200)
		}
		err = next
	}
}

// oneLine makes text from the network fit on one line of a terminal: control
// characters (line breaks, escapes) become spaces, runs of spaces one, and it is cut
// at max runes.
func oneLine(s string, max int) string {
	s = strings.Join(strings.FieldsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }), " ")
	if r := []rune(s); len(r) > max {
		s = string(r[:max]) + "..."
	}
	return s
}

// isHelp tells whether a flag.FlagSet's Parse stopped for -h.
func isHelp(err error) bool { return errors.Is(err, flag.ErrHelp) }
