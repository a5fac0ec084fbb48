package requestbody

import (
	"bytes"
	"compress/gzip"
	"errors"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

// FuzzReadFormChunked: a form read as it streams past, a byte at a time (the gateway's
// copy on the side), says what the same form read whole says (Envoy's buffered body), so
// that an upload is charged the same through either front door; its model is one
// CleanModel keeps.
func FuzzReadFormChunked(f *testing.F) {
	f.Add("--b\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper-1\r\n--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\nRIFF....\r\n--b--\r\n", "b")
	f.Add("--x\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\ngpt-image-1\r\n--x\r\nContent-Disposition: form-data; name=\"n\"\r\n\r\n2\r\n--x\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\ndall-e-2\r\n--x--", "x")
	f.Fuzz(func(t *testing.T, body, boundary string) {
		whole := ReadForm(strings.NewReader(body), boundary)
		streamed := ReadForm(iotest.OneByteReader(strings.NewReader(body)), boundary)
		half := ReadForm(iotest.HalfReader(strings.NewReader(body)), boundary)
		if !reflect.DeepEqual(whole, streamed) || !reflect.DeepEqual(whole, half) {
			t.Fatalf("form %q read whole %+v, streamed %+v, by halves %+v", body, whole, streamed, half)
		}
		if whole.Model != CleanModel(whole.Model) {
			t.Fatalf("form %q kept model %q, which CleanModel refuses", body, whole.Model)
		}
	})
}

// FuzzDecode: undoing codings, Decode never hands back more than its limit, nor holds much more of it; a
// body it decodes, encoded again as gzip, decodes to the same bytes.
func FuzzDecode(f *testing.F) {
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	w.Write(bytes.Repeat([]byte(`{"model":"gpt-4o"}`), 100))
	w.Close()
	f.Add("gzip", gz.Bytes(), uint16(4096))
	f.Add("gzip", gz.Bytes(), uint16(100))
	f.Add("deflate, br", []byte("\x78\x9c\x03\x00\x00\x00\x00\x01"), uint16(10))
	f.Add("br", []byte("\x0b\x02\x80hello\x03"), uint16(10))
	f.Fuzz(func(t *testing.T, coding string, body []byte, limit uint16) {
		codings := Codings([]string{coding})
		if len(codings) == 0 {
			return // nothing to decode: the body, already bounded by the caller, as it came
		}
		var most int64
		out, err := decode(codings, body, int64(limit), func(total int64) error {
			most = max(most, total)
			return nil
		})
		if most > 2*(int64(limit)+1)+64<<10 {
			t.Fatalf("held %d bytes decoding to a limit of %d", most, limit)
		}
		var tooLarge *http.MaxBytesError
		switch {
		case err == nil && int64(len(out)) > int64(limit):
			t.Fatalf("decoded %d bytes past the limit %d", len(out), limit)
		case err != nil && !errors.As(err, &tooLarge) && !errors.Is(err, ErrCodingCorrupt) && !errors.Is(err, ErrCodingUnsupported):
			t.Fatalf("unexpected error %v", err)
		case err != nil:
			return
		}
		var again bytes.Buffer
		w := gzip.NewWriter(&again)
		w.Write(out)
		w.Close()
		back, err := Decode([]string{"gzip"}, again.Bytes(), int64(limit))
		if err != nil || !bytes.Equal(back, out) {
			t.Fatalf("gzip round trip of %q: %q, %v", out, back, err)
		}
	})
}

// FuzzPathAsEitherFrontDoorReadsIt: ext_proc and forward auth read a path as the client
// sent it, the gateway decoded (url.PathUnescape): both find the same dot segments and
// the same model in it, so that a path refused or priced through one front door is
// refused or priced alike through the other.
func FuzzPathAsEitherFrontDoorReadsIt(f *testing.F) {
	for _, s := range []string{
		"/v1beta/models/gemini-2.5-pr%6F:generateContent", "/v1/%2e%2E/x", "/a/.%2e;x/b", "/a%5c..%5Cb",
		"/model/anthropic.claude%3Av1/converse", "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Ainference-profile%2Fus.x/invoke",
		"/v1/projects/p/locations/l/publishers/google/models/gemini%2Dpro:streamGenerateContent",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		decoded, err := url.PathUnescape(raw)
		if err != nil {
			return
		}
		if EscapedDotSegment(raw) != DotSegment(decoded) {
			t.Fatalf("dot segment of %q as sent %v, decoded (%q) %v", raw, EscapedDotSegment(raw), decoded, DotSegment(decoded))
		}
		if strings.Contains(decoded, "%") || strings.Contains(decoded, "?") {
			return // decoded again by ModelFromPath, or a query the decoded path no longer has
		}
		if !strings.Contains(raw, "/model/") && strings.Contains(decoded, "/model/") {
			return // "/model%2F{id}/invoke": ext_proc names no Bedrock model (the fallback price, the safe side)
		}
		if a, b := ModelFromPath(raw), ModelFromPath(decoded); a != b {
			t.Fatalf("model of %q as sent %q, decoded (%q) %q", raw, a, decoded, b)
		}
	})
}
