package gateway

import (
	"errors"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/enforcer/requestbody"
)

// An upload's model (a transcription's, an image edit's) is a field of its multipart
// form, often after the file: it is known only once the body has passed. The gateway
// streams an upload unread (isUpload), so a formSniffer reads the form's structure on
// the side, as the upstream will: the body's bytes are copied, as the transport reads
// them, into a pipe that a goroutine reads with requestbody.ReadForm (the reading
// ext_proc does of a form Envoy buffered: both front doors charge an upload alike),
// skipping every part but the model and an image edit's few fields. The model is then
// recorded for the settlement, which prices the usage the answer reports at it (answers
// of these endpoints do not name their model; without it the usage is priced at the
// fallback price, the catalog's highest); an image edit's size, quality and counts tell
// the images it is billed when its answer is lost (requestbody.Form.Request).
//
// The whole form is read, the file skipped: a form that names its model twice, two ways,
// has no model here (the usage is then priced at the fallback price), since which one
// the upstream obeys is not known and the cheaper one must not be guessed. The side copy
// never slows or fails the upload beyond the parser's pace: once the form ends, or
// turns out malformed, the parser stops and the copy with it, and a failed copy is
// dropped. It costs one goroutine and no buffer of the body's size.

// sniffTimeout bounds the wait for the parser once the response has ended (the upstream
// read the whole body before answering, so the parser has had all of it).
const sniffTimeout = time.Second

type formSniffer struct {
	body io.ReadCloser
	pw   *io.PipeWriter
	off  atomic.Bool
	said chan requestbody.Form // one value, once the form has passed
}

// sniffForm wraps an upload's body when its content type is a multipart form with a
// boundary; else it returns nil and the body goes as it is.
func sniffForm(contentType string, body io.ReadCloser) *formSniffer {
	boundary := requestbody.FormBoundary(contentType)
	if boundary == "" {
		return nil
	}
	pr, pw := io.Pipe()
	s := &formSniffer{body: body, pw: pw, said: make(chan requestbody.Form, 1)}
	go s.parse(pr, boundary)
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

func (s *formSniffer) parse(pr *io.PipeReader, boundary string) {
	s.said <- requestbody.ReadForm(pr, boundary)
	_ = pr.CloseWithError(errSniffed) // the copy stops (Read's write fails)
}

// Said is what the form said once the body has passed; nothing when the parser did not
// finish within sniffTimeout. It is read once (the settlement's).
func (s *formSniffer) Said() requestbody.Form {
	select {
	case f := <-s.said:
		return f
	case <-time.After(sniffTimeout):
		return requestbody.Form{}
	}
}

// uploadStall bounds the silences of an upload's body once it streams upstream. The
// read before the check has its deadline (BodyTimeout); an upload is admitted on its
// first bytes and then streamed with none, since it may take long. Until 2026-12-03 a
// member's client that sent an upload's first bytes and then nothing, its connection
// kept open, held its slot and its admitted request for as long as it liked (the
// upstream waits for the rest, and the idle timer only starts with the answer): a
// handful of them answered every member 503 busy. Now every read of the body must
// bring something within BodyTimeout, the deadline renewed on each read (a slow upload
// that keeps coming is never cut); a stalled one fails the upstream request, and the
// client is answered 408 service_gateway_body_timeout (stalled).
//
// The deadline is lifted when the body ends and when the handler is done (off), and
// never touched after that: the connection belongs to net/http again once the handler
// returns, while the transport may still be in a read of the body. Left set after the
// body's end, it would end the connection under a long answer.
type uploadStall struct {
	body    io.ReadCloser
	rc      *http.ResponseController
	timeout time.Duration
	stalled atomic.Bool // a read ended at the deadline
	broken  atomic.Bool // a read found the body's framing broken (brokenFraming)

	mu  sync.Mutex
	off bool
}

func (u *uploadStall) Read(p []byte) (int, error) {
	u.mu.Lock()
	if !u.off {
		_ = u.rc.SetReadDeadline(time.Now().Add(u.timeout))
	}
	u.mu.Unlock()
	n, err := u.body.Read(p)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			u.stalled.Store(true)
		} else if err != io.EOF && brokenFraming(err) {
			u.broken.Store(true)
		}
		u.lift()
	}
	return n, err
}

func (u *uploadStall) Close() error { return u.body.Close() }

// lift takes the deadline off and leaves the connection alone from then on.
func (u *uploadStall) lift() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if !u.off {
		u.off = true
		_ = u.rc.SetReadDeadline(time.Time{})
	}
}
