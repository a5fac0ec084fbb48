package requestbody_test

import (
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/requestbody"
)

func TestCountsTokens(t *testing.T) {
	for path, want := range map[string]bool{
		"/v1/messages/count_tokens":           true,
		"/anthropic/v1/messages/count_tokens": true, // behind a route prefix
		"/v1/responses/input_tokens":          true,
		"/v1/messages":                        false,
		"/v1/chat/completions":                false,
		"/v1/responses":                       false,
		"/v1/messages/count_tokens/extra":     false,
		"":                                    false,
	} {
		if got := requestbody.CountsTokens(path); got != want {
			t.Errorf("CountsTokens(%q) = %v, want %v", path, got, want)
		}
	}
}
