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
		{"postgres://u@db/x?sslmode=require&password=qu3ry-pass", "postgres://u@db/x?sslmode=xxxxx&password=xxxxx"},
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
	} {
		got := URL(tc.raw)
		if got != tc.want {
			t.Errorf("URL(%q) = %q, want %q", tc.raw, got, tc.want)
		}
		for _, s := range []string{"pa55word", "qu3ry-pass", "s3cret", "SECRET"} {
			if strings.Contains(got, s) {
				t.Errorf("URL(%q) = %q shows %s", tc.raw, got, s)
			}
		}
	}
}
