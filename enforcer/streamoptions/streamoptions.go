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
// is charged an estimate from its prompt and text, as any unasked stream is. Memory
// remembers the refusal for a while per upstream and model, so the next streams there go
// unasked from the start; after it the upstream is asked again, so that one that has
// learned the field is charged exactly again. Behind Envoy the enforcer cannot send a
// request again: the first stream fails as it did before, and it learns from that answer
// (so it remembers longer there: each time it asks again, a client's stream may fail).
package streamoptions

import (
	"bytes"
	"net/http"

	"github.com/tollgate-dev/tollgate/enforcer/requestbody"
)

// MaxErrorBytes is how much of an answer's body Refused reads: an error's JSON is far
// smaller, and a body longer than this is not the refusal looked for.
const MaxErrorBytes = 16 << 10

// Refused tells whether an upstream's answer refuses the stream_options of a request
// that carried the enforcer's: a 400 or 422 whose body names stream_options or
// include_usage, in any case. A refusal for another reason names neither. status is the
// answer's, contentEncoding its Content-Encoding values, and body the first
// MaxErrorBytes of its body as it came, decoded here (gzip, deflate, br: a server may
// compress its errors whatever the request offered; Databricks' gzips them).
func Refused(status int, contentEncoding []string, body []byte) bool {
	if !MayRefuse(status) {
		return false
	}
	if codings := requestbody.Codings(contentEncoding); len(codings) > 0 {
		decoded, err := requestbody.Decode(codings, body, maxDecodedErrorBytes)
		if err != nil {
			return false // not an error's JSON, or not one read here
		}
		body = decoded
	}
	// An error's body, once per refused request: a lowered copy is simpler than a
	// search ignoring case, and costs nothing that matters here.
	lower := bytes.ToLower(body)
	return bytes.Contains(lower, []byte("stream_options")) || bytes.Contains(lower, []byte("include_usage"))
}

// MayRefuse tells whether an answer of this status may refuse stream_options (400 or
// 422): only then is its body kept for Refused.
func MayRefuse(status int) bool {
	return status == http.StatusBadRequest || status == http.StatusUnprocessableEntity
}

// maxDecodedErrorBytes bounds a compressed error's body decoded (a bomb is not
// inflated further).
const maxDecodedErrorBytes = 4 * MaxErrorBytes
