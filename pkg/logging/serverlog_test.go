package logging

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// net/http's lines become the logger's, throttled by kind: a flood of connection errors
// is one warning, and a panic is still an error of its own.
func TestServerLog(t *testing.T) {
	var buf bytes.Buffer
	l := ServerLog(slog.New(slog.NewJSONHandler(&buf, nil)), "gateway")
	for range 50 {
		l.Printf("http2: server connection error from 10.0.0.1:1234: connection error: PROTOCOL_ERROR")
	}
	l.Printf("http: panic serving 10.0.0.1:1: boom %s\ngoroutine 1 [running]:\n", strings.Repeat("x", 1<<20))
	out := buf.String()
	if n := strings.Count(out, "PROTOCOL_ERROR"); n != 1 {
		t.Fatalf("%d lines of 50 connection errors, want 1:\n%s", n, out)
	}
	if !strings.Contains(out, `"level":"ERROR"`) || !strings.Contains(out, "boom") || !strings.Contains(out, `"server":"gateway"`) {
		t.Fatalf("the panic's line is missing or unnamed:\n%.2000s", out)
	}
	// A panic's value may be as long as a client's input.
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if len(line) > 5<<10 {
			t.Errorf("a log line of %d bytes, want at most 5 KiB: %.200s...", len(line), line)
		}
	}
}
