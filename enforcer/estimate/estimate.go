// Package estimate owns the enforcer's token estimates: the input tokens of an inference
// request from its JSON body, and the output tokens of a response from the bytes of
// output text it streamed. They are what a request is charged when the upstream did not
// report its usage (a stream cut off, or sent without usage): never a silent 0 when
// tokens flowed.
//
// # The estimator
//
// Tokens(n) = ceil(n / 4): four bytes of UTF-8 text per token, the rule of thumb the
// providers publish for English text with their byte-pair tokenizers.
//
// Input(body) = Tokens(text bytes of the request) + 3 per message + 3, where the text
// bytes are the UTF-8 bytes of every JSON string value of the body (after unescaping),
// except the values of keys that name things rather than carry text (model, role, type,
// id, name of a content part's kind, ...) and the subtrees of keys that carry binary
// payloads (image_url, url, data, file_data, input_audio, ...: a base64 image is billed
// by its pixels, not its bytes, and counting it as text would overcharge a thousandfold).
// Messages are the elements of the top-level "messages" array (OpenAI chat completions,
// Anthropic messages) or "input" array (OpenAI Responses), plus one for a top-level
// "system" or "instructions"; the per-message and priming overheads are OpenAI's
// published chat format (3 tokens per message, 3 to prime the reply). Images, audio and
// files are not estimated at all (0 tokens), so an estimate of a multimodal request is
// low.
//
// # Its error
//
// Measured against OpenAI's tokenizers, o200k_base (gpt-4o, gpt-4.1, o-series) and
// cl100k_base (gpt-4, gpt-3.5), on the samples in testdata/samples.json: English prose
// 15% to 28% high; source code and JSON 16% to 30% low; Russian prose 14% low
// (cl100k_base) to 50% high (o200k_base); Chinese prose 6% (o200k_base) to 37%
// (cl100k_base) low. So within about 30% either way for English text and code, the
// bulk of inference traffic, and up to 50% for other scripts. The subdirectory measure
// holds the test that counts the samples with a real tokenizer (a module of its own, so
// the enforcer never depends on one); TestEstimateErrorOnSamples holds the estimator to
// those bounds. Anthropic's tokenizer is not public. Every estimate is marked as one on
// its receipt (usage_estimated, cost basis "estimate").
//
// It does no I/O and keeps nothing; the package knows nothing of Envoy or settlement.
package estimate

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
)

// BytesPerToken is the estimator's bytes of UTF-8 text per token.
const BytesPerToken = 4

// Overheads of OpenAI's chat format: tokens per message, and to prime the reply.
const (
	PerMessage = 3
	Priming    = 3
)

// Tokens estimates the tokens of n bytes of UTF-8 text: ceil(n/4); 0 for n <= 0.
func Tokens(n int64) int64 {
	if n <= 0 {
		return 0
	}
	return (n + BytesPerToken - 1) / BytesPerToken
}

// Request is what the estimator read from a request body.
type Request struct {
	// Model is the top-level "model" string ("" when absent or not a string).
	Model string
	// TextBytes is the UTF-8 bytes of the text the request carries (see the package doc).
	TextBytes int64
	// Messages counts the messages (see the package doc).
	Messages int64
	// InputTokens is the estimate: Tokens(TextBytes) + PerMessage*Messages + Priming.
	InputTokens int64
	// OutputCap is the most output tokens the request asks for: the largest positive
	// whole number among the top-level max_tokens (OpenAI chat, Anthropic messages),
	// max_completion_tokens (OpenAI chat) and max_output_tokens (OpenAI Responses); 0
	// when none is given (or none is a positive whole number: the upstream refuses such a
	// request). Not an estimate: what the request itself allows (enforcer/worstcase).
	OutputCap int64
}

// maxCap bounds OutputCap: a float64 holds every whole number up to 2^53 exactly, and
// no model generates more.
const maxCap = 1 << 53

// ErrNotObject is returned for a body that is not one JSON object.
var ErrNotObject = errors.New("estimate: the body is not a JSON object")

