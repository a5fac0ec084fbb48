package requestbody_test

import (
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/requestbody"
)

func TestAdvisorModel(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"model":"claude-haiku-4-5","tools":[{"type":"advisor_20260301","name":"advisor","model":"claude-opus-4-7"}]}`, "claude-opus-4-7"},
		{`{"tools":[{"type":"web_search_20250305"},{"type":"advisor_20260301","model":"claude-opus-4-8"}]}`, "claude-opus-4-8"},
		{`{"tools":[{"type":"advisor_20260301"}]}`, ""},
		{`{"tools":[{"type":"custom","name":"advisor","model":"claude-opus-4-7"}]}`, ""},
		{`{"tools":"advisor"}`, ""},
	} {
		if got := requestbody.AdvisorModel([]byte(tc.body)); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.body, got, tc.want)
		}
	}
}
