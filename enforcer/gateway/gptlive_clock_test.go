package gateway_test

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/enforcer/gateway"
	"github.com/tollgate-dev/tollgate/pkg/clock"
)

// A GPT-Live session cut before its server reported its time is charged the time since
// by the gateway's clock (Config.Clock, the gate's), an estimate, as every instant of the
// enforcer's domain code is told: until 2026-12-07 the session read the wall clock
// whatever the gateway was given, so that its time and its request's windows were told
// by two clocks.
func TestGPTLiveCutIsEstimatedByTheGatewaysClock(t *testing.T) {
	clk := clock.NewManual(time.Date(2026, 9, 14, 12, 0, 0, 0, time.UTC))
	tr := newTracker()
	gw := realtimeGatewayOf(t, &gptLiveUpstream{}, &countingGate{n: 10}, tr, func(c *gateway.Config) { c.Clock = clk })
	front := httptest.NewServer(gw)
	t.Cleanup(front.Close)
	c := startGPTLive(t, "ws"+strings.TrimPrefix(front.URL, "http"))
	clk.Advance(42 * time.Second)
	_ = c.CloseNow()
	u := tr.settlements(t, 1)[0]
	if u.AudioInputMillis != 42_000 || u.Complete {
		t.Fatalf("the cut session was settled %+v, want 42s estimated", u)
	}
}
