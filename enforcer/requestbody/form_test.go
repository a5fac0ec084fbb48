package requestbody_test

import (
	"bytes"
	"mime/multipart"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/requestbody"
)

// TestReadForm: a form's model is found wherever it sits, its file parts skipped (a
// model-like text inside the file is not taken for it); two different models, or a
// malformed form, give none; an image edit's fields give its images' output tokens, on
// its path only. Both front doors read a form so (the gateway a copy of the upload,
// ext_proc the body Envoy buffered).
func TestReadForm(t *testing.T) {
	decoy := []byte("Content-Disposition: form-data; name=\"model\"\r\n\r\ngpt-4o-mini\r\n")
	build := func(fields ...string) (string, string) {
		var b bytes.Buffer
		w := multipart.NewWriter(&b)
		for i := 0; i+1 < len(fields); i += 2 {
			if fields[i] == "file" {
				fw, _ := w.CreateFormFile("file", "a.png")
				fw.Write(append(bytes.Repeat([]byte{7}, 5000), decoy...))
				continue
			}
			w.WriteField(fields[i], fields[i+1])
		}
		w.Close()
		return w.FormDataContentType(), b.String()
	}
	for _, tc := range []struct {
		name, path string
		fields     []string
		model      string
		images     int64
	}{
		{"model after the file", "/v1/audio/transcriptions", []string{"file", "", "model", "gpt-4o-transcribe"}, "gpt-4o-transcribe", 0},
		{"model trimmed", "/v1/audio/transcriptions", []string{"model", " whisper-1 ", "file", ""}, "whisper-1", 0},
		{"no model", "/v1/audio/transcriptions", []string{"file", ""}, "", 0},
		// Longer than a body's model may be (CleanModel): none, not its first bytes, which
		// name a model the client never sent.
		{"model too long", "/v1/audio/transcriptions", []string{"model", "whisper-1" + strings.Repeat("x", requestbody.MaxModelBytes), "file", ""}, "", 0},
		{"the same model twice", "/v1/audio/transcriptions", []string{"model", "whisper-1", "file", "", "model", "whisper-1"}, "whisper-1", 0},
		{"two models: none", "/v1/audio/transcriptions", []string{"model", "gpt-4o-mini-transcribe", "file", "", "model", "gpt-4o-transcribe"}, "", 0},
		{"image edit", "/v1/images/edits", []string{"model", "gpt-image-1", "file", "", "size", "1024x1024", "quality", "low", "n", "1", "n", "2"}, "gpt-image-1", 2 * 272},
		{"image edit of two models: nothing", "/v1/images/edits", []string{"model", "gpt-image-1", "file", "", "model", "gpt-image-2", "n", "2"}, "", 0},
		{"image fields elsewhere: no images", "/v1/audio/transcriptions", []string{"model", "gpt-image-1", "file", "", "size", "1024x1024", "n", "2"}, "gpt-image-1", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ct, body := build(tc.fields...)
			req := requestbody.ReadForm(strings.NewReader(body), requestbody.FormBoundary(ct)).Request(tc.path)
			if req.Model != tc.model || req.ImageOutputTokens != tc.images {
				t.Fatalf("%+v, want model %q and %d image tokens", req, tc.model, tc.images)
			}
		})
	}
	if f := requestbody.ReadForm(strings.NewReader("--b\r\nnot a part header\r\n\r\nx"), "b"); f.Model != "" || f.Fields != nil {
		t.Fatalf("%+v from a malformed form", f)
	}
	for _, ct := range []string{"audio/wav", "multipart/form-data", "application/json", "multipart/form-data; boundary="} {
		if b := requestbody.FormBoundary(ct); b != "" {
			t.Errorf("%q: boundary %q", ct, b)
		}
	}
}
