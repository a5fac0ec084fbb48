// Package agentbody builds the request bodies a coding agent sends on every turn, long
// turns of text and code with tool calls, for the benchmarks of what reads a body
// before it goes upstream (enforcer/estimate, enforcer/requestbody).
package agentbody

import (
	"encoding/json"
	"strings"
)

// turnText is one turn's text: prose with quotes, escapes and code.
var turnText = strings.Repeat(`The function reads "the file" and returns {err: nil}; then\n it loops for i := 0; i < n; i++ { sum += a[i] } `, 12)

// Anthropic is an Anthropic messages stream body of at least n bytes.
func Anthropic(n int) []byte {
	return turns(n, func(msgs []any) any {
		return map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 8192, "stream": true, "system": turnText, "messages": msgs}
	}, func() []any {
		return []any{
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": turnText}}},
			map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": "toolu_01", "name": "read_file",
				"input": map[string]any{"path": "/src/main.go", "lines": []int{1, 200}}}}},
		}
	})
}

// OpenAIChat is an OpenAI chat completions stream body of at least n bytes, "stream"
// last as the SDKs write it.
func OpenAIChat(n int) []byte {
	return turns(n, func(msgs []any) any {
		return struct {
			Model    string `json:"model"`
			Messages []any  `json:"messages"`
			Stream   bool   `json:"stream"`
		}{"gpt-5", msgs, true}
	}, func() []any {
		return []any{
			map[string]any{"role": "user", "content": turnText},
			map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"id": "call_01", "type": "function",
				"function": map[string]any{"name": "read_file", "arguments": `{"path":"/src/main.go","lines":[1,200]}`}}}},
		}
	})
}

// turns encodes the body that wraps enough pairs of turns to reach n bytes.
func turns(n int, body func(msgs []any) any, pair func() []any) []byte {
	var msgs []any
	for size := 0; size < n; size += len(turnText) + 200 {
		msgs = append(msgs, pair()...)
	}
	b, err := json.Marshal(body(msgs))
	if err != nil {
		panic(err)
	}
	return b
}
