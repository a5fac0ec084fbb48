package requestbody

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/tollgate-dev/tollgate/enforcer/internal/jsonscan"
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
// (ReadAsObject, MalformedRefusal): NaN or Infinity, which Python reads, are no JSON,
// nor is a body in UTF-16 or UTF-32, which Python reads too (OpensAsWideObject),
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

// ReadAsObject tells whether an upstream in Python may read body as a JSON object: it
// opens as one in UTF-8 (OpensAsObject), or in UTF-16 or UTF-32 (OpensAsWideObject). A
// body that does and is not one well-formed JSON object in UTF-8 is refused
// (MalformedRefusal).
func ReadAsObject(body []byte) bool { return OpensAsObject(body) || OpensAsWideObject(body) }

// OpensAsWideObject tells whether body, read in the encoding Python's json.loads finds
// for bytes, opens as a JSON object and that encoding is UTF-16 or UTF-32: a byte order
// mark of either, else the NULs of its first bytes (00 xx: UTF-16BE, 00 00: UTF-32BE,
// xx 00 00 00: UTF-32LE, xx 00: UTF-16LE). FastAPI's upstreams (vLLM, SGLang, LiteLLM)
// read a body so and run it; here it is no JSON (RFC 8259: UTF-8), so unrefused it went
// upstream unread: no model checked, no input estimated, no stream asked for its usage.
// Binary data that opens with NULs (an MP4's box, raw PCM) is not taken for one: the
// text must open and close as an object.
func OpensAsWideObject(body []byte) bool {
	size, big, skip := wideEncoding(body)
	if size == 0 || (len(body)-skip)%size != 0 { // Python refuses a cut unit
		return false
	}
	// Only the units at either end are read, in place: a decoder (golang.org/x/text's
	// utf16, utf32) would copy the whole body, and every upload whose bytes open with a
	// NUL (a 25 MB MP4) comes here.
	unit := func(i int) uint32 {
		var c uint32
		for j := range size {
			k := i + j
			if !big {
				k = i + size - 1 - j
			}
			c = c<<8 | uint32(body[k])
		}
		return c
	}
	// The first unit that is no white space, from the start or from the end.
	first := func(from, step int) uint32 {
		for i := from; i >= skip && i+size <= len(body); i += step {
			switch c := unit(i); c {
			case ' ', '\t', '\r', '\n':
			default:
				return c
			}
		}
		return 0
	}
	// Opening as an object and closing as one: audio or other binary data whose first
	// bytes happen to read so (raw PCM opening 00 7B) is not taken for JSON.
	return first(skip, size) == '{' && first(len(body)-size, -size) == '}'
}

// wideEncoding is the encoding Python's json.detect_encoding finds for body when it is
// UTF-16 or UTF-32: its unit's size (0 for any other), whether it is big-endian, and the
// bytes of its byte order mark.
func wideEncoding(b []byte) (size int, big bool, skip int) {
	switch {
	case bytes.HasPrefix(b, []byte{0x00, 0x00, 0xfe, 0xff}):
		return 4, true, 4
	case bytes.HasPrefix(b, []byte{0xff, 0xfe, 0x00, 0x00}):
		return 4, false, 4
	case bytes.HasPrefix(b, []byte{0xfe, 0xff}):
		return 2, true, 2
	case bytes.HasPrefix(b, []byte{0xff, 0xfe}):
		return 2, false, 2
	case bytes.HasPrefix(b, []byte(BOM)):
		return 0, false, 0
	case len(b) >= 4 && b[0] == 0:
		if b[1] != 0 {
			return 2, true, 0
		}
		return 4, true, 0
	case len(b) >= 4 && b[1] == 0:
		if b[2] != 0 || b[3] != 0 {
			return 2, false, 0
		}
		return 4, false, 0
	case len(b) == 2 && b[0] == 0:
		return 2, true, 0
	case len(b) == 2 && b[1] == 0:
		return 2, false, 0
	}
	return 0, false, 0
}

