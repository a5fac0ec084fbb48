package extproc_test

import (
	"bytes"
	"mime/multipart"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/internal/enforcertest"
	"github.com/tollgate-dev/tollgate/internal/testio"
)

// multipartForm builds an upload's form: fields in order (name/value pairs), a file
// part of 2,000 bytes where "file" is named.
func multipartForm(t *testing.T, fields ...string) (contentType, body string) {
	t.Helper()
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	for i := 0; i+1 < len(fields); i += 2 {
		if fields[i] == "file" {
			fw, err := w.CreateFormFile("file", "a.wav")
			if err != nil {
				t.Fatal(err)
			}
			fw.Write(bytes.Repeat([]byte{1}, 2000))
			continue
		}
		w.WriteField(fields[i], fields[i+1])
	}
	w.Close()
	return w.FormDataContentType(), b.String()
}

// TestExtProcNotesAnUploadsForm: a multipart upload's model, a field of its form that
// the answers of these endpoints do not name, is noted from the body Envoy buffered, as
// the gateway reads it from the form it streams past (requestbody.ReadForm): a
// transcription answered with its token usage alone is charged at its model's price, and
// an image edit whose answer is lost the images it asked for, at its model's. A form that
// names two different models names none (the fallback price, never the cheaper guess).
// Before, ext_proc read JSON alone: the form's model was never noted, and the usage was
// priced at the fallback price (the catalog's highest).
func TestExtProcNotesAnUploadsForm(t *testing.T) {
	const usage = `{"text":"Hello","usage":{"type":"tokens","input_tokens":1000,"output_tokens":100,"total_tokens":1100}}`
	for _, tc := range []struct {
		name, path string
		fields     []string
		reaped     bool // no answer seen: reaped
		model      string
		out        int64
	}{
		{name: "transcription, model after the file", path: "/v1/audio/transcriptions",
			fields: []string{"file", "", "model", "gpt-4o-transcribe"}, model: "gpt-4o-transcribe", out: 100},
		{name: "transcription, model before the file", path: "/v1/audio/transcriptions",
			fields: []string{"model", "whisper-1", "language", "fr", "file", ""}, model: "whisper-1", out: 100},
		{name: "two models: none", path: "/v1/audio/transcriptions",
			fields: []string{"model", "gpt-4o-mini-transcribe", "file", "", "model", "gpt-4o-transcribe"}, out: 100},
		{name: "image edit, its answer lost", path: "/v1/images/edits", reaped: true,
			fields: []string{"model", "gpt-image-1", "file", "", "prompt", "a gate", "size", "1024x1024", "quality", "low", "n", "2"},
			model:  "gpt-image-1", out: 2 * 272},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := enforcertest.New(t, enforcertest.Options{})
			w := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
			reqID, _ := e.Admit(t, w.Key)
			ct, body := multipartForm(t, tc.fields...)
			if resp := sendRequestBody(t, e, bodySpec{requestID: reqID, path: tc.path, body: body,
				headers: []string{"content-type", ct}}); resp.GetResponse() != nil {
				t.Fatalf("the upload was rewritten: %v", resp)
			}
			if tc.reaped {
				reapAll(t, e, reqID)
			} else {
				runStream(t, e, streamSpec{requestID: reqID, path: tc.path, contentType: "application/json", chunks: testio.Chunks(usage, 3)})
				enforcertest.WaitFor(t, "receipt", func() bool { return e.CP.Receipt(reqID) != nil })
			}
			it := e.CP.Receipt(reqID).Item
			if it.GetModel() != tc.model || it.GetOutputTokens() != tc.out {
				t.Fatalf("settled %v, want model %q and %d output tokens", it, tc.model, tc.out)
			}
		})
	}
}
