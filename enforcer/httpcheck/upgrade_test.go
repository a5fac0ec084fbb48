package httpcheck_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/tollgate-dev/tollgate/enforcer/app"
	"github.com/tollgate-dev/tollgate/enforcer/internal/enforcertest"
	"github.com/tollgate-dev/tollgate/internal/testio"
)

// TestCaddyForwardAuthTunnelsOnlyWebSockets sends, through the shipped Caddyfile, a
// request that upgrades to h2c (HTTP/2 in the clear: "Upgrade: h2c", as curl --http2
// sends it over http://) to an upstream that accepts it, as Hypercorn does. /check
// admits that one request; had Caddy passed the Upgrade on, it would tunnel the
// connection once the upstream answered 101, and the client would send every further
// request as an HTTP/2 stream straight to the provider, none of them checked, none with
// a request id anyone could settle. A WebSocket (the Realtime API) still goes through,
// its request id with it, where the operator lets Realtime sessions through (billed out
// of the enforcer's sight: by default /check refuses them, TestCheckRefusesWhatIsBilledLater).
func TestCaddyForwardAuthTunnelsOnlyWebSockets(t *testing.T) {
	caddy := testio.LookTool(t, "caddy", "apt-get install caddy")
	e := enforcertest.New(t, enforcertest.Options{Config: func(c *app.Config) { c.DeferredBillingAllow = "realtime_sessions" }})
	w := e.NewMember(enforcertest.DayLimit(1*enforcertest.USD, true))
	up := testio.NewUpgradingUpstream(t)
	caddyAddr, caddyLog := startCaddyForwardAuth(t, caddy, strings.TrimPrefix(e.HTTPURL, "http://"), up.Addr, nil)

	for _, upgrade := range []string{"h2c", "H2C", "websocket, h2c", "h2c\r\nUpgrade: websocket"} {
		served := testio.H2CThrough(t, caddyAddr, w.Key, upgrade, 3)
		if got := up.Calls(); served != 0 || len(got) != 1 || !strings.HasPrefix(got[0], "req_") {
			t.Fatalf("Upgrade: %q: %d requests served over a tunnel; the upstream saw request ids %q (one request checked)\n%s",
				upgrade, served, got, caddyLog)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws://"+caddyAddr+"/v1/realtime?model=gpt-realtime",
		&websocket.DialOptions{HTTPHeader: http.Header{"X-Api-Key": {w.Key}}})
	if err != nil {
		t.Fatalf("a WebSocket through Caddy: %v\n%s", err, caddyLog)
	}
	defer c.CloseNow()
	if err := c.Write(ctx, websocket.MessageText, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if _, msg, err := c.Read(ctx); err != nil || string(msg) != "hello" {
		t.Fatalf("echo %q, %v", msg, err)
	}
	if got := up.Calls(); len(got) != 1 || !strings.HasPrefix(got[0], "req_") {
		t.Fatalf("the WebSocket reached the upstream with request ids %q", got)
	}
}
