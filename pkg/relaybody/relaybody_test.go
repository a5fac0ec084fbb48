package relaybody_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/testio"
	"github.com/tollgate-dev/tollgate/pkg/relaybody"
)

// Request.Write is the transport's own writer, the one that looks past a body's end.
func TestARequestBodyEndsAtItsLength(t *testing.T) {
	const body = "a body of known length"
	send := func(b io.ReadCloser) (string, error) {
		r, _ := http.NewRequest("POST", "http://upstream.test/v1/audio/transcriptions", nil)
		r.Body, r.ContentLength = b, int64(len(body))
		var sent strings.Builder
		err := r.Write(&sent)
		_, got, _ := strings.Cut(sent.String(), "\r\n\r\n")
		return got, err
	}
	// The premise: net/http reads past the end of a body of known length.
	// (Its error, net/http's requestBodyReadError, does not unwrap: compared by text.)
	if _, err := send(testio.NewServerBody(body)); err == nil || err.Error() != http.ErrBodyReadAfterClose.Error() {
		t.Fatalf("the server's body sent as it is: %v; net/http no longer reads past a body's length, and EndAtLength may go", err)
	}
	under := testio.NewServerBody(body)
	got, err := send(relaybody.EndAtLength(under, int64(len(body))))
	if err != nil || got != body {
		t.Fatalf("ended at its length: sent %q, %v", got, err)
	}
	if !under.Closed {
		t.Fatal("the body under it was not closed when the transport was done with it")
	}
}

// A body of unknown length (chunked) or none is returned as it is.
func TestAnUnknownLengthLeavesTheBodyAlone(t *testing.T) {
	b := io.NopCloser(strings.NewReader("chunked"))
	if got := relaybody.EndAtLength(b, -1); got != b {
		t.Fatalf("a chunked body was wrapped: %T", got)
	}
	if got := relaybody.EndAtLength(nil, 5); got != nil {
		t.Fatalf("no body became %T", got)
	}
}
