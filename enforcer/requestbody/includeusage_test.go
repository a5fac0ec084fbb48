package requestbody

import (
	"bytes"
	"encoding/json"
	"io"
	"reflect"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/estimate"
)

func TestWithIncludeUsage(t *testing.T) {
	for _, tc := range []struct {
		name, body, want string // want "" = unchanged
	}{
		{"absent: spliced after the brace, every other byte kept",
			`{"model":"gpt-4o-mini", "stream":true,"temperature":0.70,"seed":12345678901234567890,"messages":[{"role":"user","content":"caf\u00e9 <b>"}]}`,
			`{"stream_options":{"include_usage":true},"model":"gpt-4o-mini", "stream":true,"temperature":0.70,"seed":12345678901234567890,"messages":[{"role":"user","content":"caf\u00e9 <b>"}]}`},
		{"leading space kept", " \n{ \"stream\" : true }", " \n{\"stream_options\":{\"include_usage\":true}, \"stream\" : true }"},
		{"null options", `{"stream":true,"stream_options":null,"n":1}`, `{"stream":true,"stream_options":{"include_usage":true},"n":1}`},
		{"false include_usage", `{"stream_options": {"include_usage":false},"stream":true}`, `{"stream_options": {"include_usage":true},"stream":true}`},
		{"other options kept", `{"stream":true,"stream_options":{"x":1.50,"y":"<&>"}}`, `{"stream":true,"stream_options":{"include_usage":true,"x":1.50,"y":"<&>"}}`},
		{"already true", `{"stream":true,"stream_options":{"include_usage":true}}`, ""},
		{"not streaming", `{"stream":false,"messages":[]}`, ""},
		{"stream absent", `{"messages":[]}`, ""},
		{"stream as a string is not true", `{"stream":"true"}`, ""},
		{"the last stream counts", `{"stream":true,"stream":false}`, ""},
		{"the last stream_options counts", `{"stream":true,"stream_options":{"include_usage":true},"stream_options":{}}`,
			`{"stream":true,"stream_options":{"include_usage":true},"stream_options":{"include_usage":true}}`},
		{"options not an object", `{"stream":true,"stream_options":[1]}`, ""},
		{"not an object", `[{"stream":true}]`, ""},
		{"trailing data", `{"stream":true} {}`, ""},
		{"malformed", `{"stream":true,`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := WithIncludeUsage([]byte(tc.body))
			if !wantRewrite(t, got, ok, tc.want) {
				return
			}
			// The front doors ask only a body the estimate read as a stream.
			if est, err := estimate.Input([]byte(tc.body)); err != nil || !est.Stream {
				t.Fatalf("the estimate reads %s as no stream (%v)", tc.body, err)
			}
		})
	}
}

