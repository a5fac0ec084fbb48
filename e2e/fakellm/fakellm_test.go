package fakellm

import (
	"bufio"
	"compress/gzip"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func post(t *testing.T, url, path, acceptEncoding, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-test")
	if acceptEncoding != "" {
		// Set explicitly, so the transport neither adds its own nor decodes the answer.
		req.Header.Set("Accept-Encoding", acceptEncoding)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var r io.Reader = res.Body
	if res.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return res, string(b)
}

// sseData returns the data lines of an event stream, with their event names.
func sseData(t *testing.T, s string) (events, data []string) {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		l := sc.Text()
		if name, ok := strings.CutPrefix(l, "event: "); ok {
			events = append(events, name)
		}
		if d, ok := strings.CutPrefix(l, "data: "); ok {
			data = append(data, d)
		}
	}
	return events, data
}

func TestOpenAIStreamCarriesUsageOnlyWhenAskedFor(t *testing.T) {
	s := &Server{Usage: func(Call) Usage { return Usage{InputTokens: 100, CachedInputTokens: 40, OutputTokens: 7} },
		Snapshots: map[string]string{"gpt-4o-mini": "gpt-4o-mini-2024-07-18"}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	for _, c := range []struct {
		name, body string
		usage      bool
	}{
		{"without stream_options", `{"model":"gpt-4o-mini","stream":true,"messages":[]}`, false},
		{"include_usage false", `{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":false},"messages":[]}`, false},
		{"include_usage true", `{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},"messages":[]}`, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, body := post(t, srv.URL, "/v1/chat/completions", "identity", c.body)
			if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
				t.Fatalf("%d %v", res.StatusCode, res.Header)
			}
			_, data := sseData(t, body)
			if data[len(data)-1] != "[DONE]" {
				t.Fatalf("last event %q", data[len(data)-1])
			}
			var text strings.Builder
			usageChunks := 0
			for _, d := range data[:len(data)-1] {
				var chunk struct {
					Model   string
					Choices []struct{ Delta struct{ Content string } }
					Usage   *struct {
						PromptTokens, CompletionTokens int64 `json:"-"`
					}
				}
				if err := json.Unmarshal([]byte(d), &chunk); err != nil {
					t.Fatal(err)
				}
				if chunk.Model != "gpt-4o-mini-2024-07-18" {
					t.Fatalf("model %q", chunk.Model)
				}
				for _, ch := range chunk.Choices {
					text.WriteString(ch.Delta.Content)
				}
				if chunk.Usage != nil {
					usageChunks++
					if len(chunk.Choices) != 0 || !strings.Contains(d, `"prompt_tokens":100,"completion_tokens":7`) ||
						!strings.Contains(d, `"cached_tokens":40`) {
						t.Fatalf("usage chunk %s", d)
					}
				}
				if mentions := strings.Contains(d, `"usage"`); mentions != c.usage {
					t.Fatalf("chunk mentions usage: %v, want %v: %s", mentions, c.usage, d)
				}
			}
			if want := map[bool]int{false: 0, true: 1}[c.usage]; usageChunks != want {
				t.Fatalf("%d usage chunks, want %d", usageChunks, want)
			}
			if text.String() != Text {
				t.Fatalf("text %q", text.String())
			}
		})
	}
	calls := s.Calls()
	if len(calls) != 3 || !calls[2].IncludeUsage || calls[1].IncludeUsage || calls[0].IncludeUsage || !calls[0].Stream ||
		calls[0].API != OpenAIChat || calls[0].Header.Get("Authorization") != "Bearer sk-test" {
		t.Fatalf("calls %+v", calls)
	}
}

