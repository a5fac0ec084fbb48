package requestbody_test

import (
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/requestbody"
)

func TestAdvisorTool(t *testing.T) {
	for _, tc := range []struct {
		body string
		want requestbody.Advisor
	}{
		{`{"model":"claude-haiku-4-5","tools":[{"type":"advisor_20260301","name":"advisor","model":"claude-opus-4-7"}]}`, requestbody.Advisor{Model: "claude-opus-4-7"}},
		{`{"tools":[{"type":"web_search_20250305","max_uses":5},{"type":"advisor_20260301","model":"claude-opus-4-8","max_uses":3,"max_tokens":2048}]}`,
			requestbody.Advisor{Model: "claude-opus-4-8", MaxUses: 3, MaxTokens: 2048}},
		{`{"tools":[{"type":"advisor_20260301","model":"claude-opus-4-7","max_uses":2.5,"max_tokens":"2048"}]}`, requestbody.Advisor{Model: "claude-opus-4-7"}},
		{`{"tools":[{"type":"advisor_20260301","model":"claude-opus-4-7","max_uses":0,"max_tokens":-1}]}`, requestbody.Advisor{Model: "claude-opus-4-7"}},
		{`{"tools":[{"type":"advisor_20260301","max_uses":3}]}`, requestbody.Advisor{}},
		{`{"tools":[{"type":"custom","name":"advisor","model":"claude-opus-4-7","max_uses":3}]}`, requestbody.Advisor{}},
		{`{"tools":"advisor"}`, requestbody.Advisor{}},
	} {
		if got := requestbody.AdvisorTool([]byte(tc.body)); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.body, got, tc.want)
		}
	}
}
