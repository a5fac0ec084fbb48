package responseusage

import (
	"bytes"
	"fmt"
	"iter"
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

// benchEncodings are the content encodings the benchmarks read.
var benchEncodings = []struct {
	name    string
	coding  string // for compress; "" is identity
	headers map[string]string
}{
	{"identity", "", nil},
	{"gzip", "gzip", map[string]string{"content-encoding": "gzip"}},
	{"deflate", "deflate", map[string]string{"content-encoding": "deflate"}},
	{"br", "br", map[string]string{"content-encoding": "br"}},
}

// encodeChunks compresses a stream chunk by chunk, flushing after each as a
// server streaming events does, and returns the compressed chunks.
func encodeChunks(coding string, chunks [][]byte) [][]byte {
	if coding == "" {
		return chunks
	}
	var buf bytes.Buffer
	w := newCompressor(coding, &buf)
	out := make([][]byte, 0, len(chunks))
	for i, c := range chunks {
		w.Write(c)
		if i == len(chunks)-1 {
			w.Close()
		} else {
			w.Flush()
		}
		out = append(out, bytes.Clone(buf.Bytes()))
		buf.Reset()
	}
	return out
}

func totalLen(chunks [][]byte) int {
	n := 0
	for _, c := range chunks {
		n += len(c)
	}
	return n
}

// BenchmarkSSE reads a 200-chunk stream per operation, as identity and as
// compressed, and reports the cost per chunk. MB/s counts the plain
// (decoded) bytes; wire-B/op the bytes received.
// Run: go test -run '^$' -bench . -benchmem ./enforcer/responseusage
func BenchmarkSSE(b *testing.B) {
	for _, shape := range []string{"openai", "anthropic"} {
		plain := sseChunks(shape)
		for _, enc := range benchEncodings {
			b.Run(shape+"/"+enc.name, func(b *testing.B) {
				chunks := encodeChunks(enc.coding, plain)
				b.SetBytes(int64(totalLen(plain)))
				b.ReportAllocs()
				var ms0, ms1 runtime.MemStats
				runtime.ReadMemStats(&ms0)
				var u Usage
				for b.Loop() {
					e := New(ctSSE, enc.headers, Limits{})
					for _, c := range chunks {
						_ = e.Write(c)
					}
					u = e.Finish(true)
				}
				runtime.ReadMemStats(&ms1)
				if !u.Complete || u.OutputTokens != 199 || !strings.HasSuffix(u.Format, "-sse") || u.TextBytes == 0 {
					b.Fatalf("unexpected usage %s", show(u))
				}
				perChunk := float64(b.N) * float64(len(chunks))
				b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/perChunk, "allocs/chunk")
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/perChunk, "ns/chunk")
				b.ReportMetric(float64(totalLen(chunks)), "wire-B/op")
			})
		}
	}
}

// BenchmarkJSON reads a non-streamed Responses API body in one chunk.
func BenchmarkJSON(b *testing.B) {
	body := readFixture(b, "openai_responses.json")
	for _, enc := range benchEncodings {
		b.Run(enc.name, func(b *testing.B) {
			chunk := body
			if enc.coding != "" {
				chunk = compress(enc.coding, body, nil)
			}
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				e := New(ctJSON, enc.headers, Limits{})
				_ = e.Write(chunk)
				if !e.Finish(true).Complete {
					b.Fatal("incomplete")
				}
			}
			b.ReportMetric(float64(len(chunk)), "wire-B/op")
		})
	}
}

// BenchmarkEmbeddings reads an embeddings answer of 100 vectors of 1,536 floats (1.9 MB,
// as OpenAI sends them with encoding_format "float" and Gemini, Mistral or Voyage
// always), in the gateway's 16 KiB reads: nearly all of it numbers nobody reads, which
// the scanner passes over in runs of digits.
func BenchmarkEmbeddings(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"object":"list","data":[`)
	for i := range 100 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"object":"embedding","index":%d,"embedding":[`, i)
		for j := range 1536 {
			if j > 0 {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, "%.9f", float64((i*1536+j)%1000)/1000-0.5123456)
		}
		sb.WriteString("]}")
	}
	sb.WriteString(`],"model":"text-embedding-3-small","usage":{"prompt_tokens":800,"total_tokens":800}}`)
	body := []byte(sb.String())
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		e := New(ctJSON, nil, Limits{})
		for off := 0; off < len(body); off += 16 << 10 {
			_ = e.Write(body[off:min(off+16<<10, len(body))])
		}
		if u := e.Finish(true); !u.Complete || u.InputTokens != 800 {
			b.Fatalf("the usage was not read: %+v", u)
		}
	}
}

// BenchmarkDecodeDriver compares the two ways of running a pull decoder
// over pushed chunks: a coroutine (iter.Pull, what the package uses) and a
// goroutine handed each chunk over channels.
func BenchmarkDecodeDriver(b *testing.B) {
	plain := sseChunks("openai")
	chunks := encodeChunks("gzip", plain)
	h := map[string]string{"content-encoding": "gzip"}
	for _, driver := range []string{"coroutine", "goroutine"} {
		b.Run(driver, func(b *testing.B) {
			b.SetBytes(int64(totalLen(plain)))
			b.ReportAllocs()
			var u Usage
			for b.Loop() {
				e := New(ctSSE, h, Limits{})
				if driver == "goroutine" {
					e.dec.stop()
					e.dec.next, e.dec.stop = chanPull(e.dec.run)
				}
				for _, c := range chunks {
					_ = e.Write(c)
				}
				u = e.Finish(true)
			}
			if !u.Complete {
				b.Fatalf("unexpected usage %s", show(u))
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/(float64(b.N)*float64(len(chunks))), "ns/chunk")
		})
	}
}

// chanPull is iter.Pull done with a goroutine and two channels.
func chanPull(seq iter.Seq[struct{}]) (func() (struct{}, bool), func()) {
	resume := make(chan bool)  // true: run on; false: stop
	yielded := make(chan bool) // true: yielded; false: seq returned
	done, stopped := false, false
	go func() {
		if <-resume {
			seq(func(struct{}) bool {
				if stopped {
					return false
				}
				yielded <- true
				return <-resume
			})
		}
		yielded <- false
	}()
	next := func() (struct{}, bool) {
		if done {
			return struct{}{}, false
		}
		resume <- true
		if !<-yielded {
			done = true
			return struct{}{}, false
		}
		return struct{}{}, true
	}
	stop := func() {
		if done {
			return
		}
		stopped = true
		resume <- false
		for <-yielded {
		}
		done = true
	}
	return next, stop
}