func TestGzipWhenAcceptEncodingAllowsIt(t *testing.T) {
	srv := httptest.NewServer(&Server{})
	defer srv.Close()
	for _, c := range []struct {
		acceptEncoding string
		gzip           bool
	}{
		{"gzip, deflate", true},
		{"br, gzip;q=0.5", true},
		{"*", true},
		{"identity", false},
		{"gzip;q=0", false},
		{"*, gzip;q=0", false},
		{"br", false},
	} {
		t.Run(c.acceptEncoding, func(t *testing.T) {
			for _, path := range []string{"/v1/chat/completions", "/v1/messages"} {
				for _, stream := range []string{"false", "true"} {
					res, body := post(t, srv.URL, path, c.acceptEncoding, `{"model":"m","max_tokens":5,"stream":`+stream+`}`)
					if got := res.Header.Get("Content-Encoding") == "gzip"; got != c.gzip || res.StatusCode != 200 {
						t.Fatalf("%s stream %s: status %d, gzip %v, want %v", path, stream, res.StatusCode, got, c.gzip)
					}
					if !strings.Contains(body, "tokens") {
						t.Fatalf("%s stream %s: decoded body %q", path, stream, body)
					}
				}
			}
		})
	}
}

func TestAnthropicAnswers(t *testing.T) {
	s := &Server{Usage: func(Call) Usage {
		return Usage{InputTokens: 20, CachedInputTokens: 50, CacheCreationInputTokens: 3, OutputTokens: 9}
	}}
	srv := httptest.NewServer(s)
	defer srv.Close()

	_, body := post(t, srv.URL, "/v1/messages", "", `{"model":"claude-x","max_tokens":5,"messages":[]}`)
	var msg struct {
		Type, Model string
		Content     []struct{ Type, Text string }
		Usage       struct {
			InputTokens              int64 `json:"input_tokens"`
			CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
			CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
			OutputTokens             int64 `json:"output_tokens"`
		}
	}
	if err := json.Unmarshal([]byte(body), &msg); err != nil {
		t.Fatal(err)
	}
	if msg.Type != "message" || msg.Model != "claude-x" || len(msg.Content) != 1 || msg.Content[0].Text != Text ||
		msg.Usage.InputTokens != 20 || msg.Usage.CacheReadInputTokens != 50 || msg.Usage.CacheCreationInputTokens != 3 || msg.Usage.OutputTokens != 9 {
		t.Fatalf("message %s", body)
	}

	_, body = post(t, srv.URL, "/v1/messages", "", `{"model":"claude-x","max_tokens":5,"stream":true,"messages":[]}`)
	events, data := sseData(t, body)
	want := []string{"message_start", "content_block_start", "ping"}
	for range words() {
		want = append(want, "content_block_delta")
	}
	want = append(want, "content_block_stop", "message_delta", "message_stop")
	if strings.Join(events, ",") != strings.Join(want, ",") || len(data) != len(events) {
		t.Fatalf("events %v", events)
	}
	if !strings.Contains(data[0], `"input_tokens":20,"cache_creation_input_tokens":3,"cache_read_input_tokens":50`) ||
		!strings.Contains(data[len(data)-2], `"usage":{"output_tokens":9}`) {
		t.Fatalf("usage events %s / %s", data[0], data[len(data)-2])
	}
}

