package gateway

import (
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/enforcer/requestbody"
)

// An upload's model (a transcription's, an image edit's) is a field of its multipart
// form, often after the file: it is known only once the body has passed. The gateway
// streams an upload unread (isUpload), so a formSniffer reads the form's structure on
// the side, as the upstream will: the body's bytes are copied, as the transport reads
// them, into a pipe that a goroutine parses with mime/multipart, skipping every part
// but the model and an image edit's few fields. The model is then recorded for the
// settlement, which prices the usage the answer reports at it (answers of these
// endpoints do not name their model; without it the usage is priced at the fallback
// price, the catalog's highest); an image edit's size, quality and counts tell the
// images it is billed when its answer is lost (requestbody.FormImageRequest).
//
// The whole form is read, the file skipped: a form that names its model twice, two ways,
// has no model here (the usage is then priced at the fallback price), since which one
// the upstream obeys is not known and the cheaper one must not be guessed. The side copy
// never slows or fails the upload beyond the parser's pace: once the form ends, or
// turns out malformed, the parser stops and the copy with it, and a failed copy is
// dropped. It costs one goroutine and no buffer of the body's size.

// maxSniffedModel bounds the model name read from a form, maxSniffedField the other
// fields read.
const (
	maxSniffedModel = 256
	maxSniffedField = 64
)

// sniffTimeout bounds the wait for the parser once the response has ended (the upstream
// read the whole body before answering, so the parser has had all of it).
const sniffTimeout = time.Second

type formSniffer struct {
	body io.ReadCloser
	pw   *io.PipeWriter
	off  atomic.Bool
	said chan formSaid // one value, once the form has passed
}

// formSaid is what a form said: its model ("" when it had none, named two, or was
// malformed) and the fields requestbody.ImageFormFields names that it had (nil when it
// was malformed).
type formSaid struct {
	model  string
	fields map[string]string
}

// sniffForm wraps an upload's body when its content type is a multipart form with a
// boundary; else it returns nil and the body goes as it is.
func sniffForm(contentType string, body io.ReadCloser) *formSniffer {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || !strings.HasPrefix(mt, "multipart/") || params["boundary"] == "" {
		return nil
	}
	pr, pw := io.Pipe()
	s := &formSniffer{body: body, pw: pw, said: make(chan formSaid, 1)}
	go s.parse(multipart.NewReader(pr, params["boundary"]), pr)
	return s
}

// Read passes the body on, and a copy of it to the parser until the parser stops.
func (s *formSniffer) Read(p []byte) (int, error) {
	n, err := s.body.Read(p)
	if n > 0 && !s.off.Load() {
		if _, werr := s.pw.Write(p[:n]); werr != nil {
			s.off.Store(true) // the parser stopped: no more copies
		}
	}
	if err != nil {
		_ = s.pw.CloseWithError(err) // io.EOF: the parser sees the end of the form
	}
	return n, err
}

// Close closes the body and ends the parser's input.
func (s *formSniffer) Close() error {
	_ = s.pw.CloseWithError(errors.New("gateway: upload closed"))
	return s.body.Close()
}

var errSniffed = errors.New("gateway: form read")

func (s *formSniffer) parse(mr *multipart.Reader, pr *io.PipeReader) {
	model, named, ambiguous := "", false, false
	fields := map[string]string{}
	defer func() {
		if ambiguous {
			model, fields = "", nil
		}
		s.said <- formSaid{model: model, fields: fields}
		_ = pr.CloseWithError(errSniffed) // the copy stops (Read's write fails)
	}()
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			return
		}
		if err != nil {
			ambiguous = true // a malformed form: the upstream will not read it as here
			return
		}
		switch name := part.FormName(); {
		case name == "model":
			b, _ := io.ReadAll(io.LimitReader(part, maxSniffedModel))
			m := requestbody.CleanModel(strings.TrimSpace(string(b)))
			ambiguous = ambiguous || (named && m != model) // named twice, two ways
			model, named = m, true
		case slices.Contains(requestbody.ImageFormFields, name):
			b, _ := io.ReadAll(io.LimitReader(part, maxSniffedField))
			fields[name] = string(b) // the last one counts
		}
		if _, err := io.Copy(io.Discard, part); err != nil {
			ambiguous = true
			return
		}
	}
}

// Said is what the form said once the body has passed (formSaid); nothing when the
// parser did not finish within sniffTimeout. It is read once (the settlement's).
func (s *formSniffer) Said() formSaid {
	select {
	case f := <-s.said:
		return f
	case <-time.After(sniffTimeout):
		return formSaid{}
	}
}
