// Package redact is the one place that turns a value which may carry a secret into the
// form that may be printed: in a log line, a configuration problem (printed to stderr,
// which is the log), a help text's default. Callers print what it returns, never the
// value itself.
package redact

import (
	"net/url"
	"strings"
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
