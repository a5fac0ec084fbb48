package logging

import (
	"log"
	"log/slog"
	"strings"

	"github.com/tollgate-dev/tollgate/pkg/redact"
)

// ServerLog is the ErrorLog of an http.Server named server (rest, gateway, http,
// admin). net/http writes lines of its own about what clients send: an HTTP/2 protocol
// error, a failed TLS handshake, a handler's panic. Without an ErrorLog they go through
// the standard log package to stderr: outside the program's format (a JSON log gets
// plain text lines) and one per connection, so a client that opens connections and
// breaks the protocol writes as many lines as it likes. Here each is a line of l, with
// the server's name: panics at error, anything else at warn, each kind throttled
// (Throttle) so a flood of them is one line per interval with the count left out.
func ServerLog(l *slog.Logger, server string) *log.Logger {
	return log.New(&serverLog{log: l, server: server}, "", 0)
}

type serverLog struct {
	log            *slog.Logger
	server         string
	panics, others Throttle
}

func (s *serverLog) Write(p []byte) (int, error) {
	// A panic's line carries its value (which may quote what a client sent) and the
	// whole stack: the first 4 KiB hold the value and the frames that find the bug.
	line := redact.Clip(strings.TrimRight(string(p), "\n"), 4096)
	if strings.HasPrefix(line, "http: panic serving") || strings.HasPrefix(line, "http2: panic serving") {
		s.panics.Log(s.log, slog.LevelError, "http server: a handler panicked", "server", s.server, "detail", line)
	} else {
		s.others.Log(s.log, slog.LevelWarn, "http server: a connection failed", "server", s.server, "detail", line)
	}
	return len(p), nil
}
