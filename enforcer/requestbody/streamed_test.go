package requestbody_test

import (
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/estimate"
	"github.com/tollgate-dev/tollgate/enforcer/requestbody"
)

func TestStreamed(t *testing.T) {
	stream := func(body string) *estimate.Request {
		est, err := estimate.Input([]byte(body))
		if err != nil {
			t.Fatalf("estimate.Input(%s): %v", body, err)
		}
		return &est
	}
	for _, tc := range []struct {
		path string
		est  *estimate.Request
		want bool
	}{
		{"/v1/chat/completions", stream(`{"model":"gpt-4o-mini","stream":true,"messages":[]}`), true},
		{"/v1/messages", stream(`{"model":"claude-sonnet-4-5","stream":true,"messages":[]}`), true},
		{"/v1/chat/completions", stream(`{"model":"gpt-4o-mini","stream":false,"messages":[]}`), false},
		{"/v1/chat/completions", stream(`{"model":"gpt-4o-mini","messages":[]}`), false},
		{"/v1/chat/completions", nil, false},
		{"/v1beta/models/gemini-2.5-flash:streamGenerateContent", nil, true},
		{"/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", nil, true},
		{"/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-pro:streamGenerateContent", nil, true},
		{"/v1beta/models/gemini-2.5-flash:generateContent", nil, false},
		{"/v1beta/models/gemini-2.5-flash:generateContent?x=:streamGenerateContent", nil, false},
	} {
		if got := requestbody.Streamed(tc.path, tc.est); got != tc.want {
			t.Errorf("Streamed(%q, stream %v) = %v, want %v", tc.path, tc.est != nil && tc.est.Stream, got, tc.want)
		}
	}
}