func TestEmbeddingsAnswers(t *testing.T) {
	s := &Server{Usage: func(Call) Usage { return Usage{InputTokens: 42, OutputTokens: 7} }}
	srv := httptest.NewServer(s)
	defer srv.Close()
	type list struct {
		Object string
		Data   []struct {
			Index     int
			Embedding json.RawMessage
		}
		Model string
		Usage map[string]int64
	}
	read := func(body string) list {
		t.Helper()
		var l list
		if err := json.Unmarshal([]byte(body), &l); err != nil {
			t.Fatal(err)
		}
		// The usage is the last thing in the body, after every vector; an embedding
		// model generates nothing, so no completion tokens are reported.
		if l.Object != "list" || l.Model != "text-embedding-3-small" || len(l.Usage) != 2 || l.Usage["prompt_tokens"] != 42 ||
			l.Usage["total_tokens"] != 42 || !strings.HasSuffix(body, `"usage":{"prompt_tokens":42,"total_tokens":42}}`) {
			t.Fatalf("list %s...", body[:min(len(body), 200)])
		}
		return l
	}

	_, body := post(t, srv.URL, "/v1/embeddings", "", `{"model":"text-embedding-3-small","input":["a","b","c"]}`)
	l := read(body)
	if len(l.Data) != 3 || l.Data[2].Index != 2 {
		t.Fatalf("%d vectors for three inputs", len(l.Data))
	}
	var floats []float32
	if err := json.Unmarshal(l.Data[1].Embedding, &floats); err != nil || len(floats) != EmbeddingDimensions || floats[0] != embeddingValue(1, 0) {
		t.Fatalf("vector: %d floats, %v", len(floats), err)
	}

	_, body = post(t, srv.URL, "/v1/embeddings", "gzip", `{"model":"text-embedding-3-small","input":"a","encoding_format":"base64"}`)
	l = read(body)
	var b64 string
	if len(l.Data) != 1 || json.Unmarshal(l.Data[0].Embedding, &b64) != nil {
		t.Fatalf("base64 answer: %+v", l.Data)
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(raw) != 4*EmbeddingDimensions ||
		math.Float32frombits(binary.LittleEndian.Uint32(raw[4*7:])) != embeddingValue(0, 7) {
		t.Fatalf("base64 vector: %d bytes, %v", len(raw), err)
	}
	if got := inputCount(json.RawMessage(`[[1,2],[3]]`)); got != 2 {
		t.Fatalf("two token arrays counted as %d inputs", got)
	}
	if got := inputCount(json.RawMessage(`[1,2,3]`)); got != 1 {
		t.Fatalf("one token array counted as %d inputs", got)
	}
}

func TestUnknownPathAndBadBody(t *testing.T) {
	s := &Server{}
	srv := httptest.NewServer(s)
	defer srv.Close()
	if res, _ := post(t, srv.URL, "/v1/images/variations", "", `{"model":"m"}`); res.StatusCode != 404 {
		t.Fatalf("unknown path: %d", res.StatusCode)
	}
	if res, _ := post(t, srv.URL, "/v1/chat/completions", "gzip", `not json`); res.StatusCode != 400 || res.Header.Get("Content-Encoding") != "" {
		t.Fatalf("bad body: %d %v", res.StatusCode, res.Header)
	}
	if n := len(s.Calls()); n != 2 {
		t.Fatalf("%d calls recorded", n)
	}
}

// Azure OpenAI's deployment paths answer as OpenAI's chat completions: the model is the
// body's, else the deployment's; without api-version, or with no deployment, the path
// is unknown.
func TestAzureOpenAIChatCompletions(t *testing.T) {
	s := &Server{Usage: func(Call) Usage { return Usage{InputTokens: 10, OutputTokens: 4} }}
	srv := httptest.NewServer(s)
	defer srv.Close()
	const path = "/openai/deployments/my-deployment/chat/completions?api-version=2024-10-21"
	for _, c := range []struct{ name, body, model string }{
		{"the body's model", `{"model":"gpt-4o-mini","messages":[]}`, "gpt-4o-mini"},
		{"no model: the deployment's name", `{"messages":[]}`, "my-deployment"},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, body := post(t, srv.URL, path, "", c.body)
			var got struct{ Object, Model string }
			if res.StatusCode != 200 || json.Unmarshal([]byte(body), &got) != nil || got.Object != "chat.completion" || got.Model != c.model ||
				!strings.Contains(body, `"prompt_tokens":10`) {
				t.Fatalf("%d %s", res.StatusCode, body)
			}
			calls := s.Calls()
			if last := calls[len(calls)-1]; last.API != OpenAIChat || last.Model != c.model || last.Query != "api-version=2024-10-21" {
				t.Fatalf("recorded %+v", last)
			}
		})
	}
	for _, p := range []string{"/openai/deployments/my-deployment/chat/completions", "/openai/deployments//chat/completions?api-version=1",
		"/openai/deployments/a/b/chat/completions?api-version=1"} {
		if res, _ := post(t, srv.URL, p, "", `{"model":"gpt-4o-mini"}`); res.StatusCode != 404 {
			t.Fatalf("%s: %d, want 404", p, res.StatusCode)
		}
	}
	// A stream answers as OpenAI's does.
	res, body := post(t, srv.URL, path, "", `{"stream":true,"stream_options":{"include_usage":true},"messages":[]}`)
	if _, data := sseData(t, body); res.StatusCode != 200 || len(data) < 2 || data[len(data)-1] != "[DONE]" ||
		!strings.Contains(body, `"model":"my-deployment"`) || !strings.Contains(body, `"completion_tokens":4`) {
		t.Fatalf("%d %s", res.StatusCode, body)
	}
}

