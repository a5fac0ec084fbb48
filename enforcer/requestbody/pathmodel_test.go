package requestbody_test

import (
	"strings"
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
		// Escaped, as ext_proc sees a path (Envoy's :path, as the client sent it): read as
		// the gateway reads it (decoded), and as the provider does.
		"/v1beta/models/gemini-2.5-pr%6F:generateContent":       "gemini-2.5-pro",
		"/v1beta/models/gemini-2.5-pro%3AgenerateContent":       "gemini-2.5-pro",
		"/v1beta/models/gemini-2.5-pro%3aStreamGenerateContent": "gemini-2.5-pro",
		"/v1beta/models/a%2Fb:generateContent":                  "",
		"/v1beta/models/bad%zz:generateContent":                 "bad%zz", // no escape: as it came
		// Amazon Bedrock Runtime: the id between /model/ and the invocation, encoded or not.
		"/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke":                                                  "anthropic.claude-sonnet-4-5-20250929-v1:0",
		"/model/anthropic.claude-3-5-haiku-20241022-v1:0/invoke-with-response-stream":                                "anthropic.claude-3-5-haiku-20241022-v1:0",
		"/model/us.anthropic.claude-sonnet-4-20250514-v1:0/converse":                                                 "us.anthropic.claude-sonnet-4-20250514-v1:0",
		"/bedrock/model/meta.llama3-70b-instruct-v1%3A0/converse-stream":                                             "meta.llama3-70b-instruct-v1:0",
		"/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Ainference-profile%2Fus.amazon.nova-pro-v1%3A0/converse":        "arn:aws:bedrock:us-east-1:1:inference-profile/us.amazon.nova-pro-v1:0",
		"/model/arn:aws:bedrock:us-east-1:1:inference-profile/eu.anthropic.claude-3-7-sonnet-20250219-v1:0/converse": "arn:aws:bedrock:us-east-1:1:inference-profile/eu.anthropic.claude-3-7-sonnet-20250219-v1:0",
		"/model/anthropic.claude-v2/describe":                                                                        "",
		"/model//invoke":                                                                                             "",
	} {
		if got := requestbody.ModelFromPath(path); got != want {
			t.Errorf("ModelFromPath(%q) = %q, want %q", path, got, want)
		}
	}
}

// The path's model wins over the body's where the path names one: Gemini, Vertex AI and
// Amazon Bedrock run the path's, whatever the body says.
func TestPathModelWinsOverBodyModel(t *testing.T) {
	for _, c := range []struct{ body, path, want string }{
		{"gemini-2.5-flash-lite", "/v1beta/models/gemini-2.5-pro:generateContent", "gemini-2.5-pro"},
		{"models/gemini-2.5-flash-lite", "/v1/projects/p/locations/global/publishers/google/models/gemini-2.5-pro:streamGenerateContent?alt=sse", "gemini-2.5-pro"},
		{"amazon.nova-micro-v1:0", "/model/anthropic.claude-opus-4-1-20250805-v1%3A0/converse", "anthropic.claude-opus-4-1-20250805-v1:0"},
		{"", "/v1beta/models/gemini-2.5-flash:generateContent", "gemini-2.5-flash"},
		{"bad\x01", "/v1beta/models/gemini-2.5-flash:generateContent", "gemini-2.5-flash"},
		// A path that names its model by a name too bad to keep names none: the body's
		// is not taken in its stead.
		{"gemini-2.5-flash-lite", "/v1beta/models/gem\x01ini:generateContent", ""},
		{"models/gemini-2.5-flash-lite", "/v1beta/models/gemini-2.5-pro%3AgenerateContent", "gemini-2.5-pro"}, // escaped as it came to ext_proc
		{"amazon.nova-micro-v1:0", "/model/" + strings.Repeat("x", requestbody.MaxModelBytes+1) + "/converse", ""},
		// A path that names none: the body's.
		{"gpt-4o", "/v1/chat/completions", "gpt-4o"},
		{"gpt-4o", "/v1beta/models/gemini-2.5-flash", "gpt-4o"}, // no invocation
		{"", "/v1/chat/completions", ""},
	} {
		if got := requestbody.RequestModel(c.body, c.path); got != c.want {
			t.Errorf("RequestModel(%q, %q) = %q, want %q", c.body, c.path, got, c.want)
		}
	}
}

