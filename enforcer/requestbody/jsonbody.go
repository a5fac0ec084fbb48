package requestbody

import (
	"bytes"
	"net/http"
)

// BOM is the UTF-8 byte order mark, which some clients write before a JSON body.
const BOM = "\xef\xbb\xbf"

// A JSON request body is read as the upstreams that parse it read it, and charged so.
// Python's json.loads of bytes (FastAPI and Starlette: vLLM, SGLang, LiteLLM) and
// llama.cpp's server skip one leading UTF-8 BOM; RFC 8259 bounds no number (1e400 is
// well-formed, Python reads it as infinity). A body a front door read as no JSON went
// upstream unread: a chat stream not asked for its usage, no input estimated, no model
// hinted and so an unpriced model not refused. So a front door drops one leading BOM
// of a body that then opens as a JSON object, and sends the body upstream without it
// (TrimBOM); and it refuses, before anything is admitted or sent, a body of a billed
// request that opens as a JSON object and is not one well-formed JSON object
// (OpensAsObject, MalformedRefusal): NaN or Infinity, which Python reads, are no JSON,
// and a body read one way here and another upstream cannot be charged as well as can be
// known. A body that does not open as a JSON object (Google's binary protobuf, a form,
// an upload) is not JSON and is left as it is.

// TrimBOM is body without one leading UTF-8 BOM when what follows opens as a JSON
// object (OpensAsObject); body itself otherwise. It does not copy.
func TrimBOM(body []byte) []byte {
	if rest, ok := bytes.CutPrefix(body, []byte(BOM)); ok && OpensAsObject(rest) {
		return rest
	}
	return body
}

// OpensAsObject tells whether body opens as a JSON object does: '{' after any JSON
// white space.
func OpensAsObject(body []byte) bool {
	i := 0
	for i < len(body) && (body[i] == ' ' || body[i] == '\t' || body[i] == '\r' || body[i] == '\n') {
		i++
	}
	return i < len(body) && body[i] == '{'
}

// MalformedRefusal is how a front door answers a billed request's body that opens as a
// JSON object and is not one well-formed JSON object (RFC 8259, nested at most 10,000
// deep, as encoding/json reads it; estimate.Input): 400, before anything is admitted or
// sent, as a compressed body that does not decode (DecodeRefusal).
func MalformedRefusal() Refusal {
	return Refusal{http.StatusBadRequest, "service_gateway_request_body_malformed",
		"The request body opens as a JSON object but is not one well-formed JSON object (RFC 8259: no NaN, no Infinity, nothing after the object)."}
}
