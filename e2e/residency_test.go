package e2e_test

import (
	"testing"

	"github.com/tollgate-dev/tollgate/e2e/fakellm"
)

// TestOpenAIDataResidencyThroughTheGateway: a gateway whose upstream is one of OpenAI's
// data residency endpoints (http://eu.api.openai.com: {region}.api.openai.com), reached
// through an egress proxy (HTTP_PROXY, which the gateway honors), charges the official
// OpenAI SDK's calls, streamed and not, the model's regional premium: OpenAI's 10% uplift
// on the models released from 2026-03-05 on (gpt-5.5, priced by the catalog). The
// receipts say the endpoint was regional (regional_endpoint), gpt-4o-mini's too, which
// the organization prices itself: its own price has no premium. Before 2026-11-29 such
// calls were charged the global price.
//
// The enforcer runs in a process of its own, so that it reads this HTTP_PROXY: the fake
// provider is the proxy, and gets each request for the EU host in absolute form.
func TestOpenAIDataResidencyThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	fake, s, o, gw := proxiedGateway(t, "http://eu.api.openai.com", "Bearer sk-provider-eu")
	gpt55, gpt55Cost := tenThousandIn(t, "gpt-5.5")
	if gpt55.RegionalPremiumPercent != 10 {
		t.Fatalf("gpt-5.5: %+v; this test charges a 10%% premium", gpt55)
	}
	for _, tc := range []struct {
		model string
		cost  int64
	}{
		{"gpt-5.5", ceilDiv(gpt55Cost*110, 100)},
		{model, catalogCost(10_000, 0, 1_000)}, // the organization's own price (setUpOrg)
	} {
		for _, scenario := range []string{"json", "stream"} {
			t.Run(tc.model+"/"+scenario, func(t *testing.T) {
				before := len(fake.Calls())
				r := runSDK(t, dir, "openai.mjs", scenario, gw, o.key, tc.model)
				calls := fake.Calls()[before:]
				if !r.OK || len(calls) != 1 || calls[0].Header.Get("Authorization") != "Bearer sk-provider-eu" {
					t.Fatalf("the call %+v; the provider got %+v", r, calls)
				}
				rec := waitReceipt(t, s, calls[0].Header.Get("X-Service-Request-Id"))
				if rec.cost() != tc.cost || rec["regional_endpoint"] != true || rec["complete"] != true {
					t.Fatalf("receipt %s, want %d micro-USD from a regional endpoint", rec, tc.cost)
				}
			})
		}
	}
}

// proxiedGateway is a stack with an organization and a gateway, in an enforcer process
// of its own (so that it reads HTTP_PROXY), whose upstream is the named host (upstream,
// with authorization as the provider's credential), reached through an HTTP proxy that
// is a fakellm answering 10,000 input and 1,000 output tokens: the fake gets each request
// for that host in absolute form, and answers as the provider. It returns the fake, the
// stack, the organization and the gateway's URL.
func proxiedGateway(t *testing.T, upstream, authorization string) (*fakellm.Server, *stack, org, string) {
	t.Helper()
	fake, up := fixedUsageUpstream(t, fakellm.Usage{InputTokens: 10_000, OutputTokens: 1_000})
	s := startStack(t, nil)
	o := s.setUpOrg(t)
	child := startChildEnforcer(t, s, map[string]string{"TOLLGATE_GATEWAY_ADDR": "127.0.0.1:0",
		"TOLLGATE_GATEWAY_UPSTREAM": upstream, "TOLLGATE_GATEWAY_UPSTREAM_AUTHORIZATION": authorization,
		"HTTP_PROXY": up.URL, "http_proxy": up.URL, "NO_PROXY": "", "no_proxy": ""})
	return fake, s, o, child.view.gateway
}
