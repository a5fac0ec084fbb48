package cli

import (
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/tollgate-dev/tollgate/pkg/credential"
	"github.com/tollgate-dev/tollgate/pkg/envflag"
	"github.com/tollgate-dev/tollgate/pkg/redact"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
)

// parseFlags parses a command's flags. -h prints the command's help on standard output
// (it was asked for) and returns flag.ErrHelp; a flag the command does not have, a value
// of the wrong type or a stray positional argument is a usage error naming it and the
// command's -h, on one line, before anything is called.
func parseFlags(fs *flag.FlagSet, args []string, stdio IO) error {
	usage := fs.Usage
	fs.Usage = func() {}
	fs.SetOutput(io.Discard) // the flag package's own message and usage: said below instead
	err := fs.Parse(args)
	fs.Usage = usage
	fs.SetOutput(stdio.Stdout)
	switch {
	case isHelp(err):
		fs.Usage()
		return err
	case err != nil:
		return usagef("%v (see %s -h)", envflag.Explain(fs, err), fs.Name())
	case fs.NArg() > 0 && !mayBeSecret(fs.Arg(0)):
		return usagef("unexpected argument %q: %s takes only flags (see %s -h)", fs.Arg(0), fs.Name(), fs.Name())
	case fs.NArg() > 0:
		return usagef("%s; %s takes only flags (see %s -h)", envflag.Unexpected(fs.Args()), fs.Name(), fs.Name())
	}
	return nil
}

// mayBeSecret tells whether a stray argument may be (part of) a credential, and so is not
// printed: the second half of an unquoted value with a space (`--key Bearer tgs_...`)
// is the token itself. Only a short word is shown (a mistyped subcommand or value): not
// a Tollgate token, a provider key (sk-...), a Bearer scheme, nor anything longer.
func mayBeSecret(arg string) bool {
	lower := strings.ToLower(arg)
	return utf8.RuneCountInString(arg) > 20 || credential.IsTollgateToken(arg) || strings.HasPrefix(lower, "sk-") ||
		strings.HasPrefix(lower, "bearer") || strings.ContainsFunc(arg, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) })
}

// wantsHelp tells whether a command line asks for the command's help.
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

// checkTime refuses a value that is not an RFC 3339 instant with an offset (what the API
// takes), naming the flag. Empty is left to the caller.
func checkTime(flagName, v string) error {
	if v == "" {
		return nil
	}
	if _, err := time.Parse(time.RFC3339Nano, v); err != nil {
		return usagef("--%s: %q is not an RFC 3339 time; want e.g. 2026-01-31T05:00:00Z or 2026-01-31T06:00:00+01:00", flagName, oneLine(v, 80))
	}
	return nil
}

// checkID refuses a value that is not a TypeID of one of the prefixes, naming the flag.
func checkID(flagName, v string, prefixes ...typeid.Prefix) error {
	for _, p := range prefixes {
		if typeid.Valid(v, p) {
			return nil
		}
	}
	forms := make([]string, len(prefixes))
	for i, p := range prefixes {
		forms[i] = fmt.Sprintf("%s_ and %d characters", p, typeid.SuffixLen)
	}
	return usagef("--%s: %q is not a %s id; want %s (e.g. %s)", flagName, oneLine(v, 80), idNoun(prefixes[0]),
		strings.Join(forms, ", or "), typeid.New(prefixes[0]))
}

func idNoun(p typeid.Prefix) string {
	switch p {
	case typeid.Member:
		return "member"
	case typeid.Org:
		return "organization"
	case typeid.User:
		return "user"
	}
	return string(p)
}

// checkReference refuses a review reference the API would refuse: 1 to 200 characters.
func checkReference(v string) error {
	switch n := utf8.RuneCountInString(v); {
	case strings.TrimSpace(v) == "":
		return usagef("--reference is required: the review reference (a ticket, 1 to 200 characters) recorded in the audit trail")
	case n > 200:
		return usagef("--reference: %d characters; want 1 to 200", n)
	}
	return nil
}

// checkAPI refuses an --api that is not an http(s) URL of a host.
func checkAPI(v string) error {
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return usagef("--api: %s is not the URL of the control plane's REST API; want e.g. http://127.0.0.1:8080 (TOLLGATE_API_URL)", quoteAPI(v))
	}
	return nil
}

// shownAPI is the control plane's URL (--api) as a message may show it: its password
// masked (redact.URL; a proxy in front of the control plane may ask for basic
// authentication), or, when it is no URL, the value itself unless it has an '@', which
// may end a password.
func shownAPI(v string) string {
	if s, ok := apiShown(v); ok {
		return s
	}
	return apiNotShown
}

// quoteAPI is shownAPI quoted, when it shows the value.
func quoteAPI(v string) string {
	if s, ok := apiShown(v); ok {
		return strconv.Quote(s)
	}
	return apiNotShown
}

const apiNotShown = "(not shown: it may hold a password)"

func apiShown(v string) (string, bool) {
	if s := redact.URL(v); s != "" {
		return oneLine(s, 120), true
	}
	return oneLine(v, 120), !strings.Contains(v, "@")
}

var errKeyRequired = usageError{"an API key is required: --key or TOLLGATE_API_KEY (an owner's or admin's key, tgk_...)"}

// checkAll returns the first problem of checks, in order.
func checkAll(checks ...error) error {
	for _, err := range checks {
		if err != nil {
			return err
		}
	}
	return nil
}
