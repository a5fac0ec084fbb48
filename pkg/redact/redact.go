// Package redact is the one place that turns a value which may carry a secret into the
// form that may be printed: in a log line, a configuration problem (printed to stderr,
// which is the log), a help text's default. Callers print what it returns, never the
// value itself.
package redact

import (
	"encoding/json"
	"errors"
	"io/fs"
	"net/url"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Mask stands for a secret left out.
const Mask = "xxxxx"

// URL is raw as it may be printed: an absolute URL (a scheme, "://" and a host or a
// path) with its password and every query value replaced by Mask (a Postgres URL takes
// password and sslpassword there, Google's API takes key, Azure's SAS sig), and without
// its fragment; the user name stays, as url.URL.Redacted leaves it. A query that names
// a password is Mask whole: a password with an unencoded '&' would end early, and the
// rest of it show as a parameter's name.
//
// Anything else is "": a string that does not parse as such a URL has no part known to
// be safe (a credential put in a URL's variable by mistake, a URL whose password breaks
// its syntax). So is a URL with an '@' other than the one ending its user information:
// a password with an unencoded '@' (or '/', '?', '#' before one) reads as a password
// cut short and a host, path or query made of the rest, and readers do not agree where
// it ends (Go's url.Parse takes the authority's last '@', libpq and pgx the first '@'
// before a '/'), so no part of such a URL is known not to be part of its password.
func URL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" || u.Opaque != "" || !strings.Contains(raw, "://") {
		return ""
	}
	if u.Host == "" && u.Path == "" && u.RawQuery == "" {
		return ""
	}
	if n := strings.Count(raw, "@"); n > 1 || (n == 1 && u.User == nil) {
		return ""
	}
	u.Fragment, u.RawFragment = "", ""
	if u.RawQuery != "" {
		params := strings.Split(u.RawQuery, "&")
		if queryNamesPassword(u.RawQuery) {
			params = []string{Mask}
		}
		for i, p := range params {
			name, _, ok := strings.Cut(p, "=")
			if ok {
				params[i] = name + "=" + Mask
			} else if p != "" {
				params[i] = Mask // a bare value: nothing says it is no secret
			}
		}
		u.RawQuery = strings.Join(params, "&")
	}
	return u.Redacted()
}

// queryNamesPassword reports whether a parameter of the raw query names a password (or
// cannot be read).
func queryNamesPassword(rawQuery string) bool {
	for _, p := range strings.Split(rawQuery, "&") {
		name, _, _ := strings.Cut(p, "=")
		if n, err := url.QueryUnescape(name); err != nil || strings.Contains(strings.ToLower(n), "pass") {
			return true
		}
	}
	return false
}

// Quotable reports whether a reader's error about raw (a client library's refusal of
// the URL, a failed connection) may be printed next to what URL shows of it. Only when
// URL shows it and its query names no password: the reader knows where such a URL's
// password is and does not quote it, but a query password with an unencoded '&' ends
// early for it too, and the rest is quoted as a parameter ("unrecognized configuration
// parameter") like any other.
func Quotable(raw string) bool {
	if URL(raw) == "" {
		return false
	}
	u, _ := url.Parse(raw)
	return !queryNamesPassword(u.RawQuery)
}

// Unquoted stands for a reader's error about a URL that Quotable refuses: the reason is
// left out, and the likely mistake named.
const Unquoted = "the reason is not shown, as it could quote part of the password; " +
	"a password's special characters must be percent-encoded ('@' as %40, '/' as %2F, '?' as %3F, '#' as %23, '&' as %26, '%' as %25)"

// Reason is err's text when Quotable(raw) (err being a reader's error about raw), else
// Unquoted.
func Reason(raw string, err error) string {
	if Quotable(raw) {
		return err.Error()
	}
	return Unquoted
}

