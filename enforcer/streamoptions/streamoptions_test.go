package streamoptions_test

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/enforcer/internal/agentbody"
	"github.com/tollgate-dev/tollgate/enforcer/streamoptions"
)

func TestRefused(t *testing.T) {
	t.Run("compressed", func(t *testing.T) {
		body := `{"error":{"message":"Unknown parameter: 'stream_options'."}}`
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		_, _ = zw.Write([]byte(body))
		_ = zw.Close()
		if !streamoptions.Refused(400, []string{"gzip"}, gz.Bytes()) {
			t.Error("a gzipped refusal was not read")
		}
		if streamoptions.Refused(400, nil, gz.Bytes()) || streamoptions.Refused(400, []string{"gzip"}, []byte(body)) ||
			streamoptions.Refused(400, []string{"zstd"}, []byte(body)) {
			t.Error("a body read in the wrong coding was taken for a refusal")
		}
	})
	cases := []struct {
		name   string
		status int
		body   string
		want   bool
	}{
		// Answers upstreams gave to a body carrying stream_options, as their users
		// reported them.
		{"openai-shaped unknown parameter", 400, `{"error":{"message":"Unknown parameter: 'stream_options'.","type":"invalid_request_error","param":"stream_options","code":"unknown_parameter"}}`, true},
		{"azure's older wording", 400, `{"error":{"code":null,"message":"Unrecognized request argument supplied: stream_options","param":null,"type":"invalid_request_error"}}`, true},
		{"groq's older answer", 400, `{"error":{"message":"property 'stream_options' is unsupported, did you mean 'stream'?","type":"invalid_request_error"}}` + "\n", true},
		{"bedrock's validation", 400, `{"message":"extraneous key [include_usage] is not permitted"}`, true},
		{"a strict schema's 422", 422, `{"detail":[{"type":"extra_forbidden","loc":["body","stream_options"],"msg":"Extra inputs are not permitted","input":{"include_usage":true}}]}`, true},
		{"the name in capitals", 400, `{"error":"STREAM_OPTIONS is not supported"}`, true},
		// Not a refusal of the field.
		{"another bad request", 400, `{"error":{"message":"Invalid model: gpt-9","type":"invalid_request_error"}}`, false},
		{"a rate limit naming it", 429, `{"error":{"message":"stream_options: slow down"}}`, false},
		{"a server error naming it", 500, `{"error":{"message":"failed reading stream_options"}}`, false},
		{"a stream naming it", 200, `data: {"stream_options":{"include_usage":true}}`, false},
		{"an empty 400", 400, ``, false},
		{"half the name", 400, `{"error":"stream_opt"}`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := streamoptions.Refused(c.status, nil, []byte(c.body)); got != c.want {
				t.Errorf("Refused(%d, %s) = %v, want %v", c.status, c.body, got, c.want)
			}
		})
	}
}

// RefusedByName (ext_proc's, which cannot prove a refusal by sending the client's own
// body) does not take an answer that names the field only by quoting the request it was
// added to: an error about anything else a client chose to get, whose input is the whole
// body (FastAPI's default 422, an error's str() in a 400).
func TestRefusedByName(t *testing.T) {
	cases := []struct {
		name string
		body string
		want bool
	}{
		{"openai-shaped unknown parameter", `{"error":{"message":"Unknown parameter: 'stream_options'.","type":"invalid_request_error","param":"stream_options","code":"unknown_parameter"}}`, true},
		{"groq's older answer", `{"error":{"message":"property 'stream_options' is unsupported, did you mean 'stream'?"}}`, true},
		{"bedrock's validation", `{"message":"extraneous key [include_usage] is not permitted"}`, true},
		{"a strict schema's 422", `{"detail":[{"type":"extra_forbidden","loc":["body","stream_options"],"msg":"Extra inputs are not permitted","input":{"include_usage":true}}]}`, true},
		{"a flattened path", `{"error":"body.stream_options: Extra inputs are not permitted"}`, true},
		{"named, then quoted", `{"error":"stream_options is not supported","input":{"stream_options":{"include_usage":true}}}`, true},
		// The request quoted: an error about another field.
		{"fastapi's missing field", `{"detail":[{"type":"missing","loc":["body","messages"],"msg":"Field required","input":{"model":"qwen","stream":true,"stream_options":{"include_usage":true}}}]}`, false},
		{"spaced", `{"detail":[{"loc":["body","messages"],"input":{"model": "qwen", "stream": true, "stream_options": {"include_usage": true}}}]}`, false},
		{"a python dict in a message", `{"object":"error","message":"1 validation error: {'type': 'missing', 'loc': ('body', 'messages'), 'msg': 'Field required', 'input': {'model': 'qwen', 'stream': True, 'stream_options': {'include_usage': True}}}","code":400}`, false},
		{"pydantic's cut repr", `{"message":"messages\n  Field required [type=missing, input_value={'model': 'qwen', 'stream': ...{'include_usage': True}}, input_type=dict]"}`, false},
		{"json in a json string", `{"error":"bad body: {\"model\":\"qwen\",\"stream_options\":{\"include_usage\":true}}"}`, false},
		{"another bad request", `{"error":{"message":"Invalid model: gpt-9"}}`, false},
		// A client's value quoted, which MayQuote does not take for the word: a capital I
		// with a dot (U+0130) lowers to an ASCII i by Unicode's rules.
		{"a dotted capital I quoted", "{\"error\":{\"message\":\"Invalid value: 'stream_opt\u0130ons'. Supported values are: 'system', 'assistant', 'user'.\"}}", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := streamoptions.RefusedByName(400, nil, []byte(c.body)); got != c.want {
				t.Errorf("RefusedByName(400, %s) = %v, want %v", c.body, got, c.want)
			}
			if !streamoptions.Refused(400, nil, []byte(c.body)) && c.want {
				t.Errorf("Refused(400, %s) = false", c.body)
			}
		})
	}
	if streamoptions.RefusedByName(500, nil, []byte(`{"error":"Unknown parameter: 'stream_options'."}`)) {
		t.Error("a 500 was taken for a refusal")
	}
}

