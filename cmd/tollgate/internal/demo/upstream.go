package demo

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"
)

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

// Upstream is a fake OpenAI-compatible chat completions API. After each answer it
// reports the usage to the enforcer's /settle under the request id the proxy added.
type Upstream struct {
	// SettleURL is the enforcer's POST /settle.
	SettleURL string
	Log       *slog.Logger
	Client    *http.Client
}

func (u *Upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		http.Error(w, `{"error":{"message":"the demo upstream serves POST /v1/chat/completions only"}}`, http.StatusNotFound)
		return
	}
	var in struct {
		Model  string `json:"model"`
		Stream bool   `json:"stream"`
	}
	_ = json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&in)
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
		u.settle(id, in.Model)
	}
}

// settle reports the usage so the next check sees the spend. A failure is logged: the
// enforcer settles unreported requests as incomplete later anyway.
func (u *Upstream) settle(requestID, model string) {
	body, _ := json.Marshal(map[string]any{"requestId": requestID, "model": model,
		"inputTokens": InputTokens, "outputTokens": OutputTokens, "complete": true})
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
