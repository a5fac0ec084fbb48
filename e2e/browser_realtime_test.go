package e2e_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/e2e/fakellm"
	"github.com/tollgate-dev/tollgate/internal/testio"
)

// TestBrowserRealtimeThroughTheGateway: a page in the real headless Chromium opens a
// Realtime session through the gateway as a browser's Realtime client does (the openai
// SDK's OpenAIRealtimeWebSocket with dangerouslyAllowBrowser, the Agents SDK's
// RealtimeSession with useInsecureApiKey): a page cannot set a WebSocket's headers, so
// the member's key comes in the subprotocol "openai-insecure-api-key.<key>" beside
// "realtime". The gateway reads it as the member's credential: the session opens (the
// subprotocol "realtime" chosen), its response is charged exactly, and the provider's
// handshake carries the provider's credential alone, no subprotocol with the key. A
// blocked member's session is refused at its handshake (the browser sees only the close
// code 1006), never reaching the provider. Before the thirty-sixth session such a key
// was not read: every browser session was refused 401.
func TestBrowserRealtimeThroughTheGateway(t *testing.T) {
	t.Parallel()
	awayFromDayBoundary(t, 3*time.Minute)
	const in, out = 10_000, 2_000
	fake, up := fixedUsageUpstream(t, fakellm.Usage{InputTokens: in, OutputTokens: out})
	s := startStack(t, gatewayEnv(up.URL))
	admitted, spent := s.setUpOrg(t), s.setUpOrg(t)
	s.guardPolicy(t, spent, "0.000001", nil)
	chat := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello"}]}`
	send := func() int {
		res, _ := testio.Send(t, "POST", s.gateway+"/v1/chat/completions",
			map[string]string{"Authorization": "Bearer " + spent.key, "Content-Type": "application/json"}, chat)
		return res.StatusCode
	}
	send()
	waitFor(t, 15*time.Second, "the enforcer refusing the spent member", func() bool { return send() == 429 })
	before := len(fake.Calls())

	ws := "ws" + strings.TrimPrefix(s.gateway, "http") + "/v1/realtime?model=gpt-realtime"
	if got, want := testio.BrowserRealtime(t, ws, admitted.key, spent.key), "open realtime 1|closed 1006"; got != want {
		t.Fatalf("the browser's sessions: %q, want %q", got, want)
	}
	var calls []fakellm.Call
	waitFor(t, 10*time.Second, "the session to end at the provider", func() bool {
		calls = fake.Calls()[before:]
		return len(calls) == 1 && len(calls[0].Body) > 0
	})
	checkOnlyTheProviderCredential(t, calls, admitted.key)
	if calls[0].API != fakellm.OpenAIRealtime || calls[0].Header.Get("Sec-Websocket-Protocol") != "realtime" {
		t.Errorf("the provider got %s with subprotocols %q, want a Realtime session offered \"realtime\" alone",
			calls[0].API, calls[0].Header.Values("Sec-Websocket-Protocol"))
	}
	price := catalogCostOf(t, "gpt-realtime", in, out)
	s.waitUsed(t, admitted, 1, price)
	if got := chargedReceipts(t, s, admitted); len(got) != 1 || got[0] != fmt.Sprint(price, " true") {
		t.Errorf("charged %q, want the response's %d, complete", got, price)
	}
}
