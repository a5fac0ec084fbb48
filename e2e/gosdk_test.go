package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

	"github.com/tollgate-dev/tollgate/e2e/fakellm"
	"github.com/tollgate-dev/tollgate/enforcer/estimate"
)

// hangHeader asks hangingUpstream to stream part of an answer and then hold the
// stream open until the request is cancelled (a client that gives up mid-stream).
const hangHeader = "X-E2e-Hang"

// hangWords are the pieces of text a held stream sends before it waits.
var hangWords = []string{"Tolls ", "are ", "paid ", "in ", "tokens, ", "one ", "by ", "one."}

// hangInputTokens is the input an Anthropic held stream reports in its message_start.
const hangInputTokens = 3_000

// hangingUpstream is fakellm, except for a request carrying hangHeader: its OpenAI chat
// completion or Anthropic message stream sends hangWords and then waits for the request
// to be cancelled, whose X-Service-Request-Id it sends on cancelled. And a chat
// completions stream ends its body only when its request is cancelled (or after
// chatLinger), after "data: [DONE]": as the end of a provider's body may come a moment
// after its last event (its chunked terminator, HTTP/2's END_STREAM), which makes it
// certain that openai-go, which closes the response as soon as it reads [DONE], leaves
// before the end.
type hangingUpstream struct {
	fake      *fakellm.Server
	cancelled chan string
}

// chatLinger bounds the wait of a chat completions stream's end (hangingUpstream).
const chatLinger = 3 * time.Second

