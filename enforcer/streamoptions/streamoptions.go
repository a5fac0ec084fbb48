// Package streamoptions learns which upstreams refuse the stream_options the enforcer
// adds to OpenAI-shaped streams (requestbody.AskStreamUsage), so that a program that
// runs against such an upstream runs through the enforcer too.
//
// The enforcer asks every OpenAI chat (and legacy completion) stream for its usage, which
// such a stream reports only when asked. The known upstreams that refuse the field are
// left unasked by rule (requestbody.UsageUnasked, AzureVersionWithoutStreamOptions), but
// OpenAI-compatible servers are many, and some answer a body with stream_options 400 or
// 422 where the client's own body, without it, runs: an older Groq ("property
// 'stream_options' is unsupported"), an OpenAI-compatible front of Amazon Bedrock
// ("extraneous key [include_usage] is not permitted"), a relay in front of an upstream
// that does not know it ("Unknown parameter: 'stream_options'"), a strict schema ("Extra inputs are not
// permitted", naming the field in its location). Asked, every stream of a program on
// such an upstream failed through the enforcer.
//
// Refused tells such an answer from others: a 400 or 422 whose body names stream_options
// or include_usage. The gateway, having seen one to a stream it asked, sends the client's
// own body again at once (nothing was generated, so nothing was billed) and the stream
// is charged an estimate from its prompt and text, as any unasked stream is. The words
// alone are not trusted, since an upstream may quote the client: the gateway learns the
// refusal only when the client's own body is answered 2xx, and ext_proc, which cannot
// send it, only from a request that could not have been quoted so (MayQuote), and from an
// answer that does not name the field only by quoting that request (RefusedByName). Memory
// remembers the refusal for a while per upstream and model, so the next streams there go
// unasked from the start; after it the upstream is asked again, so that one that has
// learned the field is charged exactly again. Behind Envoy the enforcer cannot send a
// request again: the first stream fails as it did before, and it learns from that answer
// (so it remembers longer there: each time it asks again, a client's stream may fail).
package streamoptions

import (
	"bytes"
	"encoding/hex"
	"net/http"

	"github.com/tollgate-dev/tollgate/enforcer/requestbody"
)

// MaxErrorBytes is how much of an answer's body Refused reads: an error's JSON is far
// smaller, and a body longer than this is not the refusal looked for.
const MaxErrorBytes = 16 << 10

// Refused tells whether an upstream's answer refuses the stream_options of a request
// that carried the enforcer's: a 400 or 422 whose body names stream_options or
// include_usage, its ASCII letters in any case. A refusal for another reason names
// neither. status is the answer's, contentEncoding its Content-Encoding values, and body
// the first MaxErrorBytes of its body as it came, decoded here (gzip, deflate, br: a
// server may compress its errors whatever the request offered; Databricks' gzips them).
func Refused(status int, contentEncoding []string, body []byte) bool {
	lower, ok := refusalText(status, contentEncoding, body)
	return ok && (bytes.Contains(lower, []byte("stream_options")) || bytes.Contains(lower, []byte("include_usage")))
}

// RefusedByName is Refused of an answer that names the field itself, not only by quoting
// it with the value the enforcer gave it ("stream_options": {"include_usage": true}, as
// JSON or as a Python dict): an upstream that quotes the request in its errors names the
// field so for any error a client chooses to make. FastAPI's default 422 lists each
// error's input, and a missing field's input is the whole body: a client's stream
// without its messages was answered {"detail":[{"type":"missing","loc":["body",
// "messages"],...,"input":{...,"stream_options":{"include_usage":true}}}]}, and behind
// Envoy, which cannot send the client's own body to prove a refusal, that taught the
// enforcer that the upstream refuses the field: every member's streams of that model went
// unasked for a day, on every replica. A refusal by name ("Unknown parameter:
// 'stream_options'", "extraneous key [include_usage]", a strict schema's
// "loc":["body","stream_options"]) names it otherwise too.
func RefusedByName(status int, contentEncoding []string, body []byte) bool {
	lower, ok := refusalText(status, contentEncoding, body)
	return ok && (namedNotQuoted(lower, "stream_options", "{") || namedNotQuoted(lower, "include_usage", "true"))
}

