package gateway_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/gateway"
)

// Amazon Bedrock runs the model its path names (/model/{modelId}/converse); a "model"
// key in the body is not Converse's and selects nothing. The check and the settlement
// price the path's model, not a cheaper one a member writes into the body: a Converse
// answer names no model, so the request's model is what the settlement prices.
func TestBedrockPathModelWinsOverBodyModel(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"output":{"message":{"role":"assistant","content":[{"text":"hi"}]}},"stopReason":"end_turn","usage":{"inputTokens":1000,"outputTokens":2000,"totalTokens":3000}}`)
	}))
	defer up.Close()
	e := newEnv(t, up.URL, gateway.Config{})
	const pathModel = "anthropic.claude-opus-4-1-20250805-v1:0"
	res := post(t, e.front.URL+"/model/"+pathModel+"/converse", "tgk_good",
		`{"model":"amazon.nova-micro-v1:0","messages":[{"role":"user","content":[{"text":"hello"}]}],"inferenceConfig":{"maxTokens":4000}}`)
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("status %d", res.StatusCode)
	}
	u := e.tracker.settled(t)
	e.tracker.mu.Lock()
	recorded := slices.Clone(e.tracker.recorded)
	e.tracker.mu.Unlock()
	if checked := checkedModel(e); checked != pathModel || !slices.Equal(recorded, []string{pathModel}) {
		t.Fatalf("checked as %s, recorded %q (settled model %q): want the path's model %q, which Bedrock runs",
			checked, recorded, u.Model, pathModel)
	}
}

// The same for Gemini: Google runs the path's model (/v1beta/models/{model}:generateContent);
// the check (worst case, the unpriced-model rule) is the path's model's.
func TestGeminiPathModelWinsOverBodyModel(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"candidates":[{"content":{"parts":[{"text":"hi"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":3,"candidatesTokenCount":1},"modelVersion":"gemini-2.5-pro"}`)
	}))
	defer up.Close()
	e := newEnv(t, up.URL, gateway.Config{})
	e.tracker.refuse = "gemini-2.5-pro" // stands for a model the organization refuses unpriced
	res := post(t, e.front.URL+"/v1beta/models/gemini-2.5-pro:generateContent", "",
		`{"model":"models/gemini-2.5-flash-lite","contents":[{"parts":[{"text":"hello"}]}]}`, "X-Goog-Api-Key", "tgk_good")
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if checked := checkedModel(e); res.StatusCode != http.StatusForbidden || checked != "gemini-2.5-pro" {
		t.Fatalf("status %d, checked as %s: want 403 for the path's model gemini-2.5-pro, which Google runs", res.StatusCode, checked)
	}
}

// A request body Google takes in binary protobuf (Content-Type: application/x-protobuf)
// is no JSON: nothing is estimated from it, but the model its path names is still the
// one checked (its worst case reserved, the unpriced-model rule applied) and recorded
// for the settlement. (Its answer is asked in JSON: ?alt=proto is refused, the usage of
// a protobuf answer being unreadable, TestAnswersTheUsageReaderCannotReadAreRefused.)
func TestProtobufRequestStillNamesThePathModel(t *testing.T) {
	var called atomic.Bool
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		called.Store(true)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"usageMetadata":{"promptTokenCount":1000,"candidatesTokenCount":300}}`)
	}))
	defer up.Close()
	e := newEnv(t, up.URL, gateway.Config{})
	e.tracker.refuse = "gemini-2.5-pro" // stands for a model the organization refuses unpriced
	res := post(t, e.front.URL+"/v1beta/models/gemini-2.5-pro:generateContent", "",
		"\x12\x0b\x0a\x09\x12\x07\x0a\x05hello", "X-Goog-Api-Key", "tgk_good", "Content-Type", "application/x-protobuf")
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if checked := checkedModel(e); res.StatusCode != http.StatusForbidden || called.Load() || checked != "gemini-2.5-pro" {
		t.Fatalf("status %d (sent upstream: %v), checked as %s: want the path's model gemini-2.5-pro checked (403 here)",
			res.StatusCode, called.Load(), checked)
	}
}

// checkedModel is the model of the hint the gate was last given, "<no hint>" when it
// had no body estimate.
func checkedModel(e *env) string {
	e.gate.mu.Lock()
	defer e.gate.mu.Unlock()
	if len(e.gate.hints) == 0 || e.gate.hints[len(e.gate.hints)-1].Body == nil {
		return "<no hint>"
	}
	return e.gate.hints[len(e.gate.hints)-1].Body.Model
}
