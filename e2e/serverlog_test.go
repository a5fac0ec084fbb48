package e2e_test

import (
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testio"
)

// net/http writes lines of its own about what clients send: an HTTP/2 protocol error,
// a failed TLS handshake, a handler's panic. They reach the program's logger
// (logging.ServerLog), throttled: one line per interval with the count left out, not a
// line per connection outside the log's format. The gateway speaks h2c, so anyone who
// reaches its port can send a broken HTTP/2 frame per connection; before 2026-12-02
// each wrote an unstructured line through the standard log package to stderr.
func TestGatewayProtocolErrorsAreLoggedThrottled(t *testing.T) {
	up := httptest.NewServer(http.NotFoundHandler())
	defer up.Close()
	var std testio.SyncBuffer
	log.SetOutput(&std)
	t.Cleanup(func() { log.SetOutput(os.Stderr) })
	s := startStack(t, map[string]string{"TOLLGATE_GATEWAY_ADDR": "127.0.0.1:0", "TOLLGATE_GATEWAY_UPSTREAM": up.URL})
	addr := strings.TrimPrefix(s.gateway, "http://")
	const conns = 5
	var open []net.Conn
	for range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// The HTTP/2 preface, then a SETTINGS frame 5 bytes long (a multiple of 6 is
		// required): a connection error, FRAME_SIZE_ERROR.
		_, _ = c.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
		_, _ = c.Write([]byte{0, 0, 5, 4, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5})
		open = append(open, c)
	}
	// The server logs before it closes a connection (a second after its GOAWAY): read
	// each to its end.
	for _, c := range open {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.Copy(io.Discard, c)
	}
	count := func(b *testio.SyncBuffer) int { return strings.Count(b.String(), "FRAME_SIZE_ERROR") }
	if n := count(&std); n > 0 {
		t.Fatalf("%d connections wrote %d lines outside the enforcer's log:\n%s", conns, n, std.String())
	}
	if n := count(s.enfLogs); n != 1 {
		t.Fatalf("%d connections wrote %d lines in the enforcer's log, want 1 (throttled):\n%s", conns, n, s.enfLogs.String())
	}
	if !strings.Contains(s.enfLogs.String(), "server=gateway") {
		t.Fatalf("the line does not name its server:\n%s", s.enfLogs.String())
	}
}
