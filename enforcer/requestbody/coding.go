package requestbody

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/andybalholm/brotli"
)

// A request body with a Content-Encoding (gzip, deflate, br) is decoded by the front
// doors (Decode) and goes upstream decoded, without the header: compressed, its model,
// output cap and text could not be read, so its worst case would be unknown, a chat
// stream could not be asked for its usage (WithIncludeUsage), and such a stream would be
// charged its output alone. Providers take plain JSON; few take compressed bodies.

// Errors of Decode.
var (
	ErrCodingUnsupported = errors.New("unsupported content coding")
	ErrCodingCorrupt     = errors.New("corrupt compressed body")
)

// Codings lists the codings of a request's Content-Encoding values in the order they
// were applied, lower-cased, identity left out.
func Codings(values []string) []string {
	var out []string
	for _, v := range values {
		for _, c := range strings.Split(v, ",") {
			if c = strings.ToLower(strings.TrimSpace(c)); c != "" && c != "identity" {
				out = append(out, c)
			}
		}
	}
	return out
}

// Decode undoes codings (the last applied first), each result at most limit bytes
// (else an *http.MaxBytesError: a compression bomb is not inflated further). Two
// codings at most, of gzip, deflate and br (ErrCodingUnsupported); a body that does not
// decode is ErrCodingCorrupt.
func Decode(codings []string, body []byte, limit int64) ([]byte, error) {
	return decode(codings, body, limit, nil)
}

// decode is Decode calling grow (when set) with the bytes it has decoded in all, before
// it holds more of them: an error of grow ends the decoding with that error.
func decode(codings []string, body []byte, limit int64, grow func(total int64) error) ([]byte, error) {
	if len(codings) > 2 {
		return nil, ErrCodingUnsupported // as the response side: two codings at most
	}
	var total int64
	for i := len(codings) - 1; i >= 0; i-- {
		r, err := decoderOf(codings[i], body)
		if err != nil {
			return nil, err
		}
		out := &growingBuffer{before: total, grow: grow}
		_, err = io.Copy(out, io.LimitReader(r, limit+1))
		switch {
		case err != nil && out.err != nil:
			return nil, out.err
		case err != nil:
			return nil, ErrCodingCorrupt
		case int64(out.buf.Len()) > limit:
			return nil, &http.MaxBytesError{Limit: limit}
		}
		body, total = out.buf.Bytes(), total+int64(out.buf.Len())
	}
	return body, nil
}

// growingBuffer is a buffer that asks grow before it holds more bytes. (Not a
// bytes.Buffer embedded: io.Copy would use its ReadFrom, past Write.)
type growingBuffer struct {
	buf    bytes.Buffer
	before int64 // decoded by the codings undone before this one
	grow   func(total int64) error
	err    error // grow's
}

func (b *growingBuffer) Write(p []byte) (int, error) {
	if b.grow != nil {
		if err := b.grow(b.before + int64(b.buf.Len()+len(p))); err != nil {
			b.err = err
			return 0, err
		}
	}
	return b.buf.Write(p)
}

func decoderOf(coding string, body []byte) (io.Reader, error) {
	switch coding {
	case "gzip", "x-gzip":
		r, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil, ErrCodingCorrupt
		}
		return r, nil
	case "deflate":
		// zlib-wrapped, as the standard says; some clients send raw deflate.
		if r, err := zlib.NewReader(bytes.NewReader(body)); err == nil {
			return r, nil
		}
		return flate.NewReader(bytes.NewReader(body)), nil
	case "br":
		return brotli.NewReader(bytes.NewReader(body)), nil
	}
	return nil, ErrCodingUnsupported
}

// Refusal is how a front door answers a compressed body Decode could not read, before
// it goes upstream: the gateway before admission, ext_proc after it (its request then
// settled at 0). A body that is not read cannot be estimated, nor a chat stream asked
// for its usage, so it is never sent as it came.
type Refusal struct {
	Status        int
	Code, Message string
}

// DecodeRefusal is the answer to Decode's error err for a body of codings that may
// decode to limit bytes: 415 for a coding it does not read, 400 for a corrupt body,
// 413 past the limit.
func DecodeRefusal(err error, codings []string, limit int64) Refusal {
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return Refusal{http.StatusRequestEntityTooLarge, "service_gateway_body_too_large",
			"The request body exceeds " + strconv.FormatInt(limit, 10) + " bytes."}
	case errors.Is(err, ErrCodingUnsupported):
		return Refusal{http.StatusUnsupportedMediaType, "service_gateway_request_encoding_unsupported",
			"The request body's Content-Encoding (" + strings.Join(codings, ", ") + ") is not one the gateway reads: send it uncompressed, or as gzip, deflate or br."}
	}
	return Refusal{http.StatusBadRequest, "service_gateway_request_body_corrupt",
		"The request body is not valid " + strings.Join(codings, ", ") + " data."}
}