// refusalText is an answer's body, decoded and lowered, when its status may refuse the
// field (MayRefuse) and its coding is read here; ok false otherwise.
func refusalText(status int, contentEncoding []string, body []byte) (lower []byte, ok bool) {
	if !MayRefuse(status) {
		return nil, false
	}
	if codings := requestbody.Codings(contentEncoding); len(codings) > 0 {
		decoded, err := requestbody.Decode(codings, body, maxDecodedErrorBytes)
		if err != nil {
			return nil, false // not an error's JSON, or not one read here
		}
		body = decoded
	}
	// An error's body, once per refused request: a lowered copy is simpler than a
	// search ignoring case, and costs nothing that matters here. ASCII letters only, as
	// MayQuote folds them: bytes.ToLower folds by Unicode, and U+0130 (İ) lowers to an
	// ASCII i, so an upstream quoting a client's "stream_optİons", which MayQuote does
	// not take for the word, read as a refusal of the field by name.
	return asciiLower(body), true
}

// asciiLower is a copy of b with its ASCII capitals lowered, every other byte as it was.
func asciiLower(b []byte) []byte {
	lower := make([]byte, len(b))
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		lower[i] = c
	}
	return lower
}

// namedNotQuoted tells whether word is in lower somewhere other than as a key quoted with
// value, the value the enforcer writes (a key's closing quotes, ":" or "=", then value,
// spaces allowed between).
func namedNotQuoted(lower []byte, word, value string) bool {
	for i := 0; ; {
		k := bytes.Index(lower[i:], []byte(word))
		if k < 0 {
			return false
		}
		i += k + len(word)
		if !quotedWithValue(lower[i:], value) {
			return true
		}
	}
}

// quotedWithValue tells whether what follows a key is its value: closing quotes (escaped
// in a JSON string, or not), ":" or "=" (or "=>"), then value.
func quotedWithValue(after []byte, value string) bool {
	after = bytes.TrimLeft(after, "\\\"'`")
	after = bytes.TrimLeft(after, " \t\r\n")
	if len(after) == 0 || (after[0] != ':' && after[0] != '=') {
		return false
	}
	after = bytes.TrimPrefix(after[1:], []byte(">"))
	return bytes.HasPrefix(bytes.TrimLeft(after, " \t\r\n"), []byte(value))
}

// MayRefuse tells whether an answer of this status may refuse stream_options (400 or
// 422): only then is its body kept for Refused.
func MayRefuse(status int) bool {
	return status == http.StatusBadRequest || status == http.StatusUnprocessableEntity
}

// maxDecodedErrorBytes bounds a compressed error's body decoded (a bomb is not
// inflated further).
const maxDecodedErrorBytes = 4 * MaxErrorBytes

// MayQuote tells whether what a client sent (a request's body, or its path and query
// decoded) could make an upstream's answer name stream_options or include_usage by
// quoting it: either word in it, in any case, or a letter or underscore written as a
// JSON \u escape (which the upstream decodes before it quotes). A refusal is learned from
// an answer behind Envoy, where the client's own body cannot be sent to prove it, only
// when MayQuote is false for all of it: else the words may be the client's own, quoted (an
// invalid value "stream_options" in a message's role), and a refusal learned from them
// would leave every member's streams of that model unasked, charged an estimate that
// misses what a stream does not show (a reasoning model's hidden reasoning).
func MayQuote(b []byte) bool {
	for i := 0; i < len(b); {
		k := bytes.IndexByte(b[i:], '_')
		if k < 0 {
			break
		}
		k += i
		if wordAround(b, k, "stream_options", 6) || wordAround(b, k, "include_usage", 7) {
			return true
		}
		i = k + 1
	}
	for i := 0; i < len(b); {
		k := bytes.Index(b[i:], []byte(`\u`))
		if k < 0 {
			break
		}
		k += i
		if k+6 <= len(b) {
			var c [2]byte // the escape's code point, \u00XX for a letter
			if _, err := hex.Decode(c[:], b[k+2:k+6]); err == nil && c[0] == 0 && isWordByte(c[1]) {
				return true
			}
		}
		i = k + 2
	}
	return false
}

// wordAround tells whether word, whose underscore is at index under in it, is in b
// around the underscore at at, in any case (ASCII: the words are lower-case letters and
// one underscore). Compared here, not with bytes.EqualFold, whose Unicode folding made
// MayQuote four times slower on a body dense with underscores.
func wordAround(b []byte, at int, word string, under int) bool {
	from := at - under
	if from < 0 || from+len(word) > len(b) {
		return false
	}
	for i := range len(word) {
		if c := b[from+i]; c != word[i] && c|0x20 != word[i] {
			return false
		}
	}
	return true
}

// isWordByte: an ASCII letter or underscore, what the two words are written with.
func isWordByte(r byte) bool {
	return r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z')
}
