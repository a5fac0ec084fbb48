// Package testio holds the small I/O helpers several packages' tests share: a log
// destination a test may read while a program writes it, a body cut into the arbitrary
// pieces a stream arrives in, a request body its server has closed, one request sent and
// its answer read whole, a free loopback address, the path of a third-party tool, a
// browser app's calls in the real Chromium, the process's resident set, and an upstream that
// switches protocols (h2c, WebSocket) with a client that upgrades to h2c. Tests only;
// nothing in a program imports it.
package testio

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// SyncBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Chunks cuts s into n pieces of about the same size, wherever they fall: a stream
// arrives in arbitrary pieces, not in events.
func Chunks(s string, n int) [][]byte {
	var out [][]byte
	step := (len(s) + n - 1) / n
	for i := 0; i < len(s); i += step {
		out = append(out, []byte(s[i:min(i+step, len(s))]))
	}
	return out
}

// LookTool is the path of a third-party program a test runs (caddy, nginx...). Without
// it the test is skipped, saying how to install it, except in CI (CI=true), whose
// .ci/run installs it: there its absence fails the test.
func LookTool(t testing.TB, name, install string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not on PATH (CI=true: .ci/run installs it)", name)
		}
		t.Skipf("%s is not on PATH; %s", name, install)
	}
	return path
}

// ResidentBytes is this process's resident set (VmRSS of /proc/self/status), 0 where it
// cannot be read.
func ResidentBytes() int64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(raw)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// ServerBody is a request body as an HTTP/1.x server hands it to a handler: its bytes,
// and then, once they are read to their end, consumed and closed by the server (as when
// the handler's answer begins), so that every later read fails as net/http's own body
// does (http.ErrBodyReadAfterClose). Closed tells whether it was closed.
type ServerBody struct {
	r      *strings.Reader
	Closed bool
}

// NewServerBody is a ServerBody of s.
func NewServerBody(s string) *ServerBody { return &ServerBody{r: strings.NewReader(s)} }

func (b *ServerBody) Read(p []byte) (int, error) {
	if b.r.Len() == 0 {
		b.Closed = true // read to its end: the server consumes and closes it
	}
	if b.Closed {
		return 0, http.ErrBodyReadAfterClose
	}
	return b.r.Read(p)
}

// Close closes the body.
func (b *ServerBody) Close() error { b.Closed = true; return nil }

// Send sends one request with the given headers and body (none when empty) through
// http.DefaultClient and returns the answer with its body read whole; a failure to send
// or read ends the test.
func Send(t testing.TB, method, url string, header map[string]string, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, b
}
