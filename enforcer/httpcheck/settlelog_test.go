package httpcheck_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/httpcheck"
)

// A /settle the enforcer refuses (401: neither loopback nor the internal token; 400: a
// body it cannot charge) is a settlement not charged, and a reporter that does not read
// the answer (fire and forget, as a proxy's log hook does) loses every one of them:
// until 2026-12-07 the enforcer wrote nothing about it, and the operator saw only
// durable starts left pending. Each refusal kind is logged (at most once per 10 s, with
// the count left out), with why, and never with the token or the body.
func TestRefusedSettleIsLogged(t *testing.T) {
	var logs bytes.Buffer
	h := httpcheck.New(nil, nil, httpcheck.Config{InternalToken: "s3cret-internal-token"}, slog.New(slog.NewTextHandler(&logs, nil)))

	if code, _ := postSettle(t, h, "10.1.2.3:4444", "Bearer wrong-token-value", `{"requestId":"req_x"}`); code != 401 {
		t.Fatalf("unauthorized /settle answered %d", code)
	}
	line := logs.String()
	if !strings.Contains(line, "level=WARN") || !strings.Contains(line, "/settle refused") || !strings.Contains(line, "10.1.2.3") {
		t.Errorf("a /settle refused 401 is not logged with its caller:\n%s", line)
	}
	if strings.Contains(line, "wrong-token-value") || strings.Contains(line, "s3cret") {
		t.Errorf("the log quotes a token:\n%s", line)
	}

	logs.Reset()
	body := `{"requestId":"req_y","inputTokens":-1,"model":"secret-prompt-text"}`
	if code, _ := postSettle(t, h, "127.0.0.1:5555", "", body); code != 400 {
		t.Fatalf("invalid /settle answered %d", code)
	}
	line = logs.String()
	if !strings.Contains(line, "/settle refused") || !strings.Contains(line, "inputTokens must not be negative") {
		t.Errorf("a /settle refused 400 is not logged with why:\n%s", line)
	}
	if strings.Contains(line, "secret-prompt-text") {
		t.Errorf("the log quotes the body:\n%s", line)
	}
}
