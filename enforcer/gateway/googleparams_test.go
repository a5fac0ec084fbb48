package gateway_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/enforcer/gateway"
)

// googleSystemParams answers as Google's APIs do: the system parameters are read after
// percent-decoding (fields/$fields: a response field mask; alt/$alt=proto: the answer in
// binary protobuf; callback/$callback: JSONP); the usage is 1000 input, 300 candidates
// and 1700 thinking tokens. calls counts the requests it got.
func googleSystemParams(t *testing.T, calls *atomic.Int32) *httptest.Server {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		q := r.URL.Query()
		alt := q.Get("alt") + q.Get("$alt")
		mask := q.Get("fields") + q.Get("$fields") + r.Header.Get("X-Goog-FieldMask")
		callback := q.Get("callback") + q.Get("$callback")
		const answer = `{"candidates":[{"content":{"parts":[{"text":"hello there"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":1000,"candidatesTokenCount":300,"thoughtsTokenCount":1700},"modelVersion":"gemini-2.5-pro"}`
		switch {
		case alt == "proto":
			w.Header().Set("Content-Type", "application/x-protobuf")
			_, _ = w.Write([]byte{0x0a, 0x12, 0x0a, 0x10, 0x0a, 0x0e, 0x12, 0x0c, 0x0a, 0x0a, 'h', 'e', 'l', 'l', 'o', ' ', 't', 'h', 'e', 'r', 0x1a, 0x06, 0x08, 0xe8, 0x07, 0x10, 0xac, 0x02})
		case alt == "media":
			w.Header().Set("Content-Type", "video/mp4")
			_, _ = io.WriteString(w, "\x00\x00\x00\x18ftypmp42")
		case callback != "":
			w.Header().Set("Content-Type", "text/javascript; charset=UTF-8")
			_, _ = io.WriteString(w, "// API callback\n"+callback+"("+answer+");")
		case mask != "":
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"candidates":[{"content":{"parts":[{"text":"hello there"}]},"finishReason":"STOP"}]}`)
		case alt == "sse":
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: "+answer+"\r\n\r\n")
		default:
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, answer)
		}
	}))
	t.Cleanup(up.Close)
	return up
}

// docs/gateway.md, "Per request" 3: Google's response field mask is dropped, since one
// that leaves usageMetadata out would hide the usage the request is charged by. Google
// reads its query parameters percent-decoded, so a mask whose name is percent-encoded
// (f%69elds, %66ields, %24f%69elds) is the same mask and is dropped too (before
// 2026-12-02 only the literal text "fields" was looked for).
func TestEncodedFieldMaskIsDropped(t *testing.T) {
	var calls atomic.Int32
	e := newEnv(t, googleSystemParams(t, &calls).URL, gateway.Config{})
	for _, q := range []string{"f%69elds=candidates", "%66ields=candidates", "%24f%69elds=candidates", "$fields=candidates"} {
		res := post(t, e.front.URL+"/v1beta/models/gemini-2.5-pro:generateContent?"+q, "",
			`{"contents":[{"parts":[{"text":"hello"}]}]}`, "X-Goog-Api-Key", "tgk_good")
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		u := e.tracker.settledOnce(t)
		if u.InputTokens != 1000 || u.OutputTokens != 2000 || !u.Complete {
			t.Errorf("?%s: settled input %d, output %d, complete %v: want the 1000 + 2000 tokens Google billed (the mask reached Google and hid usageMetadata)",
				q, u.InputTokens, u.OutputTokens, u.Complete)
		}
	}
}

// Google's system parameters that ask for an answer the usage reader cannot read are
// refused, 400 service_gateway_response_format_unsupported, before anything is read,
// checked or sent: alt (or $alt) other than json and sse (proto answers in binary
// protobuf, in which no usage is read, and no text estimate finds the thinking tokens),
// callback (or $callback: JSONP wraps the JSON in a call), and $ct (the body read as
// another type than the gateway read it). Before 2026-12-02 each passed untouched and
// the request was settled without the usage Google billed.
func TestAnswersTheUsageReaderCannotReadAreRefused(t *testing.T) {
	var calls atomic.Int32
	e := newEnv(t, googleSystemParams(t, &calls).URL, gateway.Config{})
	for _, q := range []string{"alt=proto", "%24alt=proto", "$alt=proto", "%61lt=proto", "alt=sse&alt=proto", "alt=media",
		"callback=f", "$callback=f", "%24callback=f", "c%61llback=f", "$ct=application%2Fx-protobuf", "%24ct=application/json+protobuf"} {
		res := post(t, e.front.URL+"/v1beta/models/gemini-2.5-pro:generateContent?"+q, "",
			`{"contents":[{"parts":[{"text":"hello"}]}]}`, "X-Goog-Api-Key", "tgk_good")
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 400 || res.Header.Get("X-Service-Error-Code") != "service_gateway_response_format_unsupported" ||
			!strings.Contains(string(b), `"code":"service_gateway_response_format_unsupported"`) {
			t.Errorf("?%s: %d %s, want 400 service_gateway_response_format_unsupported", q, res.StatusCode, b)
			if res.StatusCode == 200 {
				u := e.tracker.settledOnce(t)
				t.Errorf("?%s: settled input %d, output %d (Google billed 1000 + 2000)", q, u.InputTokens, u.OutputTokens)
			}
		}
	}
	e.gate.mu.Lock()
	checked := len(e.gate.hints)
	e.gate.mu.Unlock()
	e.tracker.mu.Lock()
	settled := len(e.tracker.finished)
	e.tracker.mu.Unlock()
	if calls.Load() != 0 || checked != 0 || settled != 0 || testutil.ToFloat64(e.req.WithLabelValues(gateway.OutcomeUnsupported)) != 12 {
		t.Fatalf("upstream calls %d, checks %d, settlements %d: want none", calls.Load(), checked, settled)
	}
}

// The formats the usage reader reads pass as they came: Gemini's streams ask for
// ?alt=sse, and alt=json is the default; a file's download (a GET, not charged) asks for
// alt=media.
func TestReadableAnswerFormatsPass(t *testing.T) {
	var calls atomic.Int32
	e := newEnv(t, googleSystemParams(t, &calls).URL, gateway.Config{})
	for _, tc := range []struct{ method, path string }{
		{"POST", "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse"},
		{"POST", "/v1beta/models/gemini-2.5-pro:streamGenerateContent?%24alt=sse"},
		{"POST", "/v1beta/models/gemini-2.5-pro:generateContent?alt=json&prettyPrint=false"},
		{"GET", "/v1beta/files/abc:download?alt=media"},
	} {
		res := send(t, tc.method, e.front.URL+tc.path, "", strings.NewReader(`{"contents":[{"parts":[{"text":"hello"}]}]}`),
			"X-Goog-Api-Key", "tgk_good")
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		u := e.tracker.settledOnce(t)
		if res.StatusCode != 200 || tc.method == "POST" && (u.InputTokens != 1000 || u.OutputTokens != 2000) {
			t.Errorf("%s %s: %d, settled input %d output %d; want 200 and the 1000 + 2000 tokens Google billed",
				tc.method, tc.path, res.StatusCode, u.InputTokens, u.OutputTokens)
		}
	}
}
