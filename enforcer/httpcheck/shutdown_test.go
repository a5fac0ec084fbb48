package httpcheck_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/tollgate-dev/tollgate/enforcer/httpcheck"
)

// TestCheckWhileShuttingDownIsAnSDKError: a forward-auth proxy (Caddy's forward_auth,
// Traefik's forwardAuth) hands /check's refusal to the client as it is, so the 503 a
// check meets while the enforcer shuts down reaches the member's SDK. It must be the
// error object the SDKs decode: openai-go decodes error as an object, and the string
// {"error":"shutting_down"} was a *json.UnmarshalTypeError in the program, with no
// status to read, not an *openai.Error 503.
func TestCheckWhileShuttingDownIsAnSDKError(t *testing.T) {
	h := httpcheck.New(nil, nil, httpcheck.Config{}, slog.New(slog.DiscardHandler))
	if err := h.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h) // the proxy's answer is /check's, whatever the path asked
	defer srv.Close()
	client := openai.NewClient(option.WithBaseURL(srv.URL+"/check/v1/"), option.WithAPIKey("tgk_test"), option.WithMaxRetries(0))
	_, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	var e *openai.Error
	if !errors.As(err, &e) {
		t.Fatalf("openai-go got %T %v, want an *openai.Error", err, err)
	}
	if e.StatusCode != 503 || e.Code != "shutting_down" || e.Message == "" || e.Type != "api_error" {
		t.Errorf("openai-go's error: status %d, code %q, type %q, message %q; want 503 shutting_down with a message", e.StatusCode, e.Code, e.Type, e.Message)
	}
}
