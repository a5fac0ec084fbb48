package gateway_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/gateway"
)

// completionsUpstream answers a legacy completion (POST /v1/completions, OpenAI's SDK's
// completions.create) as OpenAI does: text_completion chunks, and the usage in one more
// chunk before [DONE] only when the request asked for it (stream_options.include_usage).
func completionsUpstream(t *testing.T) *httptest.Server {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			StreamOptions *struct {
				IncludeUsage bool `json:"include_usage"`
			} `json:"stream_options"`
		}
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"id":"cmpl-1","object":"text_completion","model":"gpt-3.5-turbo-instruct","choices":[{"text":"func add(a, b int) int { return a + b }","index":0,"finish_reason":null}]}`+"\n\n")
		_, _ = io.WriteString(w, `data: {"id":"cmpl-1","object":"text_completion","model":"gpt-3.5-turbo-instruct","choices":[{"text":"","index":0,"finish_reason":"stop"}]}`+"\n\n")
		if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
			_, _ = io.WriteString(w, `data: {"id":"cmpl-1","object":"text_completion","model":"gpt-3.5-turbo-instruct","choices":[],"usage":{"prompt_tokens":2400,"completion_tokens":19,"total_tokens":2419}}`+"\n\n")
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(up.Close)
	return up
}

// A legacy completion streamed (OpenAI's /v1/completions, Azure OpenAI's
// /openai/deployments/{deployment}/completions) reports its usage only when asked, as a
// chat completion does: the stream is asked, and is charged the counts it reports, not an
// estimate from its prompt and text (which a code completion's tokens run past).
func TestLegacyCompletionStreamIsAskedForItsUsage(t *testing.T) {
	up := completionsUpstream(t)
	e := newEnv(t, up.URL, gateway.Config{})
	for _, path := range []string{"/v1/completions", "/openai/deployments/instruct/completions?api-version=2024-10-21"} {
		t.Run(path, func(t *testing.T) {
			body := fmt.Sprintf(`{"model":"gpt-3.5-turbo-instruct","stream":true,"max_tokens":64,"prompt":%q}`, "package main\n\n// add returns the sum\n")
			res := post(t, e.front.URL+path, "tgk_good", body)
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			u := e.tracker.settledOnce(t)
			if !u.Complete || u.InputTokens != 2400 || u.OutputTokens != 19 || u.Seen == nil || !u.Seen.InputReported || !u.Seen.OutputReported {
				t.Fatalf("settled in %d out %d complete %v seen %+v, want the reported 2400 and 19, complete", u.InputTokens, u.OutputTokens, u.Complete, u.Seen)
			}
		})
	}
}
