package fakellm

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
)

// Vertex AI's publisher-model paths answer Claude as Anthropic's messages and Gemini as
// the Gemini API, the model taken from the path; other paths under /v1/projects/ are
// unknown.
func TestVertexAnswers(t *testing.T) {
	u := Usage{InputTokens: 20, CachedInputTokens: 5, CacheCreationInputTokens: 3, OutputTokens: 8}
	s := &Server{Usage: func(Call) Usage { return u }}
	srv := httptest.NewServer(s)
	defer srv.Close()
	const claude = "/v1/projects/p1/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929"
	const gemini = "/v1/projects/p1/locations/us-central1/publishers/google/models/gemini-2.5-flash"
	const claudeBody = `{"anthropic_version":"vertex-2023-10-16","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`
	const streamBody = `{"anthropic_version":"vertex-2023-10-16","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
	const geminiBody = `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`
	last := func(api, path, model string, stream bool) {
		t.Helper()
		calls := s.Calls()
		c := calls[len(calls)-1]
		if c.API != api || c.Path != path || c.Model != model || c.Stream != stream || c.Header.Get("Authorization") != "Bearer sk-test" {
			t.Fatalf("recorded %+v, want %s %s model %q stream %v", c, api, path, model, stream)
		}
	}
	streamEvents := func(t *testing.T, body string) {
		t.Helper()
		events, data := sseData(t, body)
		if len(events) < 4 || events[0] != "message_start" || events[len(events)-1] != "message_stop" ||
			!strings.Contains(data[0], `"model":"claude-sonnet-4-5-20250929"`) ||
			!strings.Contains(data[len(data)-2], `"output_tokens":8`) {
			t.Fatalf("not Anthropic's stream: %v\n%s", events, body)
		}
	}

	t.Run("rawPredict", func(t *testing.T) {
		res, body := post(t, srv.URL, claude+":rawPredict", "", claudeBody)
		var msg struct {
			Type, Model string
			Content     []struct{ Text string }
			Usage       map[string]any
		}
		if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/json" || json.Unmarshal([]byte(body), &msg) != nil {
			t.Fatalf("%d %v %s", res.StatusCode, res.Header, body)
		}
		if msg.Type != "message" || msg.Model != "claude-sonnet-4-5-20250929" || len(msg.Content) != 1 || msg.Content[0].Text != Text ||
			msg.Usage["input_tokens"] != 20.0 || msg.Usage["cache_read_input_tokens"] != 5.0 ||
			msg.Usage["cache_creation_input_tokens"] != 3.0 || msg.Usage["output_tokens"] != 8.0 {
			t.Fatalf("message %s", body)
		}
		last(AnthropicMessages, claude+":rawPredict", "claude-sonnet-4-5@20250929", false)
	})
	t.Run("streamRawPredict", func(t *testing.T) {
		res, body := post(t, srv.URL, claude+":streamRawPredict", "", streamBody)
		if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
			t.Fatalf("%d %v", res.StatusCode, res.Header)
		}
		streamEvents(t, body)
		last(AnthropicMessages, claude+":streamRawPredict", "claude-sonnet-4-5@20250929", true)
	})
	t.Run("rawPredict with stream true", func(t *testing.T) {
		_, body := post(t, srv.URL, claude+":rawPredict", "", streamBody)
		streamEvents(t, body)
		last(AnthropicMessages, claude+":rawPredict", "claude-sonnet-4-5@20250929", true)
	})
	t.Run("count-tokens", func(t *testing.T) {
		const path = "/v1/projects/p1/locations/us-east5/publishers/anthropic/models/count-tokens:rawPredict"
		res, body := post(t, srv.URL, path, "", `{"model":"claude-sonnet-4-5@20250929","messages":[{"role":"user","content":"hi"}]}`)
		if res.StatusCode != 200 || body != `{"input_tokens":20}` {
			t.Fatalf("%d %s", res.StatusCode, body)
		}
		last(AnthropicCountTokens, path, "claude-sonnet-4-5@20250929", false)
	})
	t.Run("generateContent", func(t *testing.T) {
		res, body := post(t, srv.URL, gemini+":generateContent", "", geminiBody)
		if res.StatusCode != 200 || !strings.Contains(body, `"modelVersion":"gemini-2.5-flash"`) ||
			!strings.Contains(body, `"promptTokenCount":20`) || !strings.Contains(body, `"cachedContentTokenCount":5`) ||
			!strings.Contains(body, `"candidatesTokenCount":6,"thoughtsTokenCount":2`) || !strings.Contains(body, Text) {
			t.Fatalf("%d %s", res.StatusCode, body)
		}
		last(GeminiGenerate, gemini+":generateContent", "gemini-2.5-flash", false)
	})
	t.Run("streamGenerateContent", func(t *testing.T) {
		res, body := post(t, srv.URL, gemini+":streamGenerateContent?alt=sse", "", geminiBody)
		_, data := sseData(t, body)
		if res.StatusCode != 200 || len(data) != len(words()) || !strings.Contains(data[len(data)-1], `"finishReason":"STOP"`) {
			t.Fatalf("%d %s", res.StatusCode, body)
		}
		last(GeminiStream, gemini+":streamGenerateContent", "gemini-2.5-flash", true)
	})
	t.Run("countTokens", func(t *testing.T) {
		if _, body := post(t, srv.URL, gemini+":countTokens", "", geminiBody); body != `{"totalTokens":20}` {
			t.Fatalf("%s", body)
		}
		last(GeminiCountTokens, gemini+":countTokens", "gemini-2.5-flash", false)
	})
	t.Run("unknown paths", func(t *testing.T) {
		for _, path := range []string{
			"/v1/projects/p1/locations/us-east5/publishers/meta/models/llama:rawPredict",
			"/v1/projects/p1/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:predict",
			"/v1/projects/p1/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929",
			"/v1/projects/p1/locations/us-east5/endpoints/123:rawPredict",
			"/v1/projects//locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:rawPredict",
		} {
			if res, body := post(t, srv.URL, path, "", claudeBody); res.StatusCode != 404 {
				t.Errorf("%s: %d %s", path, res.StatusCode, body)
			}
		}
	})
}
