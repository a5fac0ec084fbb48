package estimate

import (
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/internal/agentbody"
)

// BenchmarkInputLargeBody is Input on an agent's request body of about 200 KiB (long
// messages and tool calls), the size a coding agent sends on every turn.
//
// Run: go test -run '^$' -bench InputLargeBody -count 6 ./enforcer/estimate
func BenchmarkInputLargeBody(b *testing.B) {
	body := agentbody.Anthropic(200 << 10)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := Input(body); err != nil {
			b.Fatal(err)
		}
	}
}
