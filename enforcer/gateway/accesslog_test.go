package gateway_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/gateway"
	"github.com/tollgate-dev/tollgate/internal/testio"
)

// An access-log line is bounded whatever the client sent: a path as long as the
// server's header limit (1 MiB) from a client without a key, and a model name as long
// as the body the response echoes, are cut, not quoted whole. With the access log on,
// one line per request of a megabyte each let anyone who reached the port write a
// megabyte of log per request.
func TestAccessLogLineIsBounded(t *testing.T) {
	huge := strings.Repeat("m", 900<<10)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"chat.completion","model":"`+huge+`","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}`)
	}))
	defer up.Close()
	logs := &testio.SyncBuffer{}
	e := newEnvLogging(t, up.URL, gateway.Config{AccessLog: true}, slog.New(slog.NewTextHandler(logs, nil)))
	for _, key := range []string{"tgk_unknown", "tgk_blocked"} {
		res := post(t, e.front.URL+"/v1/"+huge, key, chatBody)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	res := post(t, e.front.URL+"/v1/chat/completions", "tgk_good", chatBody)
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	e.tracker.settled(t)
	waitFor(t, func() bool { return strings.Count(logs.String(), `msg="gateway request"`) == 3 })
	for line := range strings.Lines(logs.String()) {
		if len(line) > 2<<10 {
			t.Errorf("a line of %d bytes: %.300s...", len(line), line)
		}
	}
}
