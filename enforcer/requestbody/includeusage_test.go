package requestbody

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
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
			if tc.want == "" {
				if ok {
					t.Fatalf("changed to %s", got)
				}
				return
			}
			if !ok || string(got) != tc.want {
				t.Fatalf("got %s (%v)\nwant %s", got, ok, tc.want)
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
	f.Fuzz(func(t *testing.T, body []byte) {
		got, ok := WithIncludeUsage(body)
		if !ok {
			return
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
