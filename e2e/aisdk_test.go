package e2e_test

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/e2e/fakellm"
)

// TestAISDKThroughTheGateway: Vercel's AI SDK (ai, @ai-sdk/openai and @ai-sdk/anthropic,
// e2e/sdk's pins), called as a web app's server code calls it, with its defaults:
// generateText and streamText on OpenAI's chat completions, on its Responses API and on
// Anthropic's messages, the base URL at the gateway and the member's Tollgate key as the
// API key. Each call reaches the provider once, with the provider's credential alone, and
// is charged exactly, complete. Blocked, a call with the SDK's default retries is sent
// three times (the AI SDK retries a 429, 2 s and then 4 s later: it reads no
// X-Should-Retry and waits out no Retry-After of more than a minute), each refused at the
// gateway and none charged; with maxRetries: 0, once. Either way the error the program
// gets carries the 429 and both headers.
func TestAISDKThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)
	var next fakellm.NextUsage
	const in, out = 10_000, 2_000
	next.Set(fakellm.Usage{InputTokens: in, OutputTokens: out})
	fake := &fakellm.Server{Usage: next.Of}
	up := httptest.NewServer(fake)
	t.Cleanup(up.Close)
	s := startStack(t, gatewayEnv(up.URL))
	o := s.setUpOrg(t)

	openai, claude := catalogCost(in, 0, out), catalogCostOf(t, claudeModel, in, out)
	settled, used := 0, int64(0)
	for _, c := range []struct {
		scenario, model, api string
		want                 int64
	}{
		{"json", model, fakellm.OpenAIChat, openai},
		{"stream", model, fakellm.OpenAIChat, openai},
		{"responses", model, fakellm.OpenAIResponses, openai},
		{"responses-stream", model, fakellm.OpenAIResponses, openai},
		{"json", claudeModel, fakellm.AnthropicMessages, claude},
		{"stream", claudeModel, fakellm.AnthropicMessages, claude},
	} {
		t.Run(c.scenario+" "+c.model, func(t *testing.T) {
			before := len(fake.Calls())
			rec, r := oneSDKCallResult(t, fake, s, dir, "aisdk.mjs", c.scenario, o.key, c.model)
			call := fake.Calls()[before]
			checkOnlyTheProviderCredential(t, []fakellm.Call{call}, o.key)
			if call.API != c.api || r.Text != fakellm.Text {
				t.Errorf("the provider got %s, the program read %q: want %s and the answer", call.API, r.Text, c.api)
			}
			if rec.cost() != c.want || rec["complete"] != true {
				t.Errorf("receipt %s, want %d, complete", rec, c.want)
			}
			settled, used = settled+1, used+c.want
		})
	}
	s.waitUsed(t, o, settled, used)

	// One more call that spends the rest of the limit.
	next.Set(fakellm.Usage{InputTokens: 10_000_000})
	if rec, _ := oneSDKCallResult(t, fake, s, dir, "aisdk.mjs", "json", o.key, model); rec.cost() != catalogCost(10_000_000, 0, 0) {
		t.Fatalf("the last admitted call: receipt %s", rec)
	}
	s.waitBlocked(t, o)
	for _, c := range []struct {
		name     string
		env      []string
		attempts int
	}{
		{"default retries", nil, 3},
		{"maxRetries 0", []string{"AISDK_MAX_RETRIES=0"}, 1},
	} {
		t.Run("blocked, "+c.name, func(t *testing.T) {
			before := len(fake.Calls())
			refused := s.metric(t, "tollgate_enforcer_gateway_requests_total", "outcome", "refused")
			r := runSDK(t, dir, "aisdk.mjs", "json", s.gateway, o.key, model, c.env...)
			if r.OK || r.Status != 429 || r.Attempts != c.attempts || r.HeaderCode == nil ||
				*r.HeaderCode != "service_gateway_usage_limit_exceeded" || r.UsageState == nil || *r.UsageState != "blocked" ||
				r.Code == nil || !strings.Contains(*r.Code, "usage_limit_exceeded") {
				t.Errorf("blocked: %+v; want the 429 with both headers after %d attempts", r, c.attempts)
			}
			if n := s.metric(t, "tollgate_enforcer_gateway_requests_total", "outcome", "refused") - refused; n != float64(c.attempts) {
				t.Errorf("the gateway refused %v calls, want %d", n, c.attempts)
			}
			if n := len(fake.Calls()) - before; n != 0 {
				t.Errorf("blocked, the provider got %d calls", n)
			}
		})
	}
	s.waitUsed(t, o, settled+1, used+catalogCost(10_000_000, 0, 0))
}
