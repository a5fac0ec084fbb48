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

// URL is raw as it may be printed: an absolute URL (a scheme and a host) with its
// password and every query value replaced by Mask (a Postgres URL takes password and
// sslpassword there, Google's API takes key, Azure's SAS sig), and without its fragment;
// the user name stays, as url.URL.Redacted leaves it. Anything else is "": a string that
// does not parse as such a URL has no part known to be safe (a credential put in a URL's
// variable by mistake, a URL whose password breaks its syntax).
func URL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return ""
	}
	u.Fragment, u.RawFragment = "", ""
	if u.RawQuery != "" {
		params := strings.Split(u.RawQuery, "&")
		for i, p := range params {
			if name, _, ok := strings.Cut(p, "="); ok {
				params[i] = name + "=" + Mask
			} else if p != "" {
				params[i] = Mask // a bare value: nothing says it is no secret
			}
		}
		u.RawQuery = strings.Join(params, "&")
	}
	return u.Redacted()
}