func (u *hangingUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get(hangHeader) == "" {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		u.fake.ServeHTTP(w, r)
		var req struct{ Stream bool }
		if r.URL.Path == "/v1/chat/completions" && json.Unmarshal(body, &req) == nil && req.Stream {
			select {
			case <-r.Context().Done():
			case <-time.After(chatLinger):
			}
		}
		return
	}
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	write := func(s string) {
		_, _ = io.WriteString(w, s)
		w.(http.Flusher).Flush()
	}
	if r.URL.Path == "/v1/messages" {
		event := func(name, data string) { write("event: " + name + "\ndata: " + data + "\n\n") }
		event("message_start", fmt.Sprintf(`{"type":"message_start","message":{"id":"msg_hang","type":"message","role":"assistant","model":%q,"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":%d,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}}`,
			claudeModel, hangInputTokens))
		event("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
		for _, w := range hangWords {
			event("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":%q}}`, w))
		}
	} else {
		chunk := func(delta string) {
			write(fmt.Sprintf(`data: {"id":"chatcmpl-hang","object":"chat.completion.chunk","created":1767225600,"model":"gpt-4o-mini-2024-07-18","choices":[{"index":0,"delta":%s,"logprobs":null,"finish_reason":null}]}`+"\n\n", delta))
		}
		chunk(`{"role":"assistant","content":""}`)
		for _, w := range hangWords {
			chunk(fmt.Sprintf(`{"content":%q}`, w))
		}
	}
	<-r.Context().Done()
	u.cancelled <- r.Header.Get("X-Service-Request-Id")
}

// TestGoSDKs drives the official Go SDKs (github.com/openai/openai-go/v3 and
// github.com/anthropics/anthropic-sdk-go/v2), each with its default options (retries,
// backoff, HTTP client), through the enforcer's gateway and through the Envoy emulator
// playing deploy/envoy/envoy.yaml in front of the same enforcer, and through the gateway
// once more over HTTP/2 (h2c, the SDKs given an h2c client, every answer checked to be
// HTTP/2). On each front door, for a member of its own organization:
//   - chat completions (with tools too) and the Responses API (OpenAI), messages (the
//     beta API too) and token counting (Anthropic), plain and streamed, are admitted
//     and charged exactly what the fake provider reported, at the organization's
//     price, complete: openai-go closes a chat stream as soon as it reads [DONE], before
//     the body's end (hangingUpstream holds it back), which must not make it incomplete;
//   - a stream the client cancels mid-way is charged incomplete, for what it carried;
//   - a bad key is the 401 and a batch the 403, each the SDK's error type, sent once;
//   - once the limit is spent, every call is the usage-limit 429, whose
//     X-Service-Error-Code and X-Service-Usage-State the SDK's error type gives, sent once
//     (the SDK does not retry) and failing fast;
//   - the provider never sees the member's key.
func TestGoSDKs(t *testing.T) {
	t.Parallel()
	awayFromDayBoundary(t, 3*time.Minute)
	var next fakellm.Usage
	fake, up, upURL := goSDKUpstream(t, &next)
	env := gatewayEnv(upURL)
	env["TOLLGATE_UPSTREAM_AUTHORIZATION"] = providerAuthorization // Envoy's route (envoy.yaml)
	s := startStack(t, env)
	proxy, envoyURL := s.deployedEnvoy(t, upURL)

	g := &goSDKRun{s: s, fake: fake, up: up, next: &next}
	gatewayRequests := func(t *testing.T) float64 { return s.metric(t, "tollgate_enforcer_gateway_requests_total") }
	h2c := newH2CClient()
	for _, front := range []struct {
		name, url string
		// requests counts the requests the front door received: the enforcer's
		// gateway counts each it answered, the emulated Envoy each that came.
		requests func(t *testing.T) float64
		// via is the SDKs' HTTP client: nil for their default (HTTP/1.1 to an http://
		// base URL, as a developer's program sends).
		via *protoCountingClient
	}{
		{"gateway", s.gateway, gatewayRequests, nil},
		// The same calls over HTTP/2 (h2c, prior knowledge), as a mesh sidecar or a proxy
		// speaking h2c to the gateway sends them: streams are HTTP/2 streams, a client
		// that leaves resets its stream rather than closing a connection. (The SDKs
		// speak HTTP/2 by themselves only over TLS: TestGatewayServesTLS runs them so.)
		{"gateway over h2c", s.gateway, gatewayRequests, h2c},
		{"envoy", envoyURL, func(*testing.T) float64 { return float64(proxy.Requests()) }, nil},
	} {
		t.Run(front.name, func(t *testing.T) {
			g.run(t, front.url, front.requests, front.via)
			if front.via != nil {
				if n, other := front.via.counts(); n == 0 || other != 0 {
					t.Errorf("%d answers over HTTP/2 and %d over another protocol, want every one over HTTP/2", n, other)
				}
			}
		})
	}
}

// goSDKUpstream is TestGoSDKs' fake provider (the usage it reports is *next), behind
// hangingUpstream, served on loopback until the test ends; it returns the server's URL.
func goSDKUpstream(t *testing.T, next *fakellm.Usage) (*fakellm.Server, *hangingUpstream, string) {
	t.Helper()
	fake := &fakellm.Server{Snapshots: map[string]string{model: model + "-2024-07-18"}, Usage: func(fakellm.Call) fakellm.Usage { return *next }}
	up := &hangingUpstream{fake: fake, cancelled: make(chan string, 1)}
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)
	return fake, up, srv.URL
}

// protoCountingClient is an HTTP client for the SDKs that speaks only h2c (HTTP/2 with
// prior knowledge, no TLS) and counts the answers by protocol, so a test can tell that
// every call went over HTTP/2.
type protoCountingClient struct {
	http      *http.Client
	mu        sync.Mutex
	h2, other int
}

func newH2CClient() *protoCountingClient {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	return &protoCountingClient{http: &http.Client{Transport: tr}}
}

// Do is the SDKs' HTTPClient.
func (c *protoCountingClient) Do(req *http.Request) (*http.Response, error) {
	res, err := c.http.Do(req)
	if err == nil {
		c.mu.Lock()
		if res.ProtoMajor == 2 {
			c.h2++
		} else {
			c.other++
		}
		c.mu.Unlock()
	}
	return res, err
}

func (c *protoCountingClient) counts() (h2, other int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.h2, c.other
}

// goSDKRun is TestGoSDKs' state, shared by its front doors (one at a time).
type goSDKRun struct {
	s    *stack
	fake *fakellm.Server
	up   *hangingUpstream
	next *fakellm.Usage
	// settled counts the settlements the enforcer made, over both front doors.
	settled int
}

// goCall is one call of a Go SDK: it returns the text the SDK read and its error.
type goCall struct {
	name, api string
	stream    bool
	usage     fakellm.Usage
	cost      int64
	do        func(ctx context.Context, c goClients) (string, error)
}

// goClients are the two SDKs' clients of one member at one front door.
type goClients struct {
	openai    openai.Client
	anthropic anthropic.Client
}

// newGoClients builds both clients with their default options: only the base URL and
// the member's key are set, as a developer's program does, and the HTTP client when via
// is not nil.
func newGoClients(base, key string, via *protoCountingClient) goClients {
	oa := []option.RequestOption{option.WithBaseURL(base + "/v1/"), option.WithAPIKey(key)}
	an := []anthropicoption.RequestOption{anthropicoption.WithBaseURL(base), anthropicoption.WithAPIKey(key)}
	if via != nil {
		oa = append(oa, option.WithHTTPClient(via))
		an = append(an, anthropicoption.WithHTTPClient(via))
	}
	return goClients{openai: openai.NewClient(oa...), anthropic: anthropic.NewClient(an...)}
}

func openAIChat(ctx context.Context, c goClients) (string, error) {
	res, err := c.openai.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: model,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What are tolls paid in?")}})
	if err != nil {
		return "", err
	}
	return res.Choices[0].Message.Content, nil
}

// openAIChatTools offers the model a function: the request carries tools and tool_choice.
func openAIChatTools(ctx context.Context, c goClients) (string, error) {
	res, err := c.openai.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: model,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What is the toll on the A7?")},
		Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "toll_of",
			Description: openai.String("The toll of a road"), Parameters: shared.FunctionParameters{"type": "object",
				"properties": map[string]any{"road": map[string]string{"type": "string"}}, "required": []string{"road"}}})},
		ToolChoice: openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("auto")}})
	if err != nil {
		return "", err
	}
	return res.Choices[0].Message.Content, nil
}

func openAIChatStream(ctx context.Context, c goClients) (string, error) {
	stream := c.openai.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: model,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What are tolls paid in?")}})
	defer stream.Close()
	var text strings.Builder
	for stream.Next() {
		if ch := stream.Current().Choices; len(ch) > 0 {
			text.WriteString(ch[0].Delta.Content)
		}
	}
	return text.String(), stream.Err()
}

func openAIResponse(ctx context.Context, c goClients) (string, error) {
	res, err := c.openai.Responses.New(ctx, responses.ResponseNewParams{Model: model,
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("What are tolls paid in?")}})
	if err != nil {
		return "", err
	}
	return res.OutputText(), nil
}

func openAIResponseStream(ctx context.Context, c goClients) (string, error) {
	stream := c.openai.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: model,
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("What are tolls paid in?")}})
	defer stream.Close()
	var text strings.Builder
	for stream.Next() {
		if ev := stream.Current(); ev.Type == "response.output_text.delta" {
			text.WriteString(ev.Delta)
		}
	}
	return text.String(), stream.Err()
}

func anthropicParams() anthropic.MessageNewParams {
	return anthropic.MessageNewParams{Model: claudeModel, MaxTokens: 1024,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("What are tolls paid in?"))}}
}

func anthropicMessage(ctx context.Context, c goClients) (string, error) {
	res, err := c.anthropic.Messages.New(ctx, anthropicParams())
	if err != nil {
		return "", err
	}
	var text strings.Builder
	for _, b := range res.Content {
		text.WriteString(b.Text)
	}
	return text.String(), nil
}

// anthropicBetaMessage is the beta Messages API: an anthropic-beta header.
func anthropicBetaMessage(ctx context.Context, c goClients) (string, error) {
	res, err := c.anthropic.Beta.Messages.New(ctx, anthropic.BetaMessageNewParams{Model: claudeModel, MaxTokens: 1024,
		Messages: []anthropic.BetaMessageParam{anthropic.NewBetaUserMessage(anthropic.NewBetaTextBlock("What are tolls paid in?"))},
		Betas:    []anthropic.AnthropicBeta{anthropic.AnthropicBetaInterleavedThinking2025_05_14}})
	if err != nil {
		return "", err
	}
	var text strings.Builder
	for _, b := range res.Content {
		text.WriteString(b.Text)
	}
	return text.String(), nil
}

func anthropicMessageStream(ctx context.Context, c goClients) (string, error) {
	stream := c.anthropic.Messages.NewStreaming(ctx, anthropicParams())
	defer stream.Close()
	var text strings.Builder
	for stream.Next() {
		if ev := stream.Current(); ev.Type == "content_block_delta" {
			text.WriteString(ev.Delta.Text)
		}
	}
	return text.String(), stream.Err()
}

// goSDKCalls are the admitted calls, each reported a usage of its own, at the
// organization's prices (putSDKPrices): 26,002 + 4,200 + 30,000 + 12,003 + 11,600 +
// 15,010 + 10,000 + 31,000 micro-USD, far below the 1 USD limit.
func goSDKCalls() []goCall {
	oa, an := sdkPrices[model], sdkPrices[claudeModel]
	return []goCall{
		{"openai chat", fakellm.OpenAIChat, false, fakellm.Usage{InputTokens: 100_003, CachedInputTokens: 20_000, OutputTokens: 10_001},
			priceOf(oa, 80_003, 20_000, 10_001), openAIChat},
		{"openai chat with tools", fakellm.OpenAIChat, false, fakellm.Usage{InputTokens: 9_000, OutputTokens: 3_000},
			priceOf(oa, 9_000, 0, 3_000), openAIChatTools},
		{"openai chat stream", fakellm.OpenAIChat, true, fakellm.Usage{InputTokens: 50_000, OutputTokens: 25_000},
			priceOf(oa, 50_000, 0, 25_000), openAIChatStream},
		{"openai responses", fakellm.OpenAIResponses, false, fakellm.Usage{InputTokens: 40_001, CachedInputTokens: 10_000, OutputTokens: 5_003},
			priceOf(oa, 30_001, 10_000, 5_003), openAIResponse},
		{"openai responses stream", fakellm.OpenAIResponses, true, fakellm.Usage{InputTokens: 30_000, OutputTokens: 7_000},
			priceOf(oa, 30_000, 0, 7_000), openAIResponseStream},
		// Anthropic's input_tokens leaves out the cache reads.
		{"anthropic messages", fakellm.AnthropicMessages, false, fakellm.Usage{InputTokens: 2_000, CachedInputTokens: 5_000, OutputTokens: 1_001},
			priceOf(an, 2_000, 5_000, 1_001), anthropicMessage},
		{"anthropic beta messages", fakellm.AnthropicMessages, false, fakellm.Usage{InputTokens: 1_500, OutputTokens: 700},
			priceOf(an, 1_500, 0, 700), anthropicBetaMessage},
		{"anthropic messages stream", fakellm.AnthropicMessages, true, fakellm.Usage{InputTokens: 3_000, OutputTokens: 2_500},
			priceOf(an, 3_000, 0, 2_500), anthropicMessageStream},
	}
}

func (g *goSDKRun) run(t *testing.T, base string, requests func(*testing.T) float64, via *protoCountingClient) {
	s, fake := g.s, g.fake
	o := s.setUpOrg(t)
	s.putSDKPrices(t, o)
	clients := newGoClients(base, o.key, via)
	ctx := context.Background()
	firstCall := len(fake.Calls())
	var used int64
	// sentOnce checks that one SDK call sent the front door one request: its own
	// retries would be more. Once the SDK returned, every attempt it made was answered.
	sentOnce := func(t *testing.T, before float64) {
		t.Helper()
		waitFor(t, 5*time.Second, "the front door to count the request", func() bool { return requests(t) > before })
		if n := requests(t) - before; n != 1 {
			t.Errorf("the front door received %v requests for one call, want 1 (no retry)", n)
		}
	}

	t.Run("calls are charged what the provider reported", func(t *testing.T) {
		for _, c := range goSDKCalls() {
			t.Run(c.name, func(t *testing.T) {
				*g.next = c.usage
				before := len(fake.Calls())
				text, err := c.do(ctx, clients)
				if err != nil || text != fakellm.Text {
					t.Fatalf("the call: %q, %v", text, err)
				}
				got := fake.Calls()[before:]
				if len(got) != 1 || got[0].API != c.api || got[0].Stream != c.stream {
					t.Fatalf("the provider got %+v, want one %s call (stream %v)", got, c.api, c.stream)
				}
				if c.api == fakellm.OpenAIChat && c.stream && !got[0].IncludeUsage {
					t.Errorf("the stream reached the provider without stream_options.include_usage: %s", got[0].Body)
				}
				if b := got[0].Header.Get("Anthropic-Beta"); c.name == "anthropic beta messages" && b != anthropic.AnthropicBetaInterleavedThinking2025_05_14 {
					t.Errorf("the beta call reached the provider with anthropic-beta %q", b)
				}
				if c.name == "openai chat with tools" && !strings.Contains(string(got[0].Body), `"tools":[{`) {
					t.Errorf("the tools did not reach the provider: %s", got[0].Body)
				}
				rec := waitReceipt(t, s, got[0].Header.Get("X-Service-Request-Id"))
				g.settled++
				used += rec.cost() // what comes next counts what was charged
				if rec.cost() != c.cost || rec["complete"] != true || rec["cost_basis"] != "reported_usage" || rec["price_source"] != "organization" {
					t.Errorf("receipt %s, want %d micro-USD, complete, from the reported usage at the organization's price", rec, c.cost)
				}
			})
		}
		s.waitUsed(t, o, g.settled, used)
	})

	t.Run("anthropic count_tokens is not charged", func(t *testing.T) {
		*g.next = fakellm.Usage{InputTokens: 2095}
		before := len(fake.Calls())
		res, err := clients.anthropic.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: claudeModel,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("What are tolls paid in?"))}})
		if err != nil || res.InputTokens != 2095 {
			t.Fatalf("the count: %+v, %v", res, err)
		}
		got := fake.Calls()[before:]
		if len(got) != 1 || got[0].API != fakellm.AnthropicCountTokens {
			t.Fatalf("the provider got %+v, want one count_tokens call", got)
		}
		rec := waitReceipt(t, s, got[0].Header.Get("X-Service-Request-Id"))
		g.settled++
		if rec.cost() != 0 || rec["complete"] != true {
			t.Errorf("receipt %s, want complete at no cost", rec)
		}
	})

	// The client reads the first three pieces of a stream, then cancels its context: the
	// front door cancels the provider's request and charges what the stream carried.
	for _, tc := range []struct {
		name string
		open func(ctx context.Context) (next func() bool, err func() error, text func() string)
	}{
		{"openai", func(ctx context.Context) (func() bool, func() error, func() string) {
			st := clients.openai.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: model,
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("What are tolls paid in?")}}, option.WithHeader(hangHeader, "1"))
			return st.Next, st.Err, func() string {
				if ch := st.Current().Choices; len(ch) > 0 {
					return ch[0].Delta.Content
				}
				return ""
			}
		}},
		{"anthropic", func(ctx context.Context) (func() bool, func() error, func() string) {
			st := clients.anthropic.Messages.NewStreaming(ctx, anthropicParams(), anthropicoption.WithHeader(hangHeader, "1"))
			return st.Next, st.Err, func() string { return st.Current().Delta.Text }
		}},
	} {
		t.Run("a "+tc.name+" stream cancelled mid-way is charged incomplete", func(t *testing.T) {
			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			next, errOf, text := tc.open(cctx)
			var seen strings.Builder
			for range 3 {
				for next() {
					if x := text(); x != "" {
						seen.WriteString(x)
						break
					}
				}
			}
			if err := errOf(); err != nil || seen.String() != strings.Join(hangWords[:3], "") {
				t.Fatalf("read %q (%v) before cancelling, want %q", seen.String(), err, strings.Join(hangWords[:3], ""))
			}
			cancel()
			for next() {
			}
			if err := errOf(); !errors.Is(err, context.Canceled) {
				t.Errorf("the SDK's stream ended with %v, want context.Canceled", err)
			}
			var reqID string
			select {
			case reqID = <-g.up.cancelled:
			case <-time.After(15 * time.Second):
				t.Fatal("the provider's request was not cancelled")
			}
			rec := waitReceipt(t, s, reqID)
			g.settled++
			used += rec.cost()
			// The provider sent every piece before it waited: what the front door read of
			// them (the client's three at least) is what it charges as output, estimated.
			least, most := estimate.Tokens(int64(len(seen.String()))), estimate.Tokens(int64(len(strings.Join(hangWords, ""))))
			out, _ := rec["output_tokens"].(float64)
			if rec["complete"] != false || rec["cost_basis"] != "estimate" || rec.cost() <= 0 || out < float64(least) || out > float64(most) {
				t.Errorf("receipt %s, want incomplete, estimated, %d to %d output tokens, at a cost", rec, least, most)
			}
			if tc.name == "anthropic" && rec["input_tokens"] != float64(hangInputTokens) {
				t.Errorf("receipt %s, want the %d input tokens message_start reported", rec, hangInputTokens)
			}
			t.Logf("receipt %s", rec)
		})
	}
	s.waitUsed(t, o, g.settled, used)

	t.Run("a bad key is the 401, not retried", func(t *testing.T) {
		bad := newGoClients(base, "tgk_"+strings.Repeat("x", 43), via)
		for _, c := range []struct {
			name string
			do   func(context.Context, goClients) (string, error)
		}{{"openai", openAIChat}, {"anthropic", anthropicMessage}} {
			t.Run(c.name, func(t *testing.T) {
				before := requests(t)
				_, err := c.do(ctx, bad)
				status, _ := sdkError(t, err)
				if status != http.StatusUnauthorized {
					t.Errorf("status %d, want 401", status)
				}
				sentOnce(t, before)
			})
		}
	})

	// A batch is billed later, out of the enforcer's sight: refused 403, which the SDKs
	// do not retry, before it reaches the provider.
	t.Run("a batch is refused 403, not retried", func(t *testing.T) {
		upstreamCalls := len(fake.Calls())
		for _, c := range []struct {
			name string
			do   func() error
		}{
			{"openai", func() error {
				_, err := clients.openai.Batches.New(ctx, openai.BatchNewParams{InputFileID: "file-abc123",
					Endpoint: openai.BatchNewParamsEndpointV1ChatCompletions, CompletionWindow: openai.BatchNewParamsCompletionWindow24h})
				return err
			}},
			{"anthropic", func() error {
				_, err := clients.anthropic.Messages.Batches.New(ctx, anthropic.MessageBatchNewParams{Requests: []anthropic.MessageBatchNewParamsRequest{{
					CustomID: "toll-1", Params: anthropic.MessageBatchNewParamsRequestParams{Model: claudeModel, MaxTokens: 1024,
						Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("What are tolls paid in?"))}}}}})
				return err
			}},
		} {
			t.Run(c.name, func(t *testing.T) {
				before := requests(t)
				status, h := sdkError(t, c.do())
				if status != http.StatusForbidden || h.Get("X-Service-Error-Code") != "service_gateway_billing_deferred" {
					t.Errorf("got %d %v, want the 403 service_gateway_billing_deferred", status, h)
				}
				sentOnce(t, before)
			})
		}
		if n := len(fake.Calls()); n != upstreamCalls {
			t.Errorf("a refused batch reached the provider: %d calls, were %d", n, upstreamCalls)
		}
	})

	// A call reporting 5,000,000 input tokens (1 USD at 0.2 USD per million) spends the limit.
	*g.next = fakellm.Usage{InputTokens: 5_000_000}
	if _, err := openAIChat(ctx, clients); err != nil {
		t.Fatalf("the spending call: %v", err)
	}
	g.settled++
	waitFor(t, 15*time.Second, "blocked", func() bool { return s.status(t, o).State == "blocked" })
	waitFor(t, 10*time.Second, "the enforcer to receive every receipt", func() bool {
		return s.metric(t, "tollgate_enforcer_settlements_total") >= float64(g.settled)
	})
	s.waitMirrored(t, o)

	t.Run("over the limit: the 429, readable, not retried, fast", func(t *testing.T) {
		upstreamCalls := len(fake.Calls())
		for _, c := range goSDKCalls() {
			t.Run(c.name, func(t *testing.T) {
				before := requests(t)
				start := time.Now()
				_, err := c.do(ctx, clients)
				took := time.Since(start)
				status, h := sdkError(t, err)
				t.Logf("%s: %d %s=%q %s=%q Retry-After %q X-Should-Retry %q in %s", c.name, status, "X-Service-Error-Code", h.Get("X-Service-Error-Code"),
					"X-Service-Usage-State", h.Get("X-Service-Usage-State"), h.Get("Retry-After"), h.Get("X-Should-Retry"), took.Round(time.Millisecond))
				if status != http.StatusTooManyRequests || h.Get("X-Service-Error-Code") != "service_gateway_usage_limit_exceeded" ||
					h.Get("X-Service-Usage-State") != "blocked" {
					t.Errorf("want the usage-limit 429 with its headers; got %d %v", status, h)
				}
				sentOnce(t, before)
				if took >= 2*time.Second {
					t.Errorf("the refused call took %s, want under 2 seconds", took)
				}
			})
		}
		if n := len(fake.Calls()); n != upstreamCalls {
			t.Errorf("refused calls reached the provider: %d calls, were %d", n, upstreamCalls)
		}
	})

	t.Run("the provider never sees the member's key", func(t *testing.T) {
		got := fake.Calls()[firstCall:]
		if len(got) == 0 {
			t.Fatal("the provider got no call")
		}
		checkOnlyTheProviderCredential(t, got, o.key)
	})
}

// sdkError is the status and the response headers an SDK's error type gives: either
// SDK's *Error (the same type under both packages' names).
func sdkError(t *testing.T, err error) (int, http.Header) {
	t.Helper()
	var oe *openai.Error
	var ae *anthropic.Error
	switch {
	case errors.As(err, &oe):
		return oe.StatusCode, oe.Response.Header
	case errors.As(err, &ae):
		return ae.StatusCode, ae.Response.Header
	}
	t.Errorf("the SDK's error is %T %v, not its API error type", err, err)
	return 0, http.Header{}
}

// dialCountingClient is an HTTP client for the SDKs that counts the connections it
// dials: over HTTP/1.1 (the SDKs' default for an http:// base URL) or h2c.
type dialCountingClient struct {
	*http.Client
	dials atomic.Int64
}

func newDialCountingClient(h2c bool) *dialCountingClient {
	c := &dialCountingClient{}
	d := &net.Dialer{Timeout: 5 * time.Second}
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c.dials.Add(1)
		return d.DialContext(ctx, network, addr)
	}}
	if h2c {
		tr.Protocols = new(http.Protocols)
		tr.Protocols.SetUnencryptedHTTP2(true)
	}
	c.Client = &http.Client{Transport: tr}
	return c
}

// TestGoSDKsAcrossEndedConnections: the gateway ends each client connection at an age
// (TOLLGATE_GATEWAY_MAX_CONNECTION_AGE, here 1s) by its next response (Connection:
// close over HTTP/1.1, a GOAWAY over HTTP/2), so that clients keeping their connections
// spread over the enforcers behind a Service. The official Go SDKs, calling the gateway
// for 4 s over HTTP/1.1 and over h2c, cross several ended connections (one connection
// for every call at an age of 0, either way): every call is
// answered at the first attempt (the front door counts one request a call) and charged
// exactly what the provider reported.
func TestGoSDKsAcrossEndedConnections(t *testing.T) {
	t.Parallel()
	awayFromDayBoundary(t, 3*time.Minute)
	var next fakellm.Usage
	fake, _, upURL := goSDKUpstream(t, &next)
	env := gatewayEnv(upURL)
	env["TOLLGATE_GATEWAY_MAX_CONNECTION_AGE"] = "1s"
	s := startStack(t, env)
	for _, h2c := range []bool{false, true} {
		t.Run(map[bool]string{false: "HTTP/1.1", true: "h2c"}[h2c], func(t *testing.T) {
			// Over HTTP/1.1 the streamed calls are left out: a stream's connection is not
			// always used again whatever its age (the SDK may stop reading before the
			// body's end), which would hide connections kept for ever. Over HTTP/2 a
			// stream is a stream, and those in flight at a GOAWAY must finish.
			calls := slices.DeleteFunc(goSDKCalls(), func(c goCall) bool { return c.stream && !h2c })
			o := s.setUpOrg(t)
			s.putSDKPrices(t, o)
			via := newDialCountingClient(h2c)
			oa := openai.NewClient(option.WithBaseURL(s.gateway+"/v1/"), option.WithAPIKey(o.key), option.WithHTTPClient(via))
			an := anthropic.NewClient(anthropicoption.WithBaseURL(s.gateway), anthropicoption.WithAPIKey(o.key), anthropicoption.WithHTTPClient(via))
			clients := goClients{openai: oa, anthropic: an}
			before := s.metric(t, "tollgate_enforcer_gateway_requests_total")
			var made int
			var used int64
			for end := time.Now().Add(4 * time.Second); time.Now().Before(end); made++ {
				c := calls[made%len(calls)]
				next = c.usage
				n := len(fake.Calls())
				if text, err := c.do(context.Background(), clients); err != nil || text != fakellm.Text {
					t.Fatalf("call %d (%s) after %d connections: %q, %v", made+1, c.name, via.dials.Load(), text, err)
				}
				rec := waitReceipt(t, s, fake.Calls()[n].Header.Get("X-Service-Request-Id"))
				if rec.cost() != c.cost || rec["complete"] != true {
					t.Fatalf("call %d (%s): receipt %s, want %d micro-USD, complete", made+1, c.name, rec, c.cost)
				}
				used += rec.cost()
			}
			s.waitUsed(t, o, made, used)
			if got := s.metric(t, "tollgate_enforcer_gateway_requests_total") - before; got != float64(made) {
				t.Errorf("the gateway answered %v requests for %d calls: an SDK retried", got, made)
			}
			if n := via.dials.Load(); n < 3 {
				t.Errorf("%d calls over %d connections in 4 s at a connection age of 1 s", made, n)
			}
			t.Logf("%d calls over %d connections", made, via.dials.Load())
		})
	}
}
