package estimate

import (
	"encoding/json"
	"strings"
	"testing"
)

// BenchmarkInputLargeBody is Input on an agent's request body of about 200 KiB (long
// messages and tool calls), the size a coding agent sends on every turn.
//
// Run: go test -run '^$' -bench InputLargeBody -count 6 ./enforcer/estimate
func BenchmarkInputLargeBody(b *testing.B) {
	body := agentBody(200 << 10)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := Input(body); err != nil {
			b.Fatal(err)
		}
	}
}

// agentBody is an Anthropic messages body of at least n bytes: turns of text with
// quotes, escapes and code, and tool calls.
func agentBody(n int) []byte {
	text := strings.Repeat(`The function reads "the file" and returns {err: nil}; then\n it loops for i := 0; i < n; i++ { sum += a[i] } `, 12)
	var msgs []any
	size := 0
	for size < n {
		msgs = append(msgs,
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": text}}},
			map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": "toolu_01", "name": "read_file",
				"input": map[string]any{"path": "/src/main.go", "lines": []int{1, 200}}}}})
		size += len(text) + 200
	}
	b, err := json.Marshal(map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 8192, "stream": true, "system": text, "messages": msgs})
	if err != nil {
		panic(err)
	}
	return b
}