// skipValue are keys whose string value names something rather than carrying text.
var skipValue = map[string]bool{
	"model": true, "role": true, "type": true, "id": true, "tool_call_id": true, "call_id": true,
	"media_type": true, "mime_type": true, "detail": true, "format": true, "file_id": true,
	"encoding_format": true, "service_tier": true, "reasoning_effort": true, "user": true,
	"previous_response_id": true, "tool_choice": true, "cache_control": true, "status": true,
}

// skipTree are keys whose whole value is a binary payload or a reference to one.
var skipTree = map[string]bool{
	"image_url": true, "url": true, "data": true, "file_data": true, "input_audio": true,
	"image": true, "audio": true, "source": true, "file": true, "metadata": true,
}

// Input reads a request body and estimates its input tokens. A body that is not a
// well-formed JSON object is an error (nothing is estimated from it).
func Input(body []byte) (Request, error) {
	var r Request
	dec := json.NewDecoder(bytes.NewReader(body))
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return Request{}, ErrNotObject
	}
	w := walker{dec: dec, r: &r}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return Request{}, ErrNotObject
		}
		key, _ := k.(string)
		switch key {
		case "model":
			v, err := dec.Token()
			if err != nil {
				return Request{}, ErrNotObject
			}
			if s, ok := v.(string); ok {
				r.Model = s
			} else if d, ok := v.(json.Delim); ok {
				if err := w.skip(d); err != nil {
					return Request{}, ErrNotObject
				}
			}
			continue
		case "max_tokens", "max_completion_tokens", "max_output_tokens":
			v, err := dec.Token()
			if err != nil {
				return Request{}, ErrNotObject
			}
			switch n := v.(type) {
			case float64:
				if n >= 1 && n == math.Trunc(n) {
					r.OutputCap = max(r.OutputCap, int64(min(n, maxCap)))
				}
			case json.Delim:
				if err := w.skip(n); err != nil {
					return Request{}, ErrNotObject
				}
			}
			continue
		case "messages", "input":
			if err := w.value(key, true); err != nil {
				return Request{}, ErrNotObject
			}
			continue
		case "system", "instructions":
			r.Messages++
		}
		if err := w.value(key, false); err != nil {
			return Request{}, ErrNotObject
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return Request{}, ErrNotObject
	}
	if _, err := dec.Token(); err != io.EOF {
		return Request{}, ErrNotObject // trailing data
	}
	r.InputTokens = Tokens(r.TextBytes) + PerMessage*r.Messages + Priming
	return r, nil
}

type walker struct {
	dec *json.Decoder
	r   *Request
}

// value reads the value of key, counting its text. countElements counts the elements of
// an array value as messages.
func (w *walker) value(key string, countElements bool) error {
	t, err := w.dec.Token()
	if err != nil {
		return err
	}
	switch v := t.(type) {
	case string:
		if !skipValue[key] {
			w.r.TextBytes += int64(len(v))
		}
		return nil
	case json.Delim:
		if skipTree[key] {
			return w.skip(v)
		}
		if v == '[' {
			for w.dec.More() {
				if countElements {
					w.r.Messages++
				}
				if err := w.value("", false); err != nil {
					return err
				}
			}
		} else {
			for w.dec.More() {
				k, err := w.dec.Token()
				if err != nil {
					return err
				}
				name, _ := k.(string)
				if err := w.value(name, false); err != nil {
					return err
				}
			}
		}
		_, err := w.dec.Token() // the closing delimiter
		return err
	}
	return nil // numbers, booleans and null carry no text
}

// skip reads past the rest of a compound value whose opening delimiter was read.
func (w *walker) skip(open json.Delim) error {
	if open != '{' && open != '[' {
		return nil
	}
	for depth := 1; depth > 0; {
		t, err := w.dec.Token()
		if err != nil {
			return err
		}
		if d, ok := t.(json.Delim); ok {
			if d == '{' || d == '[' {
				depth++
			} else {
				depth--
			}
		}
	}
	return nil
}
