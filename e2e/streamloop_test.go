package e2e_test

import (
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	goopenai "github.com/sashabaranov/go-openai"

	"github.com/tollgate-dev/tollgate/e2e/fakellm"
)

// TestStreamLoopsThatIndexChoicesThroughTheGateway: go-openai (github.com/sashabaranov/
// go-openai, the Go client most programs were written with before OpenAI's own) streams
// a chat completion through the gateway, read the way its README reads one: choices[0]
// of every chunk, unchecked. The gateway asks the stream for its usage; the usage event
// that brings (empty choices) is read and charged, not sent to a client that did not ask
// for it (package usagechunk): before, this loop panicked on it, where against the
// provider it runs. A client that asked for the usage gets it, as from the provider.
// Either way the stream is charged exactly what the provider reported.
func TestStreamLoopsThatIndexChoicesThroughTheGateway(t *testing.T) {
	t.Parallel()
	awayFromDayBoundary(t, 3*time.Minute)
	reported := fakellm.Usage{InputTokens: 1_200, OutputTokens: 300}
	fake := &fakellm.Server{Usage: func(fakellm.Call) fakellm.Usage { return reported }}
	up := httptest.NewServer(fake)
	t.Cleanup(up.Close)
	s := startStack(t, gatewayEnv(up.URL))
	o := s.setUpOrg(t)
	cfg := goopenai.DefaultConfig(o.key)
	cfg.BaseURL = s.gateway + "/v1"
	client := goopenai.NewClientWithConfig(cfg)

	for _, asked := range []bool{false, true} {
		name := map[bool]string{false: "usage not asked for: the README's loop", true: "usage asked for: the client gets it"}[asked]
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			req := goopenai.ChatCompletionRequest{
				Model:    model,
				Messages: []goopenai.ChatCompletionMessage{{Role: goopenai.ChatMessageRoleUser, Content: "Say something."}},
				Stream:   true,
			}
			if asked {
				req.StreamOptions = &goopenai.StreamOptions{IncludeUsage: true}
			}
			before := len(fake.Calls())
			stream, err := client.CreateChatCompletionStream(ctx, req)
			if err != nil {
				t.Fatalf("the stream: %v", err)
			}
			defer stream.Close()
			var text strings.Builder
			var usage *goopenai.Usage
			chunks := 0
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("the loop panicked after %d chunks: %v", chunks, r)
					}
				}()
				for {
					resp, err := stream.Recv()
					if errors.Is(err, io.EOF) {
						return
					}
					if err != nil {
						t.Fatalf("the stream failed: %v", err)
					}
					chunks++
					if asked && resp.Usage != nil {
						usage = resp.Usage // a program that asked looks for it
						continue
					}
					text.WriteString(resp.Choices[0].Delta.Content) // as go-openai's README does
				}
			}()
			if text.String() != fakellm.Text {
				t.Fatalf("the client read %q, want %q", text.String(), fakellm.Text)
			}
			if asked && (usage == nil || usage.PromptTokens != int(reported.InputTokens) || usage.CompletionTokens != int(reported.OutputTokens)) {
				t.Fatalf("asked for the usage, the client got %+v", usage)
			}
			calls := fake.Calls()[before:]
			if len(calls) != 1 || !calls[0].Stream || !calls[0].IncludeUsage {
				t.Fatalf("the provider got %+v, want one stream asked for its usage", calls)
			}
			rec := waitReceipt(t, s, calls[0].Header.Get("X-Service-Request-Id"))
			want := catalogCost(reported.InputTokens, 0, reported.OutputTokens)
			if rec.cost() != want || rec["complete"] != true || rec["cost_basis"] != "reported_usage" {
				t.Fatalf("receipt %s, want %d micro-USD, complete, from the reported usage", rec, want)
			}
		})
	}
}

// TestGoOpenAIAzureDefaultsThroughTheGateway: go-openai's Azure client with its defaults
// (goopenai.DefaultAzureConfig, whose api-version is 2023-05-15) streams through a
// gateway route to Azure OpenAI. Azure answers stream_options 400 on that version, so
// the gateway does not ask for it: the stream runs as against Azure and is charged an
// estimate from its prompt and text. Before 2026-12-06 every such stream failed.
func TestGoOpenAIAzureDefaultsThroughTheGateway(t *testing.T) {
	t.Parallel()
	awayFromDayBoundary(t, 3*time.Minute)
	fake, s, o := routedGateway(t, fakellm.Usage{InputTokens: 1_200, OutputTokens: 300}, "api-key", "azure-provider-key")
	cfg := goopenai.DefaultAzureConfig(o.key, s.gateway)
	if cfg.APIVersion >= "2024-08-01" {
		t.Fatalf("go-openai's Azure default is now %s, which takes stream_options: this test no longer shows what it is for", cfg.APIVersion)
	}
	client := goopenai.NewClientWithConfig(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := client.CreateChatCompletionStream(ctx, goopenai.ChatCompletionRequest{
		Model:    model,
		Messages: []goopenai.ChatCompletionMessage{{Role: goopenai.ChatMessageRoleUser, Content: "Say something."}},
		Stream:   true,
	})
	if err != nil {
		t.Fatalf("the stream: %v", err)
	}
	defer stream.Close()
	var text strings.Builder
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the stream failed: %v", err)
		}
		if len(resp.Choices) > 0 { // Azure's own first event has none (its prompt's filter results)
			text.WriteString(resp.Choices[0].Delta.Content)
		}
	}
	if text.String() != fakellm.Text {
		t.Fatalf("the client read %q, want %q", text.String(), fakellm.Text)
	}
	calls := fake.Calls()
	if len(calls) != 1 || calls[0].Query != "api-version="+cfg.APIVersion || !calls[0].Stream || strings.Contains(string(calls[0].Body), "stream_options") {
		t.Fatalf("the provider got %+v, want one stream at %s as the client wrote it", calls, cfg.APIVersion)
	}
	rec := waitReceipt(t, s, calls[0].Header.Get("X-Service-Request-Id"))
	if rec["cost_basis"] != "estimate" || rec.cost() <= 0 {
		t.Fatalf("receipt %s, want an estimate from the prompt and the text", rec)
	}
}