// Excerpt is text a remote server sent (a token endpoint's error body) as a log line may
// carry it: its first max bytes at most (cut at a character, "…" marking the cut), on one
// line, with every run of at least 8 bytes of one of secrets (all of a shorter one), as
// given, URL-encoded or JSON-escaped, replaced by Mask, and so the values of parameters
// that carry credentials (client_secret=, "client_assertion": …, password, tokens, keys),
// Bearer tokens and anything shaped like a JWT. A server may echo what it was sent, or a
// part of it: its error's body is never logged whole.
func Excerpt(text string, max int, secrets ...string) string {
	// The scan is quadratic in a secret's length: only what can be kept is scanned, and
	// a little more, so that a secret cut by the bound is still found.
	if limit := max + 256; len(text) > limit {
		text = text[:limit]
	}
	masked := make([]bool, len(text))
	for _, s := range secrets {
		if s == "" {
			continue
		}
		js, _ := json.Marshal(s)
		for _, form := range []string{s, url.QueryEscape(s), url.PathEscape(s), strings.Trim(string(js), `"`)} {
			markRuns(text, form, masked)
		}
	}
	for _, re := range []*regexp.Regexp{credentialParam, bearer, jwt} {
		for _, m := range re.FindAllStringSubmatchIndex(text, -1) {
			from := m[0]
			if len(m) > 2 && m[len(m)-2] >= 0 { // the value group only
				from = m[len(m)-2]
			}
			for i := from; i < m[1]; i++ {
				masked[i] = true
			}
		}
	}
	var b strings.Builder
	for i := 0; i < len(text); {
		if masked[i] {
			for i < len(text) && masked[i] {
				i++
			}
			b.WriteString(Mask)
			continue
		}
		r, n := utf8.DecodeRuneInString(text[i:])
		if unicode.IsControl(r) || r == utf8.RuneError {
			r = ' '
		}
		b.WriteRune(r)
		i += n
	}
	return Clip(strings.Join(strings.Fields(b.String()), " "), max)
}

// Clip is s cut to its first max bytes at most, at a character, "…" marking the cut:
// what a log line quotes of a value that may be as long as a client or a server chose.
func Clip(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// markRuns marks in masked every run of text that is a part of secret at least 8 bytes
// long (the whole of a shorter secret).
func markRuns(text, secret string, masked []bool) {
	need := min(8, len(secret))
	for i := range len(text) {
		longest := 0
		for j := range len(secret) {
			k := 0
			for i+k < len(text) && j+k < len(secret) && text[i+k] == secret[j+k] {
				k++
			}
			longest = max(longest, k)
		}
		if longest >= need {
			for k := range longest {
				masked[i+k] = true
			}
		}
	}
}

var (
	// credentialParam is a parameter that carries a credential, in a form, a query, JSON
	// or a header-like line; its last group is the value.
	credentialParam = regexp.MustCompile(`(?i)(?:client_secret|client_assertion|assertion|password|passwd|secret|access_token|refresh_token|id_token|api[_-]?key|authorization)\\?["']?\s*[:=]\s*\\?["']?((?:basic|bearer)\s+)?([^\s"'&,;}\\]+)`)
	bearer          = regexp.MustCompile(`(?i)\b(?:bearer|basic)\s+([A-Za-z0-9._~+/=-]{8,})`)
	jwt             = regexp.MustCompile(`eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}(?:\.[A-Za-z0-9_-]*)?`)
)

// Wrapped is err under the text that may be printed in place of its own (see Excerpt):
// errors.Is and errors.As still see err's chain (a fetch's context.DeadlineExceeded), a
// log line only text.
func Wrapped(text string, err error) error { return &wrapped{text, err} }

type wrapped struct {
	text string
	err  error
}

func (w *wrapped) Error() string { return w.text }
func (w *wrapped) Unwrap() error { return w.err }

// FileError is err, a failure to open or read the file that a setting names for a
// secret (a key, a credential), with the file's name left out of its text: an
// *fs.PathError quotes the name whole ("open NAME: no such file or directory"), and
// such a setting is at times given the secret itself in place of its file's name (a PEM
// key, "Bearer sk-...", a service account's JSON), which is what makes the open fail.
// The text is what went wrong ("open: no such file or directory"), after what, when not
// empty; the caller's message names the setting. errors.Is and errors.As still see err.
func FileError(what string, err error) error {
	var pe *fs.PathError
	if !errors.As(err, &pe) {
		return err
	}
	text := pe.Op + ": " + pe.Err.Error()
	if what != "" {
		text = what + ": " + text
	}
	return Wrapped(text, err)
}
