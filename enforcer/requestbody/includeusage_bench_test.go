package requestbody

import (
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/estimate"
	"github.com/tollgate-dev/tollgate/enforcer/internal/agentbody"
)

// BenchmarkAskStreamUsageLargeBody asks an agent's OpenAI chat completions stream of
// about 200 KiB (long messages and tool calls, the size a coding agent sends on every
// turn) for its usage: as the front doors did before AskStreamUsage, checking the body
// and walking it again (WithIncludeUsage), and as they do now, from what its estimate
// read (AskStreamUsage).
//
// Run: go test -run '^$' -bench AskStreamUsageLargeBody -count 8 ./enforcer/requestbody > ask.txt
// and compare with: benchstat -col /check ask.txt
func BenchmarkAskStreamUsageLargeBody(b *testing.B) {
	body := agentbody.OpenAIChat(200 << 10)
	est, err := estimate.Input(body)
	if err != nil || !est.Stream {
		b.Fatalf("the estimate reads no stream (%v)", err)
	}
	for _, c := range []struct {
		name string
		ask  func() ([]byte, bool)
	}{
		{"check=again", func() ([]byte, bool) { return WithIncludeUsage(body) }},
		{"check=estimate", func() ([]byte, bool) { return AskStreamUsage(body, &est) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, ok := c.ask(); !ok {
					b.Fatal("not rewritten")
				}
			}
		})
	}
}
