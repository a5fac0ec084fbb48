package gateway_test

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/enforcer/gateway"
)

// BenchmarkAnswerToClient is the time a client waits for a non-streamed answer through
// the gateway, from its request to the answer's last byte (client-p50-us): a short and a
// long chat completion, and an embeddings answer in floats (nearly all numbers for the
// usage reader to pass over). ns/op also counts the settlement each iteration waits for,
// whose usage must be the answer's.
//
// Run: go test -run '^$' -bench AnswerToClient -benchtime 3000x -count 8 ./enforcer/gateway
func BenchmarkAnswerToClient(b *testing.B) {
	for _, c := range []struct {
		name        string
		answer      []byte
		inputTokens int64
	}{
		{"chat-2KiB", completionOfSize(2 << 10), 3},
		{"chat-64KiB", completionOfSize(64 << 10), 3},
		{"embeddings-64KiB", embeddingsOfSize(64 << 10), 8},
	} {
		b.Run(c.name, func(b *testing.B) {
			answer := c.answer
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Content-Length", strconv.Itoa(len(answer)))
				_, _ = w.Write(answer)
			}))
			b.Cleanup(up.Close)
			e := newEnv(b, up.URL, gateway.Config{})
			url, body := e.front.URL+"/v1/chat/completions", chatOfSize(1<<10)
			waits := make([]time.Duration, 0, b.N)
			for b.Loop() {
				res, t0 := postTimed(b, url, bytes.NewReader(body))
				n, _ := io.Copy(io.Discard, res.Body)
				waits = append(waits, time.Since(t0))
				res.Body.Close()
				if res.StatusCode != 200 || n != int64(len(answer)) {
					b.Fatalf("status %d, %d of %d bytes", res.StatusCode, n, len(answer))
				}
				if u := e.tracker.settledOnce(b); u.InputTokens != c.inputTokens {
					b.Fatalf("settled %d input tokens, the answer said %d", u.InputTokens, c.inputTokens)
				}
			}
			reportMedianUS(b, waits, "client-p50-us")
		})
	}
}

// BenchmarkFirstChunkToClient is the time a client waits for a stream's first event
// through the gateway, from its request to having read that event (first-chunk-p50-us),
// the event having come with the upstream's headers as providers send it; the rest of
// the stream (its usage last, which the client did not ask for and is not sent) follows
// at once. ns/op also counts reading the stream to
// its end and the settlement each iteration waits for, whose usage must be the stream's.
//
// Run: go test -run '^$' -bench FirstChunkToClient -benchtime 3000x -count 8 ./enforcer/gateway
func BenchmarkFirstChunkToClient(b *testing.B) {
	first := []byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","model":"gpt-4o-mini","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\n")
	var rest bytes.Buffer
	for range 16 {
		rest.WriteString(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":"token "}}]}` + "\n\n")
	}
	// The usage event, which the gateway asked for and the client did not: read, not sent.
	usage := `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","model":"gpt-4o-mini","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":16}}` + "\n\n"
	rest.WriteString(usage + "data: [DONE]\n\n")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write(first)
		w.(http.Flusher).Flush()
		_, _ = w.Write(rest.Bytes())
	}))
	b.Cleanup(up.Close)
	e := newEnv(b, up.URL, gateway.Config{})
	url := e.front.URL + "/v1/chat/completions"
	waits := make([]time.Duration, 0, b.N)
	for b.Loop() {
		res, t0 := postTimed(b, url, strings.NewReader(chatBody))
		body := bufio.NewReader(res.Body)
		line, err := body.ReadSlice('\n')
		waits = append(waits, time.Since(t0))
		if err != nil || !bytes.Equal(line, first[:len(first)-1]) {
			b.Fatalf("first line %q, %v", line, err)
		}
		n, _ := io.Copy(io.Discard, body)
		res.Body.Close()
		if res.StatusCode != 200 || n != int64(len(first)-len(line)+rest.Len()-len(usage)) {
			b.Fatalf("status %d, %d bytes after the first line", res.StatusCode, n)
		}
		if u := e.tracker.settledOnce(b); u.InputTokens != 3 || u.OutputTokens != 16 {
			b.Fatalf("settled %d input and %d output tokens, the stream said 3 and 16", u.InputTokens, u.OutputTokens)
		}
	}
	reportMedianUS(b, waits, "first-chunk-p50-us")
}

// postTimed posts body to url with a member's key (send) and returns the response and
// when the request was sent.
func postTimed(b *testing.B, url string, body io.Reader) (*http.Response, time.Time) {
	t0 := time.Now()
	return send(b, "POST", url, "tgk_good", body), t0
}

// reportMedianUS reports the median of waits, in microseconds, as unit.
func reportMedianUS(b *testing.B, waits []time.Duration, unit string) {
	slices.Sort(waits)
	b.ReportMetric(float64(waits[len(waits)/2].Nanoseconds())/1e3, unit)
}

// completionOfSize is a chat completion answer of n bytes, its usage last.
func completionOfSize(n int) []byte {
	head := `{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"`
	tail := `"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`
	return []byte(head + strings.Repeat("token ", (n-len(head)-len(tail))/6) + strings.Repeat(" ", (n-len(head)-len(tail))%6) + tail)
}

// embeddingsOfSize is an embeddings answer of about n bytes, floats as OpenAI sends them.
func embeddingsOfSize(n int) []byte {
	var sb strings.Builder
	sb.WriteString(`{"object":"list","data":[{"object":"embedding","index":0,"embedding":[`)
	for i := 0; sb.Len() < n-120; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(strconv.FormatFloat(float64(i%997)/997-0.4987, 'f', 9, 64))
	}
	sb.WriteString(`]}],"model":"text-embedding-3-small","usage":{"prompt_tokens":8,"total_tokens":8}}`)
	return []byte(sb.String())
}
