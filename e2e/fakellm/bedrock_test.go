package fakellm

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
)

// bedrockFrames decodes an event stream with the AWS SDK's decoder: each message's
// event type (its headers checked as Bedrock sends them) and payload.
func bedrockFrames(t *testing.T, body string) (types []string, payloads []string) {
	t.Helper()
	dec := eventstream.NewDecoder()
	r := strings.NewReader(body)
	for {
		m, err := dec.Decode(r, nil)
		if errors.Is(err, io.EOF) {
			return types, payloads
		}
		if err != nil {
			t.Fatalf("frame %d: %v", len(types), err)
		}
		if ct, mt := m.Headers.Get(":content-type"), m.Headers.Get(":message-type"); ct == nil || ct.String() != "application/json" ||
			mt == nil || mt.String() != "event" {
			t.Fatalf("frame %d's headers %v", len(types), m.Headers)
		}
		et := m.Headers.Get(":event-type")
		if et == nil {
			t.Fatalf("frame %d has no :event-type", len(types))
		}
		if !json.Valid(m.Payload) {
			t.Fatalf("frame %d's payload %q is not JSON", len(types), m.Payload)
		}
		types, payloads = append(types, et.String()), append(payloads, string(m.Payload))
	}
}

func TestBedrockAnswers(t *testing.T) {
	u := Usage{InputTokens: 20, CachedInputTokens: 50, CacheCreationInputTokens: 3, OutputTokens: 9}
	s := &Server{Usage: func(Call) Usage { return u }}
	srv := httptest.NewServer(s)
	defer srv.Close()
	const id = "anthropic.claude-sonnet-4-5-20250929-v1:0"
	const escaped = "anthropic.claude-sonnet-4-5-20250929-v1%3A0"
	const anthropicBody = `{"anthropic_version":"bedrock-2023-05-31","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`
	const converseBody = `{"messages":[{"role":"user","content":[{"text":"hi"}]}],"inferenceConfig":{"maxTokens":5}}`
	last := func(api string, stream bool, model string) {
		t.Helper()
		calls := s.Calls()
		c := calls[len(calls)-1]
		if c.API != api || c.Stream != stream || c.Model != model || c.Header.Get("Authorization") != "Bearer sk-test" || len(c.Body) == 0 {
			t.Fatalf("recorded %+v", c)
		}
	}

	t.Run("invoke", func(t *testing.T) {
		res, body := post(t, srv.URL, "/model/"+escaped+"/invoke", "", anthropicBody)
		var msg struct {
			Type, Model string
			Content     []struct{ Type, Text string }
			Usage       map[string]any
		}
		if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/json" || json.Unmarshal([]byte(body), &msg) != nil {
			t.Fatalf("%d %v %s", res.StatusCode, res.Header, body)
		}
		if msg.Type != "message" || msg.Model != "claude-sonnet-4-5-20250929" || len(msg.Content) != 1 || msg.Content[0].Text != Text ||
			msg.Usage["input_tokens"] != 20.0 || msg.Usage["cache_read_input_tokens"] != 50.0 ||
			msg.Usage["cache_creation_input_tokens"] != 3.0 || msg.Usage["output_tokens"] != 9.0 {
			t.Fatalf("message %s", body)
		}
		for h, want := range map[string]string{"X-Amzn-Bedrock-Input-Token-Count": "20", "X-Amzn-Bedrock-Output-Token-Count": "9",
			"X-Amzn-Bedrock-Cache-Read-Input-Token-Count": "50", "X-Amzn-Bedrock-Cache-Write-Input-Token-Count": "3"} {
			if got := res.Header.Get(h); got != want {
				t.Errorf("%s: %q, want %q", h, got, want)
			}
		}
		last(BedrockInvoke, false, id)
	})

	t.Run("invoke-with-response-stream", func(t *testing.T) {
		// Gzip asked for: the frames are compressed as they are sent.
		res, body := post(t, srv.URL, "/model/us."+escaped+"/invoke-with-response-stream", "gzip", anthropicBody)
		if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/vnd.amazon.eventstream" || res.Header.Get("Content-Encoding") != "gzip" {
			t.Fatalf("%d %v", res.StatusCode, res.Header)
		}
		types, payloads := bedrockFrames(t, body)
		var events []map[string]any
		var text strings.Builder
		for i, p := range payloads {
			var chunk struct{ Bytes, P string }
			if types[i] != "chunk" || json.Unmarshal([]byte(p), &chunk) != nil || chunk.P == "" {
				t.Fatalf("frame %d: %s %s", i, types[i], p)
			}
			raw, err := base64.StdEncoding.DecodeString(chunk.Bytes)
			var e map[string]any
			if err != nil || json.Unmarshal(raw, &e) != nil {
				t.Fatalf("frame %d's bytes %q: %v", i, chunk.Bytes, err)
			}
			events = append(events, e)
			if d, ok := e["delta"].(map[string]any); ok && e["type"] == "content_block_delta" {
				text.WriteString(d["text"].(string))
			}
		}
		var kinds []string
		for _, e := range events {
			kinds = append(kinds, e["type"].(string))
		}
		want := []string{"message_start", "content_block_start"}
		for range words() {
			want = append(want, "content_block_delta")
		}
		want = append(want, "content_block_stop", "message_delta", "message_stop")
		if strings.Join(kinds, ",") != strings.Join(want, ",") || text.String() != Text {
			t.Fatalf("events %v, text %q", kinds, text.String())
		}
		start := events[0]["message"].(map[string]any)
		if start["model"] != "claude-sonnet-4-5-20250929" || start["usage"].(map[string]any)["input_tokens"] != 20.0 ||
			start["usage"].(map[string]any)["cache_read_input_tokens"] != 50.0 {
			t.Fatalf("message_start %v", start)
		}
		if out := events[len(events)-2]["usage"].(map[string]any)["output_tokens"]; out != 9.0 {
			t.Fatalf("message_delta's output_tokens %v", out)
		}
		m, _ := events[len(events)-1]["amazon-bedrock-invocationMetrics"].(map[string]any)
		if m["inputTokenCount"] != 20.0 || m["outputTokenCount"] != 9.0 || m["cacheReadInputTokenCount"] != 50.0 ||
			m["cacheWriteInputTokenCount"] != 3.0 {
			t.Fatalf("message_stop's metrics %v", m)
		}
		last(BedrockInvokeStream, true, "us."+id)
	})

	type converseUsage struct {
		InputTokens, OutputTokens, TotalTokens, CacheReadInputTokens, CacheWriteInputTokens int64
	}
	wantUsage := converseUsage{20, 9, 82, 50, 3}

	t.Run("converse", func(t *testing.T) {
		res, body := post(t, srv.URL, "/model/"+escaped+"/converse", "", converseBody)
		var out struct {
			Output struct {
				Message struct {
					Role    string
					Content []struct{ Text string }
				}
			}
			StopReason string
			Usage      converseUsage
		}
		if res.StatusCode != 200 || json.Unmarshal([]byte(body), &out) != nil || out.Output.Message.Role != "assistant" ||
			len(out.Output.Message.Content) != 1 || out.Output.Message.Content[0].Text != Text || out.StopReason != "end_turn" ||
			out.Usage != wantUsage {
			t.Fatalf("%d %s", res.StatusCode, body)
		}
		last(BedrockConverse, false, id)
	})

	t.Run("converse-stream", func(t *testing.T) {
		// An ARN, its slash escaped, names the model too.
		const arn = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/us." + id
		res, body := post(t, srv.URL, "/model/"+strings.ReplaceAll(strings.ReplaceAll(arn, ":", "%3A"), "/", "%2F")+"/converse-stream", "", converseBody)
		if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/vnd.amazon.eventstream" {
			t.Fatalf("%d %v", res.StatusCode, res.Header)
		}
		types, payloads := bedrockFrames(t, body)
		want := []string{"messageStart"}
		for range words() {
			want = append(want, "contentBlockDelta")
		}
		want = append(want, "contentBlockStop", "messageStop", "metadata")
		if strings.Join(types, ",") != strings.Join(want, ",") {
			t.Fatalf("events %v", types)
		}
		var text strings.Builder
		for _, p := range payloads[1 : len(payloads)-3] {
			var d struct {
				ContentBlockIndex int
				Delta             struct{ Text string }
			}
			_ = json.Unmarshal([]byte(p), &d)
			text.WriteString(d.Delta.Text)
		}
		var meta struct{ Usage converseUsage }
		if text.String() != Text || json.Unmarshal([]byte(payloads[len(payloads)-1]), &meta) != nil || meta.Usage != wantUsage ||
			!strings.Contains(payloads[len(payloads)-2], `"stopReason":"end_turn"`) {
			t.Fatalf("text %q, metadata %s", text.String(), payloads[len(payloads)-1])
		}
		last(BedrockConverseStream, true, arn)
		if got := bedrockClaudeModel(arn); got != "claude-sonnet-4-5-20250929" {
			t.Fatalf("the ARN's Claude model: %q", got)
		}
	})

	t.Run("unknown operation and bad body", func(t *testing.T) {
		if res, _ := post(t, srv.URL, "/model/"+escaped+"/no-such-operation", "", converseBody); res.StatusCode != 404 {
			t.Fatalf("an unknown operation: %d", res.StatusCode)
		}
		res, body := post(t, srv.URL, "/model/"+escaped+"/converse", "", "not json")
		if res.StatusCode != 400 || res.Header.Get("X-Amzn-Errortype") != "ValidationException" || !strings.HasPrefix(body, `{"message":`) {
			t.Fatalf("a bad body: %d %v %s", res.StatusCode, res.Header, body)
		}
	})
}