// clock is a time the test moves.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestMemoryRemembersAnHourPerUpstreamAndModel(t *testing.T) {
	c := &clock{t: time.Date(2026, 12, 6, 18, 0, 0, 0, time.UTC)}
	m := streamoptions.NewMemory(c.now, time.Hour)
	if m.Refuses("api.example.com", "m1") {
		t.Fatal("an empty memory remembers a refusal")
	}
	if !m.Learn("api.example.com", "m1") {
		t.Fatal("a refusal was not remembered")
	}
	if !m.Refuses("api.example.com", "m1") {
		t.Error("a refusal just learned is not remembered")
	}
	if m.Refuses("api.example.com", "m2") || m.Refuses("other.example.com", "m1") {
		t.Error("a refusal is remembered for another model or another upstream")
	}
	c.t = c.t.Add(time.Hour - time.Second)
	if !m.Refuses("api.example.com", "m1") {
		t.Error("a refusal is forgotten before its hour")
	}
	c.t = c.t.Add(time.Second)
	if m.Refuses("api.example.com", "m1") {
		t.Error("a refusal is remembered past its hour: the upstream is never asked again")
	}
	// Learned again, it lasts an hour from then.
	m.Learn("api.example.com", "m1")
	c.t = c.t.Add(time.Hour / 2)
	if !m.Refuses("api.example.com", "m1") {
		t.Error("a refusal learned again is not remembered")
	}
	var none *streamoptions.Memory
	if none.Learn("a", "b") || none.Refuses("a", "b") {
		t.Error("a nil memory remembers")
	}
}

func TestMemoryIsBounded(t *testing.T) {
	c := &clock{t: time.Date(2026, 12, 6, 18, 0, 0, 0, time.UTC)}
	m := streamoptions.NewMemory(c.now, time.Hour)
	n := 0
	for ; m.Learn("api.example.com", fmt.Sprint("model-", n)); n++ {
		if n > 1<<20 {
			t.Fatal("the memory takes refusals without bound")
		}
	}
	if n < 1000 {
		t.Fatalf("the memory holds only %d refusals", n)
	}
	if m.Refuses("api.example.com", fmt.Sprint("model-", n)) {
		t.Error("a refusal it could not take is remembered")
	}
	if !m.Refuses("api.example.com", "model-0") {
		t.Error("a full memory forgot a current refusal")
	}
	// Once the remembered refusals have ended, their room is taken again.
	c.t = c.t.Add(time.Hour)
	if !m.Learn("api.example.com", "a new model") || !m.Refuses("api.example.com", "a new model") {
		t.Error("a memory full of ended refusals takes no new one")
	}
	if m.Learn("api.example.com", string(make([]byte, 257))) {
		t.Error("a model name over 256 bytes was remembered")
	}
}

