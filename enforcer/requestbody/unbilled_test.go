package requestbody_test

import (
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/requestbody"
)

func TestUnbilled(t *testing.T) {
	for path, want := range map[string]bool{
		"/v1/messages/count_tokens":           true,
		"/anthropic/v1/messages/count_tokens": true, // behind a route prefix
		"/v1/responses/input_tokens":          true,
		"/v1/moderations":                     true,
		"/v1/messages":                        false,
		"/v1/chat/completions":                false,
		"/v1/responses":                       false,
		"/v1/embeddings":                      false, // charged: it reports its usage
		"/v1/messages/count_tokens/extra":     false,
		"":                                    false,
	} {
		if got := requestbody.Unbilled(path); got != want {
			t.Errorf("Unbilled(%q) = %v, want %v", path, got, want)
		}
	}
}

func TestUnbilledCost(t *testing.T) {
	if c := requestbody.UnbilledCost(nil); c == nil || *c != 0 {
		t.Errorf("UnbilledCost(nil) = %v, want a known 0", c)
	}
	reported := int64(17)
	if c := requestbody.UnbilledCost(&reported); c != &reported {
		t.Errorf("UnbilledCost(&17) = %v, want the reported cost", c)
	}
}