// OpenAI's data residency endpoints ({region}.api.openai.com) are regional; its global
// API and every other host are not.
func TestRegionalHost(t *testing.T) {
	for host, want := range map[string]bool{
		"eu.api.openai.com": true, "us.api.openai.com:443": true, "JP.API.OpenAI.com.": true, "au.api.openai.com": true,
		"api.openai.com": false, "api.openai.com:443": false, "a.b.api.openai.com": false, ".api.openai.com": false,
		"eu.api.openai.com.evil.test": false, "api.anthropic.com": false, "": false, "bedrock-runtime.us-east-1.amazonaws.com": false,
	} {
		if got := requestbody.RegionalHost(host); got != want {
			t.Errorf("RegionalHost(%q) = %v, want %v", host, got, want)
		}
	}
}

func TestRegionalEndpoint(t *testing.T) {
	for path, want := range map[string]bool{
		// Bedrock: in-region and geographic inference are regional, global. is not.
		"/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke":                                                  true,
		"/model/us.anthropic.claude-sonnet-4-5-20250929-v1:0/converse-stream":                                        true,
		"/model/eu.anthropic.claude-haiku-4-5-20251001-v1:0/invoke-with-response-stream":                             true,
		"/model/global.anthropic.claude-sonnet-4-5-20250929-v1:0/converse":                                           false,
		"/model/GLOBAL.anthropic.claude-sonnet-4-5-20250929-v1:0/converse":                                           false,
		"/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Ainference-profile%2Fglobal.anthropic.claude-opus-4-5/converse": false,
		"/model/arn:aws:bedrock:us-east-1:1:inference-profile/us.anthropic.claude-opus-4-5/converse":                 true,
		"/model/arn:aws:bedrock:us-east-1:1:application-inference-profile/a1b2c3/invoke":                             true, // says nothing: the dearer reading
		"/bedrock/model/us.anthropic.claude-sonnet-4-5-20250929-v1:0/converse":                                       true, // behind a route prefix
		"/model/anthropic.claude-v2/describe":                                                                        false,
		// Vertex AI: a region is regional, global is not.
		"/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:rawPredict":     true,
		"/v1/projects/p/locations/global/publishers/anthropic/models/claude-sonnet-4-5@20250929:streamRawPredict": false,
		"/v1/projects/p/locations/europe-west1/publishers/google/models/gemini-2.5-pro:generateContent":           true,
		"/v1/projects/p/locations/us-east5/endpoints/123:predict":                                                 false, // not a publisher model
		"/v1/projects/p/locations//publishers/anthropic/models/x:rawPredict":                                      false,
		// The providers' own APIs.
		"/v1/messages":         false,
		"/v1/chat/completions": false,
		"/v1beta/models/gemini-2.5-flash:generateContent": false,
	} {
		if got := requestbody.RegionalEndpoint(path); got != want {
			t.Errorf("RegionalEndpoint(%q) = %v, want %v", path, got, want)
		}
	}
}

// An Azure OpenAI path's deployment, behind a prefix too, unescaped; none elsewhere.
func TestAzureDeployment(t *testing.T) {
	for path, want := range map[string]string{
		"/openai/deployments/my-gpt4o/chat/completions?api-version=2024-10-21": "my-gpt4o",
		"/azure/openai/deployments/img/images/edits":                           "img",
		"/openai/deployments/my%20dep/audio/transcriptions":                    "my dep",
		"/openai/deployments//chat/completions":                                "",
		"/openai/deployments/my-gpt4o":                                         "",
		"/openai/v1/chat/completions":                                          "",
		"/v1/chat/completions":                                                 "",
	} {
		got, ok := requestbody.AzureDeployment(path)
		if got != want || ok != (want != "") {
			t.Errorf("%s: %q %v, want %q", path, got, ok, want)
		}
	}
}
