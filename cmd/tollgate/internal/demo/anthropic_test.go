package demo

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/responseusage"
)

// The demo upstream's Anthropic answers, JSON and streamed, carry the usage the
// enforcer's extractor reads: 2500 input and 1500 output tokens, complete, of the model
// asked for (claude-haiku-4-5 when none).
func TestAnthropicAnswersAreReadable(t *testing.T) {
	up := httptest.NewServer(&Upstream{Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer up.Close()
	for _, body := range []string{`{"max_tokens":64,"messages":[]}`, `{"model":"claude-sonnet-4-5","stream":true,"messages":[]}`} {
		res, err := http.Post(up.URL+"/v1/messages", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		ext := responseusage.New(res.Header.Get("Content-Type"), map[string]string{}, responseusage.Limits{})
		_ = ext.Write(b)
		u := ext.Finish(true)
		want := AnthropicModel
		if strings.Contains(body, "sonnet") {
			want = "claude-sonnet-4-5"
		}
		if res.StatusCode != 200 || !u.Complete || u.InputTokens != AnthropicInputTokens || u.OutputTokens != AnthropicOutputTokens || u.Model != want {
			t.Errorf("%s: %d, read %+v from %s", body, res.StatusCode, u, b)
		}
	}
}
