package gateway_test

import (
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/gateway"
)

// A chat request whose JSON an upstream reads (Python's json.loads of the body's bytes,
// as FastAPI and Starlette do for vLLM, SGLang and LiteLLM: one leading UTF-8 BOM
// skipped, a number beyond float64's range read as infinity; llama.cpp's server skips
// the BOM too) is read here as it is there: its stream asked for its usage, the check
// hinted its model, its request recorded; the BOM is dropped from what goes upstream,
// whatever the body's type. Before, encoding/json's grammar refused it and it went
// upstream unread, its input free, its model unchecked.
func TestJSONBodiesAreReadAsTheUpstreamReadsThem(t *testing.T) {
	up := newBodyKeeper(t, "text/event-stream", `data: {"choices":[{"delta":{"content":"Hello"}}],"model":"gpt-4o-mini"}`+"\n\ndata: [DONE]\n\n")
	for _, c := range []struct{ name, contentType, body string }{
		{"plain", "application/json", chatBody},
		{"a UTF-8 BOM", "application/json", "\ufeff" + chatBody},
		{"a BOM and white space", "application/json", "\ufeff \r\n" + chatBody},
		{"a BOM, sent as octet-stream", "application/octet-stream", "\ufeff" + chatBody},
		{"a BOM and white space, sent as audio", "audio/wav", "\ufeff\n\t" + chatBody},
		{"a number beyond float64", "application/json", strings.Replace(chatBody, `"stream":true`, `"stream":true,"seed_note":1e400`, 1)},
	} {
		t.Run(c.name, func(t *testing.T) {
			up.take()
			e := newEnv(t, up.URL, gateway.Config{})
			res := send(t, "POST", e.front.URL+"/v1/chat/completions", "tgk_good", strings.NewReader(c.body), "Content-Type", c.contentType)
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			e.tracker.settled(t)
			got := up.take()
			if res.StatusCode != 200 || len(got) != 1 || !strings.Contains(got[0], `"include_usage":true`) {
				t.Fatalf("%d; the upstream got %q: the stream was not asked for its usage", res.StatusCode, got)
			}
			if !strings.HasPrefix(strings.TrimLeft(got[0], " \t\r\n"), "{") || !json.Valid([]byte(got[0])) && !strings.Contains(got[0], "1e400") {
				t.Fatalf("the upstream got %q: not the JSON object without its BOM", got[0])
			}
			e.gate.mu.Lock()
			hint := e.gate.hints[0].Body
			e.gate.mu.Unlock()
			e.tracker.mu.Lock()
			recorded := e.tracker.recorded
			e.tracker.mu.Unlock()
			if hint == nil || hint.Model != "gpt-4o-mini" || hint.InputTokens == 0 || len(recorded) != 1 || recorded[0] != "gpt-4o-mini" {
				t.Fatalf("the check's hint %+v, the requests recorded %q: the body went unread", hint, recorded)
			}
		})
	}

	// The unpriced-model rule holds behind a BOM: refused before it goes.
	for _, ct := range []string{"application/json", "application/octet-stream"} {
		e := newEnv(t, up.URL, gateway.Config{})
		e.tracker.refuse = "mystery-model"
		up.take()
		res := send(t, "POST", e.front.URL+"/v1/chat/completions", "tgk_good", strings.NewReader("\ufeff"+`{"model":"mystery-model","messages":[]}`), "Content-Type", ct)
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		got := up.take()
		if res.StatusCode != 403 || len(got) != 0 {
			t.Errorf("an unpriced model behind a BOM, sent as %s: %d, the upstream got %q", ct, res.StatusCode, got)
		}
	}
}

// A body on a billed path that opens as a JSON object and is not one well-formed JSON
// object (NaN or Infinity, which Python reads; cut off; data after it) is refused 400
// service_gateway_request_body_malformed before the check, as a corrupt compressed body
// is: never sent, never admitted, nothing recorded. What does not open as a JSON object
// (Google's protobuf, an upload) and an unbilled request are not judged.
func TestMalformedJSONBodiesAreRefused(t *testing.T) {
	up := newBodyKeeper(t, "application/json", `{"object":"chat.completion","model":"gpt-4o-mini","choices":[{"message":{"content":"hi"}}]}`)
	for _, c := range []struct{ name, contentType, body string }{
		{"NaN", "application/json", strings.Replace(chatBody, `"stream":true`, `"stream":true,"temperature":NaN`, 1)},
		{"Infinity behind a BOM", "application/json", "\ufeff" + strings.Replace(chatBody, `"stream":true`, `"stream":true,"temperature":-Infinity`, 1)},
		{"NaN, sent as octet-stream", "application/octet-stream", strings.Replace(chatBody, `"stream":true`, `"stream":true,"top_p":NaN`, 1)},
		{"cut off", "application/json", chatBody[:len(chatBody)-3]},
		{"data after the object", "application/json", chatBody + `{"model":"gpt-4o"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			up.take()
			e := newEnv(t, up.URL, gateway.Config{})
			res := send(t, "POST", e.front.URL+"/v1/chat/completions", "tgk_good", strings.NewReader(c.body), "Content-Type", c.contentType)
			var answer struct {
				Error struct{ Type, Code, Message string } `json:"error"`
			}
			err := json.NewDecoder(res.Body).Decode(&answer)
			res.Body.Close()
			got := up.take()
			if res.StatusCode != 400 || err != nil || answer.Error.Type != "invalid_request_error" || answer.Error.Code != "service_gateway_request_body_malformed" ||
				res.Header.Get("X-Service-Error-Code") != "service_gateway_request_body_malformed" || len(got) != 0 {
				t.Fatalf("%d %+v (%v); the upstream got %q", res.StatusCode, answer, err, got)
			}
			e.gate.mu.Lock()
			checked := len(e.gate.hints)
			e.gate.mu.Unlock()
			e.tracker.mu.Lock()
			recorded := e.tracker.recorded
			e.tracker.mu.Unlock()
			if checked != 0 || len(recorded) != 0 {
				t.Fatalf("%d checks, requests recorded %q: a malformed body was admitted", checked, recorded)
			}
		})
	}
	// Not judged: a body that does not open as a JSON object, an unbilled request.
	for _, c := range []struct{ name, method, path, contentType, body string }{
		{"protobuf to Gemini", "POST", "/v1beta/models/gemini-2.5-pro:generateContent", "application/x-protobuf", "\x12\x03\x0a\x01x"},
		{"a token count", "POST", "/v1/messages/count_tokens", "application/json", `{"model":"claude-sonnet-4-5","x":NaN}`},
	} {
		up.take()
		e := newEnv(t, up.URL, gateway.Config{})
		res := send(t, c.method, e.front.URL+c.path, "tgk_good", strings.NewReader(c.body), "Content-Type", c.contentType)
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		got := up.take()
		if res.StatusCode != 200 || len(got) != 1 || got[0] != c.body {
			t.Errorf("%s: %d, the upstream got %q", c.name, res.StatusCode, got)
		}
	}
}
