package requestbody

import (
	"io"
	"mime"
	"mime/multipart"
	"slices"
	"strings"

	"github.com/tollgate-dev/tollgate/enforcer/estimate"
)

// An upload's model (a transcription's, an image edit's) is a field of its multipart
// form, often after the file, and the answers of these endpoints name no model: without
// it their usage is priced at the fallback price, the catalog's highest. Every front door
// reads the form the same way (ReadForm), so that an upload is charged the same through
// the gateway (which reads a copy of the form on the side as it streams past) and through
// Envoy (whose request-body filter has it whole): the file parts skipped, the model kept
// only when the form names exactly one, an image edit's few fields (ImageFormFields)
// kept for the images it is billed when its answer is lost (FormImageRequest).

// Bounds of what a form's fields give: the model name, each other field read.
const (
	maxFormModel = MaxModelBytes
	maxFormField = 64
)

// Form is what a multipart form said: its model ("" when it had none, named two
// different ones, or was malformed: which one the upstream obeys is not known, and the
// cheaper must not be guessed) and the fields of ImageFormFields that it had (nil when it
// was malformed or named two models).
type Form struct {
	Model  string
	Fields map[string]string
}

// FormBoundary is the boundary of contentType when it is a multipart type that has one,
// else "" (the body is no form to read).
func FormBoundary(contentType string) string {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || !strings.HasPrefix(mt, "multipart/") {
		return ""
	}
	return params["boundary"]
}

// ReadForm reads the multipart form in r, whose boundary is boundary, to its end (or
// until it turns out malformed), skipping every part but the model and ImageFormFields;
// the last of a field named twice counts. It never fails: a malformed form says nothing
// (Form{}). r is read no further than the form's end.
func ReadForm(r io.Reader, boundary string) Form {
	mr := multipart.NewReader(r, boundary)
	model, named := "", false
	fields := map[string]string{}
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			return Form{Model: model, Fields: fields}
		}
		if err != nil {
			return Form{} // malformed: the upstream will not read it as here
		}
		switch name := part.FormName(); {
		case name == "model":
			// A byte more than a model may have: a longer one names none (as a body's,
			// CleanModel), never its first bytes, a model the client did not send.
			b, _ := io.ReadAll(io.LimitReader(part, maxFormModel+1))
			m := ""
			if len(b) <= maxFormModel {
				m = CleanModel(strings.TrimSpace(string(b)))
			}
			if named && m != model {
				return Form{} // named twice, two ways
			}
			model, named = m, true
		case slices.Contains(ImageFormFields, name):
			b, _ := io.ReadAll(io.LimitReader(part, maxFormField))
			fields[name] = string(b)
		}
		if _, err := io.Copy(io.Discard, part); err != nil {
			return Form{}
		}
	}
}

// Request is what a front door notes of a request on path whose body is the form f, for
// its settlement: the form's model, and for an image edit (IsImageEdit) the output its
// images are billed (FormImageRequest; 0 for a model that is no GPT Image model or a
// field does not read).
func (f Form) Request(path string) estimate.Request {
	req := estimate.Request{Model: f.Model}
	if IsImageEdit(path) && f.Fields != nil {
		if img, ok := FormImageRequest(f.Fields); ok {
			req.ImageOutputTokens = img.OutputTokens(f.Model)
		}
	}
	return req
}
