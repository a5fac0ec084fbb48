package demo

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// DelayHeader asks the fake upstream to wait that many milliseconds before it answers
// (at most MaxDelay; a value that is no positive number of milliseconds answers at once),
// so that requests stay in flight long enough to meet an in-flight guard's refusals. The
// gateway passes it upstream like any header of the client's.
const (
	DelayHeader = "X-Demo-Delay-Ms"
	MaxDelay    = 5 * time.Second
)

// delayOf is the wait a request asks for with DelayHeader, bounded by MaxDelay.
func delayOf(r *http.Request) time.Duration {
	ms, err := strconv.Atoi(strings.TrimSpace(r.Header.Get(DelayHeader)))
	if err != nil || ms <= 0 {
		return 0
	}
	if int64(ms) >= MaxDelay.Milliseconds() {
		return MaxDelay
	}
	return time.Duration(ms) * time.Millisecond
}

// Model is the model the fake upstream answers as when a request names none. Its price
// comes from the shipped price catalog (pkg/pricecatalog): `tollgate dev` sets no price.
const Model = "gpt-4o-mini"

// Tokens every fake completion reports. At the catalog's gpt-4o-mini prices (0.15 USD
// per million input tokens, 0.60 per million output) one completion costs
// ceil((20000*150000 + 11666*600000) / 1e6) = ceil(9999.6) = 10000 micro-USD: 0.01 USD.
const (
	InputTokens  = 20000
	OutputTokens = 11666
)

// AnthropicModel is the model a fake Anthropic message answers as when a request names
// none, and the tokens every one reports: at the catalog's claude-haiku-4-5 prices (1 USD
// per million input tokens, 5 per million output) 2500*1 + 1500*5 = 10000 micro-USD,
// 0.01 USD, as an OpenAI completion.
const (
	AnthropicModel        = "claude-haiku-4-5"
	AnthropicInputTokens  = 2500
	AnthropicOutputTokens = 1500
)

// Upstream is a fake of OpenAI's chat completions (POST .../chat/completions) and
// Anthropic's messages (POST .../messages), each as JSON or, with "stream": true, as
// server-sent events, so both official SDKs can be tried through the demo's gateway.
// It answers at once, or after the wait a request asks for (DelayHeader).
// With SettleURL set (the forward-auth demo, whose proxy reads no usage) it reports
// the usage of each answer to the enforcer's /settle under the request id the proxy
// added.
type Upstream struct {
	// SettleURL is the enforcer's POST /settle.
	SettleURL string
	Log       *slog.Logger
	Client    *http.Client
}

func (u *Upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	anthropic := strings.HasSuffix(r.URL.Path, "/messages")
	if r.Method != http.MethodPost || !anthropic && !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		// In the providers' own shape, so an SDK pointed at the demo shows the message.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"error":{"type":"not_found_error","message":"the demo upstream serves POST /v1/chat/completions and POST /v1/messages only"}}`)
		return
	}
	if d := delayOf(r); d > 0 {
		select {
		case <-time.After(d):
		case <-r.Context().Done():
			return
		}
	}
	var in struct {
		Model  string `json:"model"`
		Stream bool   `json:"stream"`
	}
	_ = json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&in)
	if anthropic {
		if in.Model == "" {
			in.Model = AnthropicModel
		}
		anthropicAnswer(w, in.Model, in.Stream)
		if id := r.Header.Get("X-Service-Request-Id"); id != "" && u.SettleURL != "" {
			u.settle(id, in.Model, AnthropicInputTokens, AnthropicOutputTokens)
		}
		return
	}
	if in.Model == "" {
		in.Model = Model
	}
	usage := fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}`, InputTokens, OutputTokens, InputTokens+OutputTokens)
	if in.Stream {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, word := range []string{"Hello", " from", " the", " demo", " upstream."} {
			fmt.Fprintf(w, "data: {\"object\":\"chat.completion.chunk\",\"model\":%q,\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}],\"usage\":null}\n\n", in.Model, word)
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
		}
		fmt.Fprintf(w, "data: {\"object\":\"chat.completion.chunk\",\"model\":%q,\"choices\":[],\"usage\":%s}\n\ndata: [DONE]\n\n", in.Model, usage)
	} else {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"chatcmpl-demo","object":"chat.completion","model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"Hello from the demo upstream."},"finish_reason":"stop"}],"usage":%s}`+"\n", in.Model, usage)
	}
	if id := r.Header.Get("X-Service-Request-Id"); id != "" && u.SettleURL != "" {
		u.settle(id, in.Model, InputTokens, OutputTokens)
	}
}

// anthropicAnswer writes an Anthropic message: JSON, or the event stream (message_start
// with the input usage, one text delta per word, message_delta with the output usage).
func anthropicAnswer(w http.ResponseWriter, model string, stream bool) {
	const text = "Hello from the demo upstream."
	if !stream {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"msg_demo","type":"message","role":"assistant","model":%q,"content":[{"type":"text","text":%q}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":%d,"output_tokens":%d}}`+"\n",
			model, text, AnthropicInputTokens, AnthropicOutputTokens)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	event := func(name, data string) {
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, data)
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	event("message_start", fmt.Sprintf(`{"type":"message_start","message":{"id":"msg_demo","type":"message","role":"assistant","model":%q,"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":%d,"output_tokens":1}}}`,
		model, AnthropicInputTokens))
	event("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
	for _, word := range strings.SplitAfter(text, " ") {
		event("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":%q}}`, word))
	}
	event("content_block_stop", `{"type":"content_block_stop","index":0}`)
	event("message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":%d}}`, AnthropicOutputTokens))
	event("message_stop", `{"type":"message_stop"}`)
}

// settle reports the usage so the next check sees the spend. A failure is logged: the
// enforcer settles unreported requests as incomplete later anyway.
func (u *Upstream) settle(requestID, model string, input, output int) {
	body, _ := json.Marshal(map[string]any{"requestId": requestID, "model": model,
		"inputTokens": input, "outputTokens": output, "complete": true})
	client := u.Client
	if client == nil {
		client = &http.Client{Timeout: 15 * time.Second}
	}
	res, err := client.Post(u.SettleURL, "application/json", bytes.NewReader(body))
	if err != nil {
		u.Log.Warn("demo upstream: settle failed", "request_id", requestID, "err", err)
		return
	}
	defer res.Body.Close()
	if res.StatusCode >= 300 {
		b, _ := io.ReadAll(io.LimitReader(res.Body, 1024))
		u.Log.Warn("demo upstream: settle refused", "request_id", requestID, "status", res.StatusCode, "body", string(b))
	}
}
