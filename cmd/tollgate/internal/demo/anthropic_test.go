package demo

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

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

// A path the demo upstream does not serve is a 404 in JSON, as a provider's is, so an
// SDK pointed at the demo reports the message rather than a parse error.
func TestUnservedPathIsJSON(t *testing.T) {
	up := httptest.NewServer(&Upstream{Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer up.Close()
	res, err := http.Get(up.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var e struct {
		Error struct{ Message string } `json:"error"`
	}
	err = json.NewDecoder(res.Body).Decode(&e)
	if res.StatusCode != http.StatusNotFound || res.Header.Get("Content-Type") != "application/json" || err != nil || !strings.Contains(e.Error.Message, "/v1/messages") {
		t.Errorf("%d %q: %+v, %v", res.StatusCode, res.Header.Get("Content-Type"), e, err)
	}
}

// The fake upstream waits as long as a request asks (X-Demo-Delay-Ms), at most MaxDelay;
// a request without the header, or with a value that is no positive number, is answered
// at once.
func TestUpstreamDelay(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  time.Duration
	}{
		{"", 0}, {"0", 0}, {"-5", 0}, {"soon", 0}, {"1.5", 0},
		{"250", 250 * time.Millisecond}, {" 40 ", 40 * time.Millisecond},
		{"5000", MaxDelay}, {"60000", MaxDelay}, {"9223372036854775807", MaxDelay},
	} {
		r := httptest.NewRequest("POST", "/v1/chat/completions", nil)
		if tc.value != "" {
			r.Header.Set(DelayHeader, tc.value)
		}
		if got := delayOf(r); got != tc.want {
			t.Errorf("%s: %q waits %v, want %v", DelayHeader, tc.value, got, tc.want)
		}
	}

	up := httptest.NewServer(&Upstream{Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer up.Close()
	for _, path := range []string{"/v1/chat/completions", "/v1/messages"} {
		req, _ := http.NewRequest("POST", up.URL+path, strings.NewReader(`{}`))
		req.Header.Set(DelayHeader, "200")
		start := time.Now()
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if took := time.Since(start); res.StatusCode != 200 || took < 200*time.Millisecond {
			t.Errorf("%s with %s: 200: %d after %v, want 200 after 200ms or more", path, DelayHeader, res.StatusCode, took)
		}
	}
}
