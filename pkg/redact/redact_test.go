package redact

import (
	"strings"
	"testing"
)

// URL keeps what locates a server and drops every place a secret goes: the password,
// query values, the fragment; and a string that is not an absolute URL entirely.
func TestURL(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{"postgres://u:pa55word@db:5432/x", "postgres://u:xxxxx@db:5432/x"},
		{"postgres://u@db/x?sslmode=require&password=qu3ry-pass", "postgres://u@db/x?xxxxx"},
		{"redis://:s3cret@127.0.0.1:6379/0", "redis://:xxxxx@127.0.0.1:6379/0"},
		{"https://generativelanguage.googleapis.com/v1?key=AIzaSECRET", "https://generativelanguage.googleapis.com/v1?key=xxxxx"},
		{"https://x.blob.core.windows.net/c?sv=1&sig=SECRET%3D&&SECRET2", "https://x.blob.core.windows.net/c?sv=xxxxx&sig=xxxxx&&xxxxx"},
		{"https://api.openai.com/v1#SECRET", "https://api.openai.com/v1"},
		{"https://api.openai.com", "https://api.openai.com"},
		{"https://u:SECRET@host:port", ""}, // does not parse
		{"Bearer SECRET", ""},
		{"SECRET", ""},
		{"/path/SECRET", ""},
		{"", ""},
		{"postgres:///tollgate?host=/var/run/postgresql", "postgres:///tollgate?host=xxxxx"},
		{"postgres://u:S3cr%40t@db/x", "postgres://u:xxxxx@db/x"},
		// A password's unencoded '@' (and '/', '?', '#' before one): each reader cuts the
		// URL elsewhere, and what is left of the password would show as host, path or query.
		{"postgres://u:p@ssW0rd@db:5432/x", ""},
		{"postgres://u:p@ss/W0rd@db/x", ""},
		{"postgres://u:p@ss?W0rd@db/x", ""},
		{"postgres://u:8/ssW0rd@db/x", ""},
		{"postgres://u:8?ssW0rd@db/x", ""},
		{"postgres://u:8#ssW0rd@db/x", ""},
		{"redis://:8/ssW0rd@127.0.0.1:1/0", ""},
		{"postgres://u@db/x?password=p@ss", ""},
		// A query password with an unencoded '&': its rest is not a parameter's name.
		{"postgres://u@db/x?password=p&ssW0rd=1", "postgres://u@db/x?xxxxx"},
		{"postgres://u@db/x?sslpassword=p&ssW0rd", "postgres://u@db/x?xxxxx"},
		{"https://", ""},
		{"x:SECRET", ""},
	} {
		got := URL(tc.raw)
		if got != tc.want {
			t.Errorf("URL(%q) = %q, want %q", tc.raw, got, tc.want)
		}
		for _, s := range []string{"pa55word", "qu3ry-pass", "s3cret", "SECRET", "ss", "W0rd", "8", "S3cr", "@t"} {
			if strings.Contains(got, s) {
				t.Errorf("URL(%q) = %q shows %s", tc.raw, got, s)
			}
		}
	}
}

// Excerpt bounds a server's text and masks what could be a credential: a secret given,
// whole, URL-encoded or in part (8 bytes or more), a credential parameter's value, a
// Bearer token, a JWT; the rest, on one line, stays.
func TestExcerpt(t *testing.T) {
	const secret = "Zk9~s3cr3t+Qa7/Xm3"
	for _, tc := range []struct{ text, want string }{
		{"refused Zk9~s3cr3t+Qa7/Xm3 and Zk9~s3cr3t%2BQa7%2FXm3, a part s3cr3t+Qa", "refused xxxxx and xxxxx, a part xxxxx"},
		{"form client_secret=abc&client_id=c&password=p", "form client_secret=xxxxx&client_id=c&password=xxxxx"},
		{`{"access_token": "t0k", "ok": 1}`, `{"access_token": "xxxxx", "ok": 1}`},
		{"Authorization: Bearer abcdefghijkl", "Authorization: Bearer xxxxx"},
		{"sent Basic YWxhZGRpbjpvcGVu", "sent Basic xxxxx"},
		{"got eyJhbGciOi.eyJzdWIi.c2ln there", "got xxxxx there"},
		{"line one\nline\ttwo\x00", "line one line two"},
	} {
		if got := Excerpt(tc.text, 200, secret); got != tc.want {
			t.Errorf("Excerpt(%q) = %q, want %q", tc.text, got, tc.want)
		}
	}
	if got := Excerpt(strings.Repeat("é", 20), 11); got != strings.Repeat("é", 5)+"…" {
		t.Errorf("cut: %q", got)
	}
}