// MalformedRefusal is how a front door answers a billed request's body that opens as a
// JSON object and is not one well-formed JSON object in UTF-8 (RFC 8259, nested at most
// 10,000 deep, as encoding/json reads it; estimate.Input; ReadAsObject): 400, before
// anything is admitted or sent, as a compressed body that does not decode
// (DecodeRefusal).
func MalformedRefusal() Refusal {
	return Refusal{http.StatusBadRequest, "service_gateway_request_body_malformed",
		"The request body opens as a JSON object but is not one well-formed JSON object (RFC 8259: UTF-8, no NaN, no Infinity, nothing after the object)."}
}

// UnmarshalExact decodes the members keys of a JSON object body into v (a struct whose
// fields are those members) as the upstreams read them: a key names a member only when it
// is the member's name exactly. encoding/json also takes a key that differs in case, or
// by a Unicode fold ("N" for "n", "Max_Uses" for "max_uses", "ſize" for "size"), for
// the field, the last of the two winning, where Python's json and pydantic, JavaScript,
// serde and nlohmann read only the exact key and a provider runs that one (or refuses
// the other): a front door that read the folded key would reserve and charge by a count
// the provider never used. So the top level's members keys are taken by their exact
// names (the last of a key given twice, as everywhere), the rest of the body skipped
// unread, and within them every member whose key is not lower-case ASCII (the readers'
// fields are all named so) is dropped, at every level, before they are decoded. A body
// that is not one well-formed JSON object reads as json.Unmarshal reads it (an error,
// or null's nothing).
func UnmarshalExact(body []byte, v any, keys ...string) error {
	if !jsonscan.WellFormed(body) || body[jsonscan.SkipSpace(body, 0)] != '{' {
		return json.Unmarshal(body, v)
	}
	values := make([][]byte, len(keys))
	eachTopLevel(body, func(key, value []byte) {
		for n, k := range keys {
			if jsonscan.KeyIs(key, k) {
				values[n] = value[:jsonscan.SkipValue(value, 0)]
			}
		}
	})
	sub := []byte{'{'}
	for n, k := range keys {
		if values[n] == nil {
			continue
		}
		if len(sub) > 1 {
			sub = append(sub, ',')
		}
		sub = append(append(append(append(sub, '"'), k...), '"', ':'), values[n]...)
	}
	sub = append(sub, '}')
	if !hasFoldedKeyIn(sub) {
		return json.Unmarshal(sub, v)
	}
	d := json.NewDecoder(bytes.NewReader(sub))
	d.UseNumber()
	var tree any
	if err := d.Decode(&tree); err != nil {
		return err
	}
	b, err := json.Marshal(dropFoldedKeys(tree))
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// exactKey tells whether a member's key can name a request field exactly: lower-case
// ASCII letters, digits and '_' alone.
func exactKey[T string | []byte](k T) bool {
	for i := 0; i < len(k); i++ {
		if c := k[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// hasFoldedKeyIn tells whether a well-formed JSON body has a member whose key is not
// exactKey, by a walk that allocates nothing but an escaped key's decoding: in
// well-formed JSON a string followed by a colon is a key.
func hasFoldedKeyIn(b []byte) bool {
	for i := 0; i < len(b); {
		if b[i] != '"' {
			i++
			continue
		}
		end := jsonscan.SkipString(b, i)
		if j := jsonscan.SkipSpace(b, end); j < len(b) && b[j] == ':' {
			key := b[i+1 : end-1]
			if bytes.IndexByte(key, '\\') >= 0 {
				key = []byte(jsonscan.DecodeString(b[i:end]))
			}
			if !exactKey(key) {
				return true
			}
		}
		i = end
	}
	return false
}

// dropFoldedKeys is v without the members whose keys are not exactKey, at every level.
func dropFoldedKeys(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			if !exactKey(k) {
				delete(t, k)
				continue
			}
			t[k] = dropFoldedKeys(e)
		}
	case []any:
		for i, e := range t {
			t[i] = dropFoldedKeys(e)
		}
	}
	return v
}
