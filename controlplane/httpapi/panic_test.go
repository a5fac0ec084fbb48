package httpapi_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/controlplane/httpapi"
	"github.com/tollgate-dev/tollgate/pkg/clock"
)

// A handler's panic is a programming bug, and its value may be as long as the input that
// caused it (a panic quoting a body or a path). The log line says where it happened, in
// bounded size, and the client gets the one internal_error answer.
func TestHandlerPanicIsLoggedBoundedWithWhereItHappened(t *testing.T) {
	var logs bytes.Buffer
	s := httpapi.New(httpapi.Deps{Clock: clock.System{}, Log: slog.New(slog.NewJSONHandler(&logs, nil))})
	h := s.PanickingRoute("/panics", "bad input: "+strings.Repeat("x", 1<<20))

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/panics", nil))
	if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), `"internal_error"`) {
		t.Fatalf("answer %d %s, want 500 internal_error", rec.Code, rec.Body)
	}
	line := strings.TrimSpace(logs.String())
	if strings.Count(line, "\n") != 0 {
		t.Fatalf("want one log line, got:\n%.2000s", line)
	}
	if len(line) > 8<<10 {
		t.Errorf("the panic's log line is %d bytes, want at most 8 KiB", len(line))
	}
	var entry struct{ Msg, Panic, Stack string }
	if err := json.Unmarshal([]byte(line), &entry); err != nil {
		t.Fatalf("log line is not JSON: %v", err)
	}
	if entry.Msg != "handler panic" || !strings.HasPrefix(entry.Panic, "bad input: xxx") {
		t.Errorf("log entry %q / panic %.40q, want handler panic with its value's start", entry.Msg, entry.Panic)
	}
	// The stack names the handler that panicked (the test's route here), which is what
	// whoever reads the line needs to find the bug.
	if !strings.Contains(entry.Stack, "httpapi.(*Server).PanickingRoute") {
		t.Errorf("the log line's stack does not reach the panicking handler:\n%s", entry.Stack)
	}
}
