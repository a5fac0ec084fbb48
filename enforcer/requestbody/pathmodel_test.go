package requestbody_test

import (
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/requestbody"
)

func TestModelFromPath(t *testing.T) {
	for path, want := range map[string]string{
		"/v1beta/models/gemini-2.5-flash:generateContent":                                              "gemini-2.5-flash",
		"/v1beta/models/gemini-2.5-pro:streamGenerateContent":                                          "gemini-2.5-pro",
		"/google/v1beta/models/gemini-2.0-flash-001:generateContent":                                   "gemini-2.0-flash-001", // behind a route prefix
		"/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-pro:generateContent": "gemini-2.5-pro",
		"/v1beta/models/gemini-2.5-flash":                                                              "", // a GET of the model's description
		"/v1beta/models/:generateContent":                                                              "",
		"/v1beta/models/a/b:generateContent":                                                           "",
		"/v1/chat/completions":                                                                         "",
		"/v1beta/models/gem\x01ini:generateContent":                                                    "",
	} {
		if got := requestbody.ModelFromPath(path); got != want {
			t.Errorf("ModelFromPath(%q) = %q, want %q", path, got, want)
		}
	}
}

func TestRequestModel(t *testing.T) {
	for _, c := range []struct{ body, path, want string }{
		{"gpt-4o", "/v1beta/models/gemini-2.5-flash:generateContent", "gpt-4o"}, // the body's wins
		{"", "/v1beta/models/gemini-2.5-flash:generateContent", "gemini-2.5-flash"},
		{"bad\x01", "/v1beta/models/gemini-2.5-flash:generateContent", "gemini-2.5-flash"},
		{"", "/v1/chat/completions", ""},
	} {
		if got := requestbody.RequestModel(c.body, c.path); got != c.want {
			t.Errorf("RequestModel(%q, %q) = %q, want %q", c.body, c.path, got, c.want)
		}
	}
}
