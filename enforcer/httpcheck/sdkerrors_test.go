package httpcheck_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/tollgate-dev/tollgate/enforcer/httpcheck"
	"github.com/tollgate-dev/tollgate/enforcer/internal/enforcertest"
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

// TestSuspendedCaptureIsNotRetriedBySDKs: a member whose capture an operator suspended
// is refused 503 until the operator resumes it, which no retry a second later meets.
// The official SDKs retry a 503 (twice by default, openai-go here) unless it says
// X-Should-Retry: false: each attempt was refused again, the member's call took the
// backoff longer to fail, for nothing.
func TestSuspendedCaptureIsNotRetriedBySDKs(t *testing.T) {
	e := enforcertest.New(t, enforcertest.Options{})
	m := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
	e.CP.SetCapture(m.ID, false)
	var attempts atomic.Int32
	client := openai.NewClient(option.WithBaseURL(e.HTTPURL+"/check/v1/"), option.WithAPIKey(m.Key),
		option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
			attempts.Add(1)
			return next(r)
		}))
	_, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	var oe *openai.Error
	if !errors.As(err, &oe) || oe.StatusCode != 503 || oe.Response.Header.Get("X-Service-Error-Code") != "service_gateway_accounting_unavailable" {
		t.Fatalf("openai-go got %T %v, want the 503 of a suspended capture", err, err)
	}
	if n := attempts.Load(); n != 1 {
		t.Errorf("the SDK sent the call %d times, want once (X-Should-Retry %q)", n, oe.Response.Header.Get("X-Should-Retry"))
	}
}
