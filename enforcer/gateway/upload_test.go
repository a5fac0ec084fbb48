package gateway

import (
	"bytes"
	"io"
	"maps"
	"mime/multipart"
	"runtime"
	"strings"
	"testing"
	"time"
)

// form builds a multipart form: fields in order, a file of size bytes where "file" is
// named.
func form(t *testing.T, fileContent []byte, fields ...string) (string, []byte) {
	t.Helper()
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	for i := 0; i+1 < len(fields); i += 2 {
		if fields[i] == "file" {
			fw, err := w.CreateFormFile("file", "toll.wav")
			if err != nil {
				t.Fatal(err)
			}
			fw.Write(fileContent)
			continue
		}
		w.WriteField(fields[i], fields[i+1])
	}
	w.Close()
	return w.FormDataContentType(), b.Bytes()
}

// The upload passes byte for byte, read in small pieces as a transport reads it, and the
// form's model is found wherever it sits; a model-like text inside the file is not taken
// for it.
func TestFormSnifferFindsTheModel(t *testing.T) {
	decoy := []byte("Content-Disposition: form-data; name=\"model\"\r\n\r\ngpt-4o-mini\r\n")
	file := append(bytes.Repeat([]byte{0, 1, 2, 3}, 300_000), decoy...)
	for _, tc := range []struct {
		name   string
		fields []string
		want   string
	}{
		{"model after the file", []string{"file", "", "model", "gpt-4o-transcribe"}, "gpt-4o-transcribe"},
		{"model before the file", []string{"model", "gpt-4o-mini-transcribe", "file", ""}, "gpt-4o-mini-transcribe"},
		{"among other fields", []string{"language", "fr", "file", "", "response_format", "json", "model", " whisper-1 "}, "whisper-1"},
		{"no model", []string{"file", ""}, ""},
		{"the same model twice", []string{"model", "gpt-4o-transcribe", "file", "", "model", "gpt-4o-transcribe"}, "gpt-4o-transcribe"},
		{"two models: neither, not the cheaper", []string{"model", "gpt-4o-mini-transcribe", "file", "", "model", "gpt-4o-transcribe"}, ""},
		{"a model name with a control character", []string{"model", "gpt\x01x", "file", ""}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ct, body := form(t, file, tc.fields...)
			s := sniffForm(ct, io.NopCloser(bytes.NewReader(body)))
			if s == nil {
				t.Fatal("a multipart form was not sniffed")
			}
			var got bytes.Buffer
			buf := make([]byte, 1000)
			for {
				n, err := s.Read(buf)
				got.Write(buf[:n])
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			s.Close()
			if !bytes.Equal(got.Bytes(), body) {
				t.Fatalf("the upload changed: %d bytes, want %d", got.Len(), len(body))
			}
			if m := s.Said().Model; m != tc.want {
				t.Fatalf("model %q, want %q", m, tc.want)
			}
		})
	}
}

// An image edit's fields (size, quality, n, partial_images) are read wherever they sit,
// the last of a repeated one counting, and cut at 64 bytes; others are not
// kept.
func TestFormSnifferReadsAnImageEditsFields(t *testing.T) {
	ct, body := form(t, bytes.Repeat([]byte{9}, 200_000), "model", "gpt-image-1", "n", "1", "file", "",
		"prompt", "a gate", "size", "1024x1024", "quality", "low", "n", "2", "partial_images", strings.Repeat("7", 100))
	s := sniffForm(ct, io.NopCloser(bytes.NewReader(body)))
	if _, err := io.Copy(io.Discard, s); err != nil {
		t.Fatal(err)
	}
	s.Close()
	f := s.Said()
	want := map[string]string{"n": "2", "size": "1024x1024", "quality": "low", "partial_images": strings.Repeat("7", 64)}
	if f.Model != "gpt-image-1" || !maps.Equal(f.Fields, want) {
		t.Fatalf("%+v, want the model and %v", f, want)
	}
}

// A body that is not a form with a boundary is not sniffed; a malformed form passes
// intact with no model; an upload the transport stops reading early (the upstream
// answered before the end) ends the parser when it is closed.
func TestFormSnifferNeverHoldsTheUploadBack(t *testing.T) {
	for _, ct := range []string{"audio/wav", "multipart/form-data", "application/json", "multipart/form-data; boundary="} {
		if sniffForm(ct, io.NopCloser(strings.NewReader("x"))) != nil {
			t.Errorf("%q sniffed", ct)
		}
	}
	body := []byte("--b\r\nnot a part header at all\r\n\r\n" + strings.Repeat("z", 100_000))
	s := sniffForm("multipart/form-data; boundary=b", io.NopCloser(bytes.NewReader(body)))
	got, err := io.ReadAll(s)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("a malformed form: %d bytes, %v", len(got), err)
	}
	if f := s.Said(); f.Model != "" || f.Fields != nil {
		t.Fatalf("%+v from a malformed form", f)
	}

	before := runtime.NumGoroutine()
	ct, upload := form(t, bytes.Repeat([]byte("a"), 1<<20), "file", "", "model", "m")
	s = sniffForm(ct, io.NopCloser(bytes.NewReader(upload)))
	buf := make([]byte, 4096)
	if _, err := s.Read(buf); err != nil {
		t.Fatal(err)
	}
	s.Close()
	start := time.Now()
	if m := s.Said().Model; m != "" || time.Since(start) > sniffTimeout/2 {
		t.Fatalf("an upload cut short: model %q after %v", m, time.Since(start))
	}
	for deadline := time.Now().Add(2 * time.Second); runtime.NumGoroutine() > before; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines, %d before: the parser outlived its upload", runtime.NumGoroutine(), before)
		}
	}
}
