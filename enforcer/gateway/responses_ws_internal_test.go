package gateway

import (
	"fmt"
	"testing"
)

// requestEvent reads a response.create's "generate": false as a warmup, and nothing
// else; a "generate" of another type leaves the event a request, checked (a value that
// made it unreadable would let it pass unchecked).
func TestRequestEventWarmup(t *testing.T) {
	for msg, want := range map[string]string{
		`{"type":"response.create","generate":false}`:              "response.create true",
		`{"type":"response.create","generate":true}`:               "response.create false",
		`{"type":"response.create"}`:                               "response.create false",
		`{"type":"response.create","generate":null}`:               "response.create false",
		`{"type":"response.steer","generate":false}`:               "response.steer false",
		`{"type":"response.cancel","generate":false}`:              " false",
		`{"type":"response.create","generate":"false"}`:            "response.create false", // a string: still a create, checked
		`{"type":"response.create","metadata":{"generate":false}}`: "response.create false",
		`{"type":"response.create", "generate" : false }`:          "response.create true",
		// Keys read as the provider reads them, exactly: a key that differs in case is
		// another member (encoding/json took it for the same one, the last winning).
		`{"type":"response.create","Type":"session.update"}`: "response.create false",
		`{"type":"response.create","Generate":false}`:        "response.create false",
	} {
		kind, warmup := requestEvent([]byte(msg))
		if got := fmt.Sprint(kind, " ", warmup); got != want {
			t.Errorf("%s: %q, want %q", msg, got, want)
		}
	}
}
