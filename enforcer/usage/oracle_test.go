package usage

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// This file is a reference implementation for the tests: it reads a whole
// body with encoding/json (and a plain line splitter for event streams) into
// the same docFields the incremental scanner fills, then runs the same
// accumulator. Comparing the two checks the scanner and the SSE reader
// against the standard library's reading of JSON.

func newDocFields(modelLimit int) *docFields {
	d := &docFields{
		typ:    capture{b: make([]byte, 0, maxSmallBytes), limit: maxSmallBytes},
		object: capture{b: make([]byte, 0, maxSmallBytes), limit: maxSmallBytes},
	}
	for i := range d.model {
		d.model[i] = capture{b: make([]byte, 0, modelLimit), limit: modelLimit}
	}
	return d
}

func newAccumulator(modelLimit int) *accumulator {
	return &accumulator{model: capture{b: make([]byte, 0, modelLimit), limit: modelLimit}}
}

var tokKeys = [...]string{
	tokPrompt:        "prompt_tokens",
	tokCompletion:    "completion_tokens",
	tokInput:         "input_tokens",
	tokOutput:        "output_tokens",
	tokCacheRead:     "cache_read_input_tokens",
	tokCacheCreation: "cache_creation_input_tokens",
}

// plainCount is the value of a JSON number that is a non-negative integer
// written without fraction or exponent and that fits int64.
func plainCount(v any) (int64, bool) {
	n, ok := v.(json.Number)
	if !ok || len(n) == 0 || n[0] == '-' {
		return 0, false
	}
	for _, c := range []byte(n) {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	i, err := strconv.ParseInt(string(n), 10, 64)
	return i, err == nil
}

func oracleUsage(v any) usageFields {
	m, ok := v.(map[string]any)
	if !ok {
		return usageFields{}
	}
	u := usageFields{obj: true}
	for t, k := range tokKeys {
		if n, ok := plainCount(m[k]); ok {
			u.tok[t], u.has = n, u.has|1<<t
		}
	}
	for _, det := range [...]struct {
		tok int
		key string
	}{{tokCachedPrompt, "prompt_tokens_details"}, {tokCachedInput, "input_tokens_details"}} {
		if d, ok := m[det.key].(map[string]any); ok {
			t := det.tok
			if n, ok := plainCount(d["cached_tokens"]); ok {
				u.tok[t], u.has = n, u.has|1<<t
			}
		}
	}
	return u
}

func oracleDoc(v any, modelLimit int) *docFields {
	d := newDocFields(modelLimit)
	m, ok := v.(map[string]any)
	if !ok {
		return d
	}
	str := func(c *capture, v any) {
		if s, ok := v.(string); ok {
			c.set(s)
		}
	}
	str(&d.typ, m["type"])
	str(&d.object, m["object"])
	str(&d.model[rootTop], m["model"])
	d.usage[rootTop] = oracleUsage(m["usage"])
	for _, root := range [...]struct {
		r   int
		key string
	}{{rootMessage, "message"}, {rootResponse, "response"}} {
		if sub, ok := m[root.key].(map[string]any); ok {
			r := root.r
			str(&d.model[r], sub["model"])
			d.usage[r] = oracleUsage(sub["usage"])
		}
	}
	return d
}

// oracleJSON is the usage of a body that json.Valid accepts, ended normally.
func oracleJSON(body []byte, lim Limits) Usage {
	lim = lim.withDefaults()
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		panic("oracleJSON: " + err.Error())
	}
	a := newAccumulator(lim.MaxModelBytes)
	a.fromJSON(oracleDoc(v, lim.MaxModelBytes), true)
	var u Usage
	a.fill(&u)
	return u
}

// oracleSSE is the usage of an event stream, ended normally.
func oracleSSE(body []byte, lim Limits) Usage {
	lim = lim.withDefaults()
	a := newAccumulator(lim.MaxModelBytes)
	a.sse = true
	var data []byte
	hasData := false
	body = bytes.TrimPrefix(body, []byte("\xef\xbb\xbf"))
	event := func() {
		if hasData {
			dec := json.NewDecoder(bytes.NewReader(data))
			dec.UseNumber()
			for {
				var v any
				if dec.Decode(&v) != nil {
					break // the end, or a malformed rest: the values before it count
				}
				a.applySSE(oracleDoc(v, lim.MaxModelBytes))
			}
		}
		data, hasData = data[:0], false
	}
	for len(body) > 0 {
		end := bytes.IndexAny(body, "\r\n")
		line, rest := body, []byte(nil)
		if end >= 0 {
			line, rest = body[:end], body[end+1:]
			if body[end] == '\r' && len(rest) > 0 && rest[0] == '\n' {
				rest = rest[1:]
			}
		}
		body = rest
		switch {
		case len(line) == 0:
			event()
		case line[0] == ':':
		default:
			name, value, _ := bytes.Cut(line, []byte(":"))
			value = bytes.TrimPrefix(value, []byte(" "))
			if string(name) == "data" {
				if hasData {
					data = append(data, '\n')
				}
				data = append(data, value...)
				hasData = true
			}
		}
	}
	event()
	var u Usage
	a.fill(&u)
	return u
}
