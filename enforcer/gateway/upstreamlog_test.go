package gateway_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/tollgate-dev/tollgate/enforcer/gateway"
	"github.com/tollgate-dev/tollgate/internal/testio"
)

// A Realtime handshake that cannot reach the upstream is logged without the query the
// client sent upstream: the WebSocket client's error quotes the request's URL whole
// (url.Error: `Get "http://host/v1/realtime?model=...&token=...": dial tcp ...`), and a
// client may carry its own secrets there (a provider's ephemeral token, a signed
// parameter), which go on to the provider but not into the enforcer's log.
func TestUpstreamFailureLogsNoQuery(t *testing.T) {
	l := realtimeToADeadUpstream(t, "model=gpt-realtime&client_token=Zk9-member-secret")
	if strings.Contains(l, "Zk9-member-secret") {
		t.Fatalf("the log quotes the client's query:\n%s", l)
	}
}

// A failed upstream's line is bounded whatever the client sent: a Realtime handshake's
// query may be as long as the server's header limit (1 MiB), and the WebSocket client's
// error quotes its URL; the line carries an excerpt of the error, not a megabyte a
// request (the line is throttled, but a megabyte each interval still fills a disk).
func TestUpstreamFailureLogLineIsBounded(t *testing.T) {
	l := realtimeToADeadUpstream(t, "model=gpt-realtime&"+strings.Repeat("q", 900<<10)+"=1")
	for line := range strings.Lines(l) {
		if len(line) > 4<<10 {
			t.Fatalf("a line of %d bytes: %.300s...", len(line), line)
		}
	}
}

// realtimeToADeadUpstream opens a Realtime handshake with query through a gateway whose
// upstream refuses connections, checks the 502, the settlement and the failure's log
// line, and returns the gateway's log.
func realtimeToADeadUpstream(t *testing.T, query string) string {
	t.Helper()
	dead := "http://" + testio.FreeAddr(t) // nothing listens there
	logs := &testio.SyncBuffer{}
	e := newEnvLogging(t, dead, gateway.Config{}, slog.New(slog.NewTextHandler(logs, nil)))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, res, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(e.front.URL, "http")+"/v1/realtime?"+query,
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer tgk_good"}}})
	if err == nil {
		c.CloseNow()
		t.Fatal("the handshake to a dead upstream succeeded")
	}
	if res == nil || res.StatusCode != http.StatusBadGateway {
		t.Fatalf("answer %v, want 502", res)
	}
	select {
	case <-e.tracker.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the request was never settled")
	}
	l := logs.String()
	if !strings.Contains(l, `msg="gateway: upstream failed"`) {
		t.Fatalf("the failure is not logged:\n%.2000s", l)
	}
	return l
}
