// Package requestbody owns what the enforcer reads and rewrites in an inference
// request body before it goes upstream, whichever front door saw it (the ext_proc
// request-body filter, the gateway): asking an OpenAI chat-completions stream for its
// usage (WithIncludeUsage) and keeping a model name only when it is safe to carry
// (CleanModel).
package requestbody

import (
	"bytes"
	"encoding/json"
	"io"
	"unicode"
	"unicode/utf8"
)

// includeUsageMember is spliced in when a streaming request has no stream_options.
var includeUsageMember = []byte(`"stream_options":{"include_usage":true},`)

// WithIncludeUsage returns an OpenAI chat-completions request body that asks for the
// stream's usage: when body is one JSON object with "stream": true whose
// stream_options.include_usage is not true, a copy with it set, and true; otherwise
// false (nothing to change, or not a body this understands).
//
// Every other byte stays as it was (numbers, escapes, key order, white space): the
// member is spliced in after the opening brace when stream_options is absent, and only
// the value of stream_options is rewritten when it is present (null, or an object
// without include_usage true; its other members are kept). Of keys given twice the last
// counts, as in the parsers upstreams use.
func WithIncludeUsage(body []byte) ([]byte, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, false
	}
	open := int(dec.InputOffset()) // just after the brace
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
		// raw is the value's bytes without surrounding space, and the decoder stopped
		// right after it.
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
		return nil, false // trailing data: not one object
	}
	if !stream {
		return nil, false
	}
	if optsStart < 0 {
		out := make([]byte, 0, len(body)+len(includeUsageMember))
		out = append(append(append(out, body[:open]...), includeUsageMember...), body[open:]...)
		return out, true
	}
	var replacement []byte
	if string(opts) == "null" {
		replacement = []byte(`{"include_usage":true}`)
	} else {
		var members map[string]json.RawMessage
		if err := json.Unmarshal(opts, &members); err != nil || members == nil {
			return nil, false // not an object: the upstream will say so
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
	out := make([]byte, 0, len(body)-len(opts)+len(replacement))
	out = append(append(append(out, body[:optsStart]...), replacement...), body[optsEnd:]...)
	return out, true
}

// MaxModelBytes bounds a model name taken from a request body.
const MaxModelBytes = 256

// CleanModel keeps a model name from a request body only when it is short, valid UTF-8
// without control characters; otherwise the settlement goes without it (the response's
// model, when it names one, wins anyway).
func CleanModel(s string) string {
	if len(s) > MaxModelBytes || !utf8.ValidString(s) {
		return ""
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return ""
		}
	}
	return s
}
