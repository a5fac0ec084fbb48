package usage

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// sseChunks builds a 200-chunk stream, one event per chunk as Envoy usually
// hands them over.
func sseChunks(shape string) [][]byte {
	const n = 200
	chunks := make([][]byte, 0, n)
	switch shape {
	case "openai":
		for i := range n - 1 {
			chunks = append(chunks, fmt.Appendf(nil, `data: {"id":"chatcmpl-BQ6yHn0sMFg2YfWq6vWZqLpJ7yOGQ","object":"chat.completion.chunk","created":1745838749,"model":"gpt-4.1-mini-2025-04-14","service_tier":"default","system_fingerprint":"fp_38647f5e19","choices":[{"index":0,"delta":{"content":" token %d é"},"logprobs":null,"finish_reason":null}],"usage":null}`+"\n\n", i))
		}
		chunks = append(chunks, []byte(`data: {"id":"chatcmpl-BQ6yHn0sMFg2YfWq6vWZqLpJ7yOGQ","object":"chat.completion.chunk","created":1745838749,"model":"gpt-4.1-mini-2025-04-14","choices":[],"usage":{"prompt_tokens":1930,"completion_tokens":199,"total_tokens":2129,"prompt_tokens_details":{"cached_tokens":1792,"audio_tokens":0}}}`+"\n\ndata: [DONE]\n\n"))
	case "anthropic":
		chunks = append(chunks, []byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01Hb8bG2hfpBrX3vQ9wFh3Vq\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-3-5-haiku-20241022\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":472,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0,\"output_tokens\":2}}}\n\n"))
		for i := range n - 2 {
			chunks = append(chunks, fmt.Appendf(nil, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" token %d é\"}}\n\n", i))
		}
		chunks = append(chunks, []byte("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":199}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"))
	}
	return chunks
}

// BenchmarkSSE reads a 200-chunk stream per operation and reports the cost
// per chunk. Run: go test -run '^$' -bench BenchmarkSSE -benchmem ./enforcer/usage
func BenchmarkSSE(b *testing.B) {
	for _, shape := range []string{"openai", "anthropic"} {
		b.Run(shape, func(b *testing.B) {
			chunks := sseChunks(shape)
			size := 0
			for _, c := range chunks {
				size += len(c)
			}
			b.SetBytes(int64(size))
			b.ReportAllocs()
			var ms0, ms1 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			var u Usage
			for b.Loop() {
				e := New(ctSSE, nil, Limits{})
				for _, c := range chunks {
					_ = e.Write(c)
				}
				u = e.Finish(true)
			}
			runtime.ReadMemStats(&ms1)
			if !u.Complete || u.OutputTokens != 199 || !strings.HasSuffix(u.Format, "-sse") {
				b.Fatalf("unexpected usage %s", show(u))
			}
			perChunk := float64(b.N) * float64(len(chunks))
			b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/perChunk, "allocs/chunk")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/perChunk, "ns/chunk")
		})
	}
}

func BenchmarkJSON(b *testing.B) {
	body := readFixture(b, "openai_responses.json")
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		e := New(ctJSON, nil, Limits{})
		_ = e.Write(body)
		if !e.Finish(true).Complete {
			b.Fatal("incomplete")
		}
	}
}