// TestMemoryRemembersRefusalsLearnedElsewhere: a refusal given to Remember is held until
// its own end, or the later end already held; an ended one is not taken; only Learn is
// told to OnLearn's function.
func TestMemoryRemembersRefusalsLearnedElsewhere(t *testing.T) {
	c := &clock{t: time.Date(2026, 12, 6, 18, 0, 0, 0, time.UTC)}
	m := streamoptions.NewMemory(c.now, time.Hour)
	var told []streamoptions.Refusal
	m.OnLearn(func(r streamoptions.Refusal) { told = append(told, r) })
	r := streamoptions.Refusal{Upstream: "h", Model: "m", Until: c.t.Add(24 * time.Hour)}
	if !m.Remember(r) || !m.Refuses("h", "m") {
		t.Fatal("a refusal learned elsewhere is not remembered")
	}
	if m.Remember(streamoptions.Refusal{Upstream: "h", Model: "m", Until: c.t.Add(time.Minute)}) {
		t.Error("a refusal already held is counted new")
	}
	if !m.Learn("h", "m") {
		t.Fatal("Learn failed")
	}
	c.t = c.t.Add(2 * time.Hour)
	if !m.Refuses("h", "m") {
		t.Error("an earlier end, given or learned, cut short the day held")
	}
	if len(told) != 1 || told[0].Until != time.Date(2026, 12, 6, 19, 0, 0, 0, time.UTC) {
		t.Errorf("OnLearn's function was told %v; want the one refusal learned, until its hour", told)
	}
	if m.Remember(streamoptions.Refusal{Upstream: "h", Model: "ended", Until: c.t}) || m.Refuses("h", "ended") {
		t.Error("an ended refusal was taken")
	}
	c.t = c.t.Add(24 * time.Hour)
	if !m.Remember(streamoptions.Refusal{Upstream: "h", Model: "m", Until: c.t.Add(time.Hour)}) {
		t.Error("a refusal given again after the one held ended is not counted new")
	}
	if m.Remember(streamoptions.Refusal{Upstream: string(make([]byte, 257)), Model: "m", Until: c.t.Add(time.Hour)}) {
		t.Error("an upstream name over 256 bytes was remembered")
	}
}

// TestMayQuote: what a client sent may be quoted back in a refusal when it holds either
// word, in any case, or a letter or underscore as a JSON \u escape; an escape of another
// character (non-ASCII text as Python writes it, Go's HTML escapes) is not a word.
func TestMayQuote(t *testing.T) {
	for _, c := range []struct {
		name string
		sent string
		want bool
	}{
		{"a plain body", `{"model":"o3","stream":true,"max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`, false},
		{"a role", `{"messages":[{"role":"stream_options","content":"hi"}]}`, true},
		{"in capitals", `{"messages":[{"role":"user","content":"STREAM_OPTIONS"}]}`, true},
		{"include_usage in a tool's name", `{"tools":[{"type":"function","function":{"name":"Include_Usage"}}]}`, true},
		{"at the very start", `stream_options`, true},
		{"at the very end", `x include_usage`, true},
		{"a letter escaped", `{"content":"\u0073tream"}`, true},
		{"an underscore escaped", `{"content":"stream\u005Foptions"}`, true},
		{"non-ascii escaped", `{"content":"caf\u00e9 \u4f60\u597d"}`, false},
		{"Go's html escapes", `{"content":"a \u003c b \u0026 c"}`, false},
		{"a short escape at the end", `{"content":"\u00`, false},
		{"the words apart", `{"content":"stream options, include usage, stream_opt, _options"}`, false},
	} {
		if got := streamoptions.MayQuote([]byte(c.sent)); got != c.want {
			t.Errorf("%s: MayQuote(%s) = %v, want %v", c.name, c.sent, got, c.want)
		}
	}
}

// BenchmarkMayQuote: a coding agent's Chat Completions body of 200 KiB (agentbody), and
// one dense with what the check stops at (underscores, \u escapes).
//
// Run: go test -run '^$' -bench MayQuote -benchmem ./enforcer/streamoptions
func BenchmarkMayQuote(b *testing.B) {
	for name, body := range map[string][]byte{
		"agent-200KiB": agentbody.OpenAIChat(200 << 10),
		"dense-190KiB": []byte(`{"model":"o3","stream":true,"max_tokens":1000,"messages":[` +
			strings.Repeat(`{"role":"user","content":"caf\u00e9 tool_call_id max_completion_tokens","tool_call_id":"call_1"},`, 2000) + `{"role":"user","content":"hi"}]}`),
	} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if streamoptions.MayQuote(body) {
					b.Fatal("a plain body may quote")
				}
			}
		})
	}
}
