package requestbody

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/estimate"
)

// BenchmarkAskStreamUsageLargeBody asks an agent's OpenAI chat completions stream of
// about 200 KiB (long messages and tool calls, the size a coding agent sends on every
// turn) for its usage: as the front doors did before AskStreamUsage, checking the body
// again (WithIncludeUsage), and as they do now, trusting the estimate's check.
//
// Run: go test -run '^$' -bench AskStreamUsageLargeBody -count 8 ./enforcer/requestbody > ask.txt
// and compare with: benchstat -col /check ask.txt
func BenchmarkAskStreamUsageLargeBody(b *testing.B) {
	body := openAIAgentBody(200 << 10)
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

// openAIAgentBody is an OpenAI chat completions stream body of at least n bytes: turns
// of text with quotes, escapes and code, and tool calls, "stream" last as the SDKs
// write it.
func openAIAgentBody(n int) []byte {
	text := strings.Repeat(`The function reads "the file" and returns {err: nil}; then\n it loops for i := 0; i < n; i++ { sum += a[i] } `, 12)
	var msgs []any
	size := 0
	for size < n {
		msgs = append(msgs,
			map[string]any{"role": "user", "content": text},
			map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"id": "call_01", "type": "function",
				"function": map[string]any{"name": "read_file", "arguments": `{"path":"/src/main.go","lines":[1,200]}`}}}})
		size += len(text) + 200
	}
	b, err := json.Marshal(struct {
		Model    string `json:"model"`
		Messages []any  `json:"messages"`
		Stream   bool   `json:"stream"`
	}{"gpt-5", msgs, true})
	if err != nil {
		panic(err)
	}
	return b
}
