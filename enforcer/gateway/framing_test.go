package gateway_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/enforcer/gateway"
)

// A body whose chunked framing is broken (a chunk extension cut by a bare LF, a size
// that is no hex number, a chunk longer than its size) cannot be read. It was answered
// as a client that left: nothing written, so net/http answered "200 OK" with an empty
// body, which a client takes for success. An upload's was worse: the upload path had put
// a reader in front of the request's body, so net/http, which closes a connection whose
// body was not read to its end, did not see it as its own, kept the connection, and read
// what followed the broken chunk as the next request: a request hidden in a body ran
// (a front door that passed such a body on would never have sent it). Each is now a 400
// service_gateway_request_body_malformed, the connection closed, nothing more read;
// nothing is sent upstream, and an upload admitted on its first bytes is settled at 0.
func TestBrokenChunkedBodyIsRefused(t *testing.T) {
	var mu sync.Mutex
	var calls []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		calls = append(calls, r.Method+" "+r.URL.Path)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
	}))
	defer up.Close()
	e := newEnv(t, up.URL, gateway.Config{})
	addr := strings.TrimPrefix(e.front.URL, "http://")
	const body = `{"model":"gpt-4o-mini","messages":[]}`
	const hidden = "GET /v1/models HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer tgk_good\r\n\r\n"
	for _, tc := range []struct{ name, contentType, chunked string }{
		{"a chunk extension cut by a bare LF", "application/json", fmt.Sprintf("%x;ext\nx\r\n%s\r\n0\r\n\r\n", len(body), body) + hidden},
		{"a size that is no hex number", "application/json", "zz\r\n" + hidden},
		{"a chunk longer than its size", "application/json", fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", 4, body) + hidden},
		{"an upload's size that is no hex number", "multipart/form-data; boundary=b", "3\r\n--b\r\nzz\r\n" + hidden},
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "POST /v1/audio/transcriptions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer tgk_good\r\nContent-Type: %s\r\n"+
			"Transfer-Encoding: chunked\r\n\r\n%s", tc.contentType, tc.chunked)
		got, _ := io.ReadAll(c) // to the end: the connection is closed
		c.Close()
		status, _, _ := strings.Cut(string(got), "\r\n")
		if status != "HTTP/1.1 400 Bad Request" || !strings.Contains(string(got), "X-Service-Error-Code: service_gateway_request_body_malformed") ||
			!strings.Contains(string(got), "Connection: close") || strings.Count(string(got), "HTTP/1.1 ") != 1 {
			t.Errorf("%s: %q", tc.name, got)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, c := range calls {
		if c != "POST /v1/audio/transcriptions" { // an upload streams once admitted: its part went
			t.Errorf("the upstream ran %q", calls)
		}
	}
	e.tracker.mu.Lock()
	defer e.tracker.mu.Unlock()
	for _, u := range e.tracker.finished {
		if !u.Complete || u.Seen == nil || u.UpstreamStatus != http.StatusBadRequest {
			t.Errorf("the broken upload settled %+v, want at 0 with its 400", u)
		}
	}
}