// FuzzWithIncludeUsage: a rewritten body is valid JSON asking for the usage, and equal
// to the original but for stream_options.include_usage.
func FuzzWithIncludeUsage(f *testing.F) {
	f.Add([]byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	f.Add([]byte(`{"stream":true,"stream_options":{"include_usage":false,"a":[1,2]}}`))
	f.Add([]byte(`{"stream":true,"stream_options":null}`))
	f.Add([]byte(`{"stream":false,"stream":true}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		got, ok := WithIncludeUsage(body)
		if !ok {
			return
		}
		// The front doors ask only a body the estimate read as a stream (est.Stream),
		// so the estimate must read every body rewritten here as one.
		if est, err := estimate.Input(body); err == nil && !est.Stream {
			t.Fatalf("rewrote %q, which the estimate reads as no stream", body)
		}
		var before, after map[string]any
		if err := json.Unmarshal(body, &before); err != nil {
			t.Fatalf("rewrote a body encoding/json refuses: %q", body)
		}
		if err := json.Unmarshal(got, &after); err != nil {
			t.Fatalf("rewrote %q into invalid JSON %q", body, got)
		}
		opts, _ := after["stream_options"].(map[string]any)
		if opts["include_usage"] != true || after["stream"] != true {
			t.Fatalf("%q -> %q", body, got)
		}
		if o, _ := before["stream_options"].(map[string]any); o != nil {
			for k, v := range o {
				if k != "include_usage" && !reflect.DeepEqual(opts[k], v) {
					t.Fatalf("stream_options.%s changed: %q -> %q", k, body, got)
				}
			}
		}
		delete(before, "stream_options")
		delete(after, "stream_options")
		if !reflect.DeepEqual(before, after) {
			t.Fatalf("other members changed: %q -> %q", body, got)
		}
		if bytes.Equal(body, got) {
			t.Fatal("reported a change that is none")
		}
	})
}

// FuzzWithIncludeUsageAsTheDecoderReadsIt: WithIncludeUsage walks the body by hand (it
// must not allocate); it decides and rewrites exactly as a reading with encoding/json's
// Decoder does (decoderIncludeUsage, the implementation it replaced).
func FuzzWithIncludeUsageAsTheDecoderReadsIt(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi \"x\" \\ {]"}]}`,
		`{"stream":true,"stream_options":{"include_usage":false,"a":[1,2]}}`,
		`{"stream":true,"stream_options":{"include_usage":true}}`,
		`{"stream":true,"stream_options":{"include_usage":true,"include_usage":0}}`,
		`{"stream":true,"stream_options":null}`,
		`{"stream":true,"stream_options":"x"}`,
		` { "str\u0065am" : true , "stream_options" : { "include_\u0075sage" : true } } `,
		`{"stream":true,"stream_options":{}} x`,
		`{}`, `[]`, `1`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, ok := WithIncludeUsage(body)
		want, wantOK := decoderIncludeUsage(body)
		if ok != wantOK || !bytes.Equal(got, want) {
			t.Fatalf("%q: got %q (%v), the decoder's reading %q (%v)", body, got, ok, want, wantOK)
		}
	})
}

func TestWithIncludeUsageAllocatesNothingUnlessItRewrites(t *testing.T) {
	body := []byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"word word"}],"stream":true,"stream_options":{"include_usage":true}}`)
	if n := testing.AllocsPerRun(100, func() { _, _ = WithIncludeUsage(body) }); n != 0 {
		t.Fatalf("%v allocations for a body already asking for its usage", n)
	}
}

// decoderIncludeUsage is WithIncludeUsage as it was first written, reading the body
// with encoding/json's Decoder: the reference the hand-written walk is held to.
func decoderIncludeUsage(body []byte) ([]byte, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, false
	}
	open := int(dec.InputOffset())
	stream := false
	var opts json.RawMessage
	optsStart, optsEnd := -1, -1
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, false
		}
		key, _ := t.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, false
		}
		end := int(dec.InputOffset())
		switch key {
		case "stream":
			stream = string(raw) == "true"
		case "stream_options":
			opts, optsStart, optsEnd = raw, end-len(raw), end
		}
	}
	if _, err := dec.Token(); err != nil {
		return nil, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, false
	}
	if !stream {
		return nil, false
	}
	if optsStart < 0 {
		out := append(append(append([]byte{}, body[:open]...), includeUsageMember...), body[open:]...)
		return out, true
	}
	var replacement []byte
	if string(opts) == "null" {
		replacement = []byte(`{"include_usage":true}`)
	} else {
		var members map[string]json.RawMessage
		if err := json.Unmarshal(opts, &members); err != nil || members == nil {
			return nil, false
		}
		if string(members["include_usage"]) == "true" {
			return nil, false
		}
		members["include_usage"] = json.RawMessage("true")
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(members); err != nil {
			return nil, false
		}
		replacement = bytes.TrimRight(b.Bytes(), "\n")
	}
	out := append(append(append([]byte{}, body[:optsStart]...), replacement...), body[optsEnd:]...)
	return out, true
}

// Mistral's API refuses stream_options (422) and sends a stream's usage unasked, and
// OpenRouter sends it unasked whatever was asked: their hosts, however written, are told
// apart from every other.
func TestUsageUnasked(t *testing.T) {
	for host, want := range map[string]bool{
		"api.mistral.ai": true, "API.Mistral.AI": true, "api.mistral.ai:443": true, "api.mistral.ai.": true,
		"openrouter.ai": true, "OpenRouter.ai:443": true, "openrouter.ai.example.com": false,
		"api.openai.com": false, "eu.api.openai.com": false, "mistral.ai": false, "api.mistral.ai.example.com": false,
		"myresource.openai.azure.com": false, "": false, "127.0.0.1:8080": false,
	} {
		if got := UsageUnasked(host); got != want {
			t.Errorf("UsageUnasked(%q) = %v, want %v", host, got, want)
		}
	}
}

// A stream is asked for its usage on the completion paths, but for Mistral's FIM and for
// an Azure OpenAI API version from before stream_options, however its query spells it.
func TestAsksStreamUsage(t *testing.T) {
	const azure = "/openai/deployments/gpt-4o/chat/completions"
	for _, c := range []struct {
		path, query string
		want        bool
	}{
		{"/v1/chat/completions", "", true},
		{"/v1/completions", "", true},
		{"/v1/fim/completions", "", false},
		{"/v1/embeddings", "", false},
		{azure, "api-version=2024-10-21", true},
		{azure, "api-version=2024-08-01-preview", true},
		{azure, "api-version=2025-04-01-preview", true},
		{azure, "api-version=2024-06-01", false},
		{azure, "api-version=2024-07-01-preview", false},
		{azure, "api-version=2024-02-01", false},
		{azure, "api-version=2023-05-15", false},
		{azure, "x=1&api%2Dversion=2024-02-01", false},
		{azure, "%61pi-version=2024-02-01", false},
		{azure, "api-version=2024-10-21&api-version=2024-02-01", false}, // either may be the one read
		{"/openai/deployments/gpt-4o/completions", "api-version=2024-02-01", false},
		{"/openai/v1/chat/completions", "api-version=preview", true},
		{"/openai/v1/chat/completions", "", true},
		{azure, "api-version=latest", true},
		{azure, "api-version=2024-0x-01", true}, // not a date: Azure's to refuse
		{azure, "apiversion=2024-02-01", true},
	} {
		if got := AsksStreamUsage(c.path, c.query); got != c.want {
			t.Errorf("AsksStreamUsage(%q, %q) = %v, want %v", c.path, c.query, got, c.want)
		}
	}
}

// wantRewrite fails the test unless a rewrite gave want ("": the body left unchanged);
// it tells whether there was one to want.
func wantRewrite(t *testing.T, got []byte, ok bool, want string) bool {
	t.Helper()
	if want == "" {
		if ok {
			t.Fatalf("changed to %s", got)
		}
		return false
	}
	if !ok || string(got) != want {
		t.Fatalf("got %s (%v)\nwant %s", got, ok, want)
	}
	return true
}

// estimateOf is what a front door's hint holds for body: estimate.Input's reading, or
// nil when it read nothing.
func estimateOf(body []byte) *estimate.Request {
	est, err := estimate.Input(body)
	if err != nil {
		return nil
	}
	return &est
}

// AskStreamUsage answers as WithIncludeUsage does, checking the body only when its
// estimate was not read from it.
func TestAskStreamUsage(t *testing.T) {
	stream := []byte(`{"model":"gpt-5","stream":true,"messages":[]}`)
	for _, tc := range []struct {
		name string
		body string
		est  *estimate.Request
		want string // "" = unchanged
	}{
		{"a stream its estimate read", string(stream), estimateOf(stream),
			`{"stream_options":{"include_usage":true},"model":"gpt-5","stream":true,"messages":[]}`},
		{"its stream_options where its estimate found them", ` {"stream":true, "stream_options" : {"include_usage":false,"x":1} }`,
			estimateOf([]byte(` {"stream":true, "stream_options" : {"include_usage":false,"x":1} }`)),
			` {"stream":true, "stream_options" : {"include_usage":true,"x":1} }`},
		{"the last stream_options, by its estimate", `{"stream":true,"stream_options":{"include_usage":true},"stream_options":null}`,
			estimateOf([]byte(`{"stream":true,"stream_options":{"include_usage":true},"stream_options":null}`)),
			`{"stream":true,"stream_options":{"include_usage":true},"stream_options":{"include_usage":true}}`},
		{"already asked, by its estimate", `{"stream":true,"stream_options":{"include_usage":true}}`,
			estimateOf([]byte(`{"stream":true,"stream_options":{"include_usage":true}}`)), ""},
		{"no stream, by its estimate", `{"model":"gpt-5","stream":false}`, estimateOf([]byte(`{"model":"gpt-5","stream":false}`)), ""},
		{"no estimate: checked, and asked", `{"stream":true,"max_tokens":-1}`, nil,
			`{"stream_options":{"include_usage":true},"stream":true,"max_tokens":-1}`},
		{"no estimate: checked, malformed", `{"stream":true,`, nil, ""},
		{"another body's estimate: checked, malformed", `{"stream":true,"x":[`, estimateOf(stream), ""},
		{"an estimate made otherwise: checked", `{"stream":true,"messages":[]}}`, &estimate.Request{Stream: true}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := AskStreamUsage([]byte(tc.body), tc.est)
			wantRewrite(t, got, ok, tc.want)
		})
	}
}

// FuzzAskStreamUsageAsWithIncludeUsage: whatever the body, AskStreamUsage with the
// body's own estimate (or none), or with another body's of another length, rewrites it
// exactly as WithIncludeUsage does; it never walks a malformed body (a walk of one may
// panic).
func FuzzAskStreamUsageAsWithIncludeUsage(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi \"x\" \\ {]"}]}`,
		`{"stream":true,"stream_options":{"include_usage":false,"a":[1,2]}}`,
		`{"stream":true,"stream_options":{"include_usage":true}}`,
		`{"stream":true,"stream_options":null}`,
		`{"stream":false,"stream":true}`,
		`{"stream":true,"max_tokens":1e400}`,
		`{"stream":true,`, `[{"stream":true}]`, `{}`, ``,
	} {
		f.Add([]byte(s), []byte(`{"stream":true}`))
	}
	f.Fuzz(func(t *testing.T, body, other []byte) {
		want, wantOK := WithIncludeUsage(body)
		if got, ok := AskStreamUsage(body, estimateOf(body)); ok != wantOK || !bytes.Equal(got, want) {
			t.Fatalf("%q with its estimate: got %q (%v), WithIncludeUsage %q (%v)", body, got, ok, want, wantOK)
		}
		if len(other) != len(body) {
			if got, ok := AskStreamUsage(body, estimateOf(other)); ok != wantOK || !bytes.Equal(got, want) {
				t.Fatalf("%q with %q's estimate: got %q (%v), WithIncludeUsage %q (%v)", body, other, got, ok, want, wantOK)
			}
		}
	})
}