// TestUsagesChangeBetweenCalls changes a NextUsage between calls to a running server, as the
// e2e tests do: each answer carries the usage set last before its call.
func TestUsagesChangeBetweenCalls(t *testing.T) {
	var u NextUsage
	srv := httptest.NewServer(&Server{Usage: u.Of})
	defer srv.Close()
	promptTokens := func() int64 {
		t.Helper()
		_, body := post(t, srv.URL, "/v1/chat/completions", "identity", `{"model":"gpt-4o-mini","messages":[]}`)
		var a struct {
			Usage struct {
				PromptTokens int64 `json:"prompt_tokens"`
			}
		}
		if err := json.Unmarshal([]byte(body), &a); err != nil {
			t.Fatalf("%v: %s", err, body)
		}
		return a.Usage.PromptTokens
	}
	if got := promptTokens(); got != 0 {
		t.Fatalf("the zero NextUsage answered %d prompt tokens", got)
	}
	for _, want := range []int64{11, 22, 22, 33} {
		u.Set(Usage{InputTokens: want})
		if got := promptTokens(); got != want {
			t.Fatalf("after Set(%d): %d prompt tokens", want, got)
		}
	}
}

// A chain of tool calls (a handoff, then the next agent's tool) is asked for one call a
// step: a request carrying n results gets the chain's (n+1)th call, and text past its
// end, on each API that asks for tools.
func TestToolCallChain(t *testing.T) {
	s := &Server{ToolUse: &ToolUse{Name: "transfer_to_toll_clerk", Input: `{}`, Then: &ToolUse{Name: "pay_toll", Input: `{"road":"A1"}`}}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	for _, c := range []struct{ path, body, result string }{
		{"/v1/chat/completions", `{"model":"gpt-4o-mini","messages":[%s]}`, `{"role":"tool","tool_call_id":"c%d","content":"ok"}`},
		{"/v1/responses", `{"model":"gpt-4o-mini","input":[%s]}`, `{"type":"function_call_output","call_id":"c%d","output":"ok"}`},
		{"/v1/messages", `{"model":"claude-x","max_tokens":5,"messages":[%s]}`, `{"role":"user","content":[{"type":"tool_result","tool_use_id":"c%d"}]}`},
	} {
		var results []string
		for i, want := range []string{"transfer_to_toll_clerk", "pay_toll", ""} {
			_, body := post(t, srv.URL, c.path, "", fmt.Sprintf(c.body, strings.Join(results, ",")))
			asked := ""
			for _, name := range []string{"transfer_to_toll_clerk", "pay_toll"} {
				if strings.Contains(body, `"name":"`+name+`"`) {
					asked = name
				}
			}
			if asked != want || (want == "" && !strings.Contains(body, Text)) {
				t.Errorf("%s with %d results: %s; want a call of %q (none: the answer's text)", c.path, i, body, want)
			}
			results = append(results, fmt.Sprintf(c.result, i))
		}
	}
}
