package e2e_test

import (
	"cmp"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/e2e/fakellm"
)

// frameworkCall is one of a framework's calls: its script's scenario, the model, and the
// provider API the call must reach.
type frameworkCall struct{ scenario, model, api string }

// frameworkCalls are the calls a framework's script makes through the gateway: buffered
// and streamed, on OpenAI's chat completions, its Responses API and Anthropic's messages.
var frameworkCalls = []frameworkCall{
	{"json", model, fakellm.OpenAIChat},
	{"stream", model, fakellm.OpenAIChat},
	{"responses", model, fakellm.OpenAIResponses},
	{"responses-stream", model, fakellm.OpenAIResponses},
	{"json", claudeModel, fakellm.AnthropicMessages},
	{"stream", claudeModel, fakellm.AnthropicMessages},
}

// blockedFramework is how a framework's call of a blocked member goes: with env in its
// script's environment, it is sent attempts times.
type blockedFramework struct {
	name     string
	env      []string
	attempts int
	// model is the call's ("" for the OpenAI model): a claude-* model goes to the
	// framework's Anthropic provider.
	model string
}

// frameworkThroughTheGateway runs script (e2e/sdk's, calling the providers through an
// application framework) through the gateway: each of frameworkCalls reaches the
// provider once, with the provider's credential alone, and is charged exactly, complete.
// Once the member is blocked, each of blocked is refused attempts times at the gateway,
// none reaching the provider or charged, and the error the program gets carries the 429
// and both headers.
func frameworkThroughTheGateway(t *testing.T, script string, blocked []blockedFramework) {
	t.Helper()
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

	price := map[string]int64{model: catalogCost(in, 0, out), claudeModel: catalogCostOf(t, claudeModel, in, out)}
	settled, used := 0, int64(0)
	for _, c := range frameworkCalls {
		t.Run(c.scenario+" "+c.model, func(t *testing.T) {
			before := len(fake.Calls())
			rec, r := oneSDKCallResult(t, fake, s, dir, script, c.scenario, o.key, c.model)
			call := fake.Calls()[before]
			checkOnlyTheProviderCredential(t, []fakellm.Call{call}, o.key)
			if call.API != c.api || r.Text != fakellm.Text {
				t.Errorf("the provider got %s, the program read %q: want %s and the answer", call.API, r.Text, c.api)
			}
			if want := price[c.model]; rec.cost() != want || rec["complete"] != true {
				t.Errorf("receipt %s, want %d, complete", rec, want)
			}
			settled, used = settled+1, used+price[c.model]
		})
	}
	s.waitUsed(t, o, settled, used)

	// One more call that spends the rest of the limit.
	next.Set(fakellm.Usage{InputTokens: 10_000_000})
	last := catalogCost(10_000_000, 0, 0)
	if rec, _ := oneSDKCallResult(t, fake, s, dir, script, "json", o.key, model); rec.cost() != last {
		t.Fatalf("the last admitted call: receipt %s, want %d", rec, last)
	}
	s.waitBlocked(t, o)
	for _, c := range blocked {
		t.Run("blocked, "+c.name, func(t *testing.T) {
			var r sdkResult
			m := cmp.Or(c.model, model)
			refusedAtTheGateway(t, s, fake, c.attempts, func() { r = runSDK(t, dir, script, "json", s.gateway, o.key, m, c.env...) })
			if !r.blocked429() || r.Code == nil || !strings.Contains(*r.Code, "usage_limit_exceeded") {
				t.Errorf("blocked: %+v; want the 429 with both headers", r)
			}
			// The member reads why, and until when: the refusal's message is the error's
			// (@ai-sdk/anthropic said only "Too Many Requests" of a body without
			// Anthropic's envelope, until 2026-12-07).
			if !strings.Contains(r.Error, "Usage limit exceeded") {
				t.Errorf("blocked: the program's error %q does not carry the refusal's message", r.Error)
			}
			if r.Attempts != 0 && r.Attempts != c.attempts {
				t.Errorf("the program was told of %d attempts, want %d", r.Attempts, c.attempts)
			}
		})
	}
	s.waitUsed(t, o, settled+1, used+last)
}

// TestAISDKThroughTheGateway: Vercel's AI SDK (ai, @ai-sdk/openai and @ai-sdk/anthropic,
// e2e/sdk's pins), called as a web app's server code calls it, with its defaults:
// generateText and streamText on OpenAI's chat completions, on its Responses API and on
// Anthropic's messages, the base URL at the gateway and the member's Tollgate key as the
// API key (frameworkThroughTheGateway). Blocked, a call with the SDK's default retries is
// sent three times (the AI SDK retries a 429, 2 s and then 4 s later: it reads no
// X-Should-Retry and waits out no Retry-After of more than a minute); with maxRetries: 0,
// once.
func TestAISDKThroughTheGateway(t *testing.T) {
	t.Parallel()
	frameworkThroughTheGateway(t, "aisdk.mjs", []blockedFramework{
		{"default retries", nil, 3, ""},
		{"maxRetries 0", []string{"AISDK_MAX_RETRIES=0"}, 1, ""},
		{"anthropic, maxRetries 0", []string{"AISDK_MAX_RETRIES=0"}, 1, claudeModel},
	})
}

// TestLangChainThroughTheGateway: LangChain's chat models (@langchain/openai's
// ChatOpenAI, with and without useResponsesApi, and @langchain/anthropic's ChatAnthropic,
// e2e/sdk's pins) with their defaults, invoke and stream, the base URL at the gateway and
// the member's Tollgate key as the API key (frameworkThroughTheGateway). Blocked, a call
// is sent once with LangChain's defaults: its caller retries a 429 only when Retry-After
// is a minute or less, and the usage limit's is hours.
func TestLangChainThroughTheGateway(t *testing.T) {
	t.Parallel()
	frameworkThroughTheGateway(t, "langchain.mjs", []blockedFramework{{"defaults", nil, 1, ""}})
}

// TestAISDKLeavingItsStream: a program leaves the AI SDK's streamText after the first
// text, on OpenAI's chat completions and Responses API and on Anthropic's messages. Aborting the call's abortSignal (a chat page's stop button) ends the request: the
// provider, pausing after that text (lingeringUpstream's pauseAfter) until its client
// leaves, sees it leave, and the call is charged incomplete, at least the input the
// stream reported before (Anthropic's message_start; 1 micro-USD where none came: OpenAI's
// usage comes last on both its APIs), less than the whole. Breaking out of the loop over
// fullStream does not: streamText reads the provider's stream on to its end (for its
// usage and response promises), so the provider, pausing after the first text for 2 s
// and then going on (resumeAfter), is never left, and the answer is charged whole,
// complete, as generated.
func TestAISDKLeavingItsStream(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)
	const in, out = 10_000, 2_000
	fake := &fakellm.Server{Usage: func(fakellm.Call) fakellm.Usage { return fakellm.Usage{InputTokens: in, OutputTokens: out} }}
	up := &lingeringUpstream{fake: fake}
	upSrv := httptest.NewServer(up)
	t.Cleanup(upSrv.Close)
	s := startStack(t, gatewayEnv(upSrv.URL))
	o := s.setUpOrg(t)
	for _, c := range []struct {
		stream, model string // aisdk.mjs's stream scenario, the model
		textAt        int64  // the events the provider sends up to the first text
		whole, least  int64
	}{
		{"stream", model, 2, catalogCost(in, 0, out), 1},
		// created, in_progress, the message item and its text part come before the text.
		{"responses-stream", model, 5, catalogCost(in, 0, out), 1},
		{"stream", claudeModel, 4, catalogCostOf(t, claudeModel, in, out), catalogCostOf(t, claudeModel, in, 0)},
	} {
		for _, leave := range []string{"break", "abort"} {
			t.Run(c.stream+" "+c.model+" "+leave, func(t *testing.T) {
				stays := leave == "break"
				up.pauseAfter.Store(c.textAt + 1)
				if stays {
					up.resumeAfter.Store(int64(2 * time.Second))
					up.noLinger.Store(true) // after its end: nobody left
				}
				t.Cleanup(func() { up.pauseAfter.Store(0); up.resumeAfter.Store(0); up.noLinger.Store(false) })
				before, cancelled := len(fake.Calls()), up.cancelled.Load()
				r := runSDK(t, dir, "aisdk.mjs", c.stream+"-"+leave, s.gateway, o.key, c.model)
				got := fake.Calls()[before:]
				if !r.OK || r.Text == "" || r.Text == fakellm.Text || !strings.HasPrefix(fakellm.Text, r.Text) || len(got) != 1 {
					t.Fatalf("the call: %+v (want part of the text); the provider got %d calls", r, len(got))
				}
				rec := waitReceipt(t, s, got[0].Header.Get("X-Service-Request-Id"))
				switch left := up.cancelled.Load() != cancelled; {
				case stays:
					if left || rec.cost() != c.whole || rec["complete"] != true {
						t.Errorf("left by breaking out: the provider's request cancelled %v, receipt %s; want it read on, %d micro-USD, complete", left, rec, c.whole)
					}
				default:
					if !left || rec.cost() < c.least || rec.cost() >= c.whole || rec["complete"] != false {
						t.Errorf("aborted: the provider's request cancelled %v, receipt %s; want it cancelled, at least %d micro-USD (less than %d), incomplete", left, rec, c.least, c.whole)
					}
				}
			})
		}
	}
}

// TestAISDKToolLoopThroughTheGateway: an agent's call through Vercel's AI SDK, the model
// given a tool (pay_toll) and the call let run up to three steps (stopWhen), buffered
// (generateText) and streamed (streamText); toolLoopThroughTheGateway says what holds.
// Blocked between the steps, with maxRetries: 0 the agent's call fails at once.
func TestAISDKToolLoopThroughTheGateway(t *testing.T) {
	t.Parallel()
	toolLoopThroughTheGateway(t, "aisdk.mjs", "AISDK_MAX_RETRIES=0")
}

// TestLangChainToolLoopThroughTheGateway: an agent's loop written with LangChain's chat
// models as its docs show (bindTools, the tool's result sent back as a ToolMessage),
// invoked and streamed; toolLoopThroughTheGateway says what holds. Blocked between the
// steps, the loop fails at once with LangChain's defaults (no retry of the usage
// limit's 429).
func TestLangChainToolLoopThroughTheGateway(t *testing.T) {
	t.Parallel()
	toolLoopThroughTheGateway(t, "langchain.mjs")
}

// TestLangChainCreateAgentThroughTheGateway: an agent made with LangChain's createAgent
// (the langchain package, its loop on LangGraph), its model named "openai:<model>" or
// "anthropic:<model>" and configured from the environment (OPENAI_BASE_URL,
// ANTHROPIC_BASE_URL and their keys), invoked and streamed;
// toolLoopThroughTheGateway says what holds. Blocked between the steps, the agent fails
// at once with LangChain's defaults.
//
// With LangSmith's tracing on (LANGSMITH_TRACING=true and a LangSmith key of the
// program's own), the agent's runs are exported elsewhere (the script answers that
// request itself), and no such request carries the member's key: unlike OpenAI's Agents
// SDK, LangChain's tracing never takes the member's key away (docs/gateway.md).
func TestLangChainCreateAgentThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	fake, s, o := toolLoopThroughTheGateway(t, "createagent.mjs")

	t.Run("LangSmith's tracing on", func(t *testing.T) {
		r := runSDK(t, dir, "createagent.mjs", "tools", s.gateway, s.setUpOrg(t).key, model,
			"LANGSMITH_TRACING=true", "LANGSMITH_API_KEY=lsv2_pt_e2e_own_key")
		if !r.OK || r.Steps != 2 || !slices.Equal(r.Tolls, []string{"A1"}) {
			t.Fatalf("the agent's call with tracing on: %+v; want two steps, the toll of A1 paid once", r)
		}
		if len(r.Foreign) == 0 {
			t.Errorf("with LANGSMITH_TRACING=true the program called the gateway alone; want its trace exported (is the test's tracing on?)")
		}
		for _, f := range r.Foreign {
			if f.MemberKey {
				t.Errorf("the program sent the member's key to %s; want LangSmith's own key alone there", f.URL)
			}
		}
	})

	// The member is blocked now. LangChain's modelRetryMiddleware, which its docs give
	// agents for failed model calls, retries what LangChain's caller marks retryable: the
	// usage limit's 429 is not (its message names a spent quota: enforcer/gate's
	// blockedBody), so the agent ends at once, where before it waited out Retry-After
	// (hours; runSDK gives up after a minute). With the middleware's default onFailure
	// ("continue") the failure is the agent's answer; with "error" it is thrown.
	for _, onFailure := range []string{"continue", "error"} {
		t.Run("modelRetryMiddleware onFailure "+onFailure+", blocked", func(t *testing.T) {
			var r sdkResult
			refusedAtTheGateway(t, s, fake, 1, func() {
				r = runSDK(t, dir, "createagent.mjs", "tools", s.gateway, o.key, model, "LANGCHAIN_MODEL_RETRY="+onFailure)
			})
			switch onFailure {
			case "continue":
				if !r.OK || !strings.Contains(r.Text, "Usage limit exceeded (day)") || r.Steps != 1 || len(r.Tolls) != 0 {
					t.Errorf("the agent: %+v; want its answer the failed call's 429 message, one step, no toll paid", r)
				}
			default:
				if !r.blocked429() {
					t.Errorf("the agent: %+v; want the 429 with both headers thrown", r)
				}
			}
		})
	}
}

// toolLoopThroughTheGateway runs script's agent (its tools scenarios: the model given a
// tool, pay_toll, three steps at most) through the gateway on OpenAI's chat
// completions, its Responses API and Anthropic's messages, buffered and streamed. The
// provider asks for the tool (a tool_calls message, a function_call item, a tool_use
// block, streamed the way each API streams a call's arguments), the program runs it and
// calls again with its result, and the provider answers with text: two calls at the
// provider, each with its credential alone, each charged exactly, complete, and the tool
// run once. Then a member blocked between the steps (the tool's call spent past the
// limit, the tool held at TOOL_GATE until the member is blocked, so that the test does
// not race the settlement), the program's environment given blockedEnv: the next step is
// refused with the 429 and both headers, one refusal, the step taken stays charged.
// The program calls the gateway alone (the requests a script reports it kept from other
// hosts: none). It returns the provider (answering as before the blocked step again),
// the stack and the member, blocked.
func toolLoopThroughTheGateway(t *testing.T, script string, blockedEnv ...string) (*fakellm.Server, *stack, org) {
	t.Helper()
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)
	const in, out = 10_000, 2_000
	fake, big, s, o := agentStack(t, in, out, tollCall)
	price := map[string]int64{model: catalogCost(in, 0, out), claudeModel: catalogCostOf(t, claudeModel, in, out)}
	charged, used := 0, int64(0)
	for _, c := range []frameworkCall{
		{"tools", model, fakellm.OpenAIChat},
		{"tools-stream", model, fakellm.OpenAIChat},
		{"responses-tools", model, fakellm.OpenAIResponses},
		{"responses-tools-stream", model, fakellm.OpenAIResponses},
		{"tools", claudeModel, fakellm.AnthropicMessages},
		{"tools-stream", claudeModel, fakellm.AnthropicMessages},
	} {
		t.Run(c.scenario+" "+c.model, func(t *testing.T) {
			before := len(fake.Calls())
			r := runSDK(t, dir, script, c.scenario, s.gateway, o.key, c.model)
			if !r.OK || r.Text != fakellm.Text || r.Steps != 2 || !slices.Equal(r.Tolls, []string{"A1"}) {
				t.Fatalf("the agent's call: %+v; want two steps, the toll of A1 paid once, and the answer", r)
			}
			if len(r.Foreign) != 0 {
				t.Errorf("the program called %+v; want the gateway alone", r.Foreign)
			}
			got := fake.Calls()[before:]
			checkOnlyTheProviderCredential(t, got, o.key)
			if len(got) != 2 || got[0].API != c.api || got[1].API != c.api {
				t.Fatalf("the provider got %d calls (%+v), want the tool's call and the answer on %s", len(got), got, c.api)
			}
			for i, call := range got {
				rec := waitReceipt(t, s, call.Header.Get("X-Service-Request-Id"))
				if want := price[c.model]; rec.cost() != want || rec["complete"] != true {
					t.Errorf("call %d: receipt %s, want %d, complete", i+1, rec, want)
				}
			}
			charged, used = charged+2, used+2*price[c.model]
		})
	}
	s.waitUsed(t, o, charged, used)

	t.Run("blocked between the steps", func(t *testing.T) {
		big.Store(true)
		defer big.Store(false)
		reached, release := make(chan struct{}, 1), make(chan struct{})
		gate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case reached <- struct{}{}:
			default:
			}
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}))
		t.Cleanup(gate.Close)
		before := len(fake.Calls())
		refused := s.metric(t, "tollgate_enforcer_gateway_requests_total", "outcome", "refused")
		run := startSDK(t, dir, script, "tools", s.gateway, o.key, model, append(blockedEnv, "TOOL_GATE="+gate.URL)...)
		select {
		case <-reached:
		case <-time.After(30 * time.Second):
			t.Fatal("the agent's tool was not run within 30 s")
		}
		s.waitBlocked(t, o)
		close(release)
		r := run.result(t)
		if !r.blocked429() {
			t.Errorf("the agent's next step: %+v; want the 429 with both headers", r)
		}
		got := fake.Calls()[before:]
		if len(got) != 1 {
			t.Fatalf("the provider got %d calls, want the tool's call alone", len(got))
		}
		want := catalogCost(10_000_000, 0, 0)
		if rec := waitReceipt(t, s, got[0].Header.Get("X-Service-Request-Id")); rec.cost() != want || rec["complete"] != true {
			t.Errorf("the step taken: receipt %s, want %d, complete", rec, want)
		}
		if n := s.metric(t, "tollgate_enforcer_gateway_requests_total", "outcome", "refused") - refused; n != 1 {
			t.Errorf("the gateway refused %v calls, want the next step's", n)
		}
		s.waitUsed(t, o, charged+1, used+want)
	})
	return fake, s, o
}

// TestOpenAIAgentsSDKThroughTheGateway: OpenAI's Agents SDK (@openai/agents, e2e/sdk's
// pin), configured as its docs say for another endpoint (OPENAI_BASE_URL at the
// gateway's /v1, the member's Tollgate key as OPENAI_API_KEY), runs an agent with a tool
// on the SDK's default model, on the Responses API (its default), on chat completions
// and on the Responses API's WebSocket mode (at 0.20.0 a session for each response),
// run and streamed: two responses at the provider each (the tool's call and the
// answer), each charged exactly at the catalog's price of the default model, the tool
// run once. With its tracing on (the SDK's default outside NODE_ENV=test), the SDK
// exports its traces to api.openai.com with OPENAI_API_KEY, the member's key: the
// script keeps that request from leaving and the test holds what docs/gateway.md
// warns of, so that a release that stops doing it is noticed; with
// OPENAI_AGENTS_DISABLE_TRACING=1 (what the docs say to set) nothing but the gateway is
// called. Blocked, the run fails at once with the 429 and both headers, one refusal (the
// OpenAI client it runs on reads X-Should-Retry: false).
func TestOpenAIAgentsSDKThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)
	defaultModel := agentsDefaultModel(t, dir)
	const in, out = 10_000, 2_000
	fake, big, s, o := agentStack(t, in, out, tollCall)
	env := func(tracing bool) []string {
		e := []string{"OPENAI_BASE_URL=" + s.gateway + "/v1", "OPENAI_API_KEY=" + o.key}
		if !tracing {
			e = append(e, "OPENAI_AGENTS_DISABLE_TRACING=1")
		}
		return e
	}
	price := catalogCostOf(t, defaultModel, in, out)
	charged, used := 0, int64(0)
	for _, c := range []struct {
		scenario, api string
		tracing       bool
	}{
		{"agent", fakellm.OpenAIResponses, false},
		{"agent-stream", fakellm.OpenAIResponses, false},
		{"agent-chat", fakellm.OpenAIChat, false},
		{"agent-chat-stream", fakellm.OpenAIChat, false},
		{"agent-ws", fakellm.OpenAIResponsesWebSocket, false},
		{"agent-ws-stream", fakellm.OpenAIResponsesWebSocket, false},
		{"agent", fakellm.OpenAIResponses, true},
	} {
		name := c.scenario
		if c.tracing {
			name += ", tracing on"
		}
		t.Run(name, func(t *testing.T) {
			before := len(fake.Calls())
			r := runSDK(t, dir, "agents.mjs", c.scenario, s.gateway, o.key, "default", env(c.tracing)...)
			if !r.OK || r.Text != fakellm.Text || r.Steps != 2 || !slices.Equal(r.Tolls, []string{"A1"}) {
				t.Fatalf("the agent's run: %+v; want two steps, the toll of A1 paid once, and the answer", r)
			}
			// Two responses at the provider: two HTTP calls, or WebSocket sessions carrying
			// two messages in all (a session's call counts its messages when it ends).
			var got []fakellm.Call
			waitFor(t, 10*time.Second, "the provider's calls to end", func() bool {
				got = fake.Calls()[before:]
				return responsesIn(got) >= 2
			})
			checkOnlyTheProviderCredential(t, got, o.key)
			for _, call := range got {
				if call.API != c.api || (c.api != fakellm.OpenAIResponsesWebSocket && call.Model != defaultModel) {
					t.Errorf("the provider got %s for %q, want %s for the SDK's default model %q", call.API, call.Model, c.api, defaultModel)
				}
			}
			if n := responsesIn(got); n != 2 {
				t.Fatalf("the provider got %d responses to make (%+v), want the tool's call and the answer", n, got)
			}
			charged, used = charged+2, used+2*price
			s.waitUsed(t, o, charged, used)
			receipts := chargedReceipts(t, s, o)
			for i, r := range receipts[len(receipts)-2:] {
				if want := fmt.Sprint(price, " true"); r != want {
					t.Errorf("response %d charged %q, want %q (the catalog's price of %s, complete)", i+1, r, want, defaultModel)
				}
			}
			leaked := slices.ContainsFunc(r.Foreign, func(f foreignRequest) bool {
				return f.URL == "https://api.openai.com/v1/traces/ingest" && f.MemberKey
			})
			switch {
			case c.tracing && !leaked:
				t.Errorf("with tracing on, the program called %+v; want the trace export to api.openai.com with the member's key (docs/gateway.md warns of it: update them)", r.Foreign)
			case !c.tracing && len(r.Foreign) != 0:
				t.Errorf("with tracing off, the program called %+v; want the gateway alone", r.Foreign)
			}
		})
	}
	s.waitUsed(t, o, charged, used)

	// One more run that spends the rest of the limit, then a blocked one.
	big.Store(true)
	runSDK(t, dir, "agents.mjs", "agent", s.gateway, o.key, "default", env(false)...)
	s.waitBlocked(t, o)
	// Blocked: with the runner's retries off (its default), and on with a policy that
	// heeds the provider's advice (X-Should-Retry: false vetoes the retry its 429 status
	// would allow; a policy of the status alone waits out Retry-After, hours: docs).
	for _, policy := range []string{"", "suggested"} {
		t.Run("blocked, retry policy "+cmp.Or(policy, "none"), func(t *testing.T) {
			var r sdkResult
			refusedAtTheGateway(t, s, fake, 1, func() {
				r = runSDK(t, dir, "agents.mjs", "agent", s.gateway, o.key, "default", append(env(false), "AGENTS_RETRY_POLICY="+policy)...)
			})
			if !r.blocked429() {
				t.Errorf("blocked: %+v; want the 429 with both headers", r)
			}
		})
	}
}

// TestOpenAIAgentsSDKHandoffThroughTheGateway: an Agents SDK run in which a triage
// agent on the SDK's default model hands the task off to a toll clerk on another model
// (gpt-4o-mini), which runs its tool: three responses at the provider, the triage's on
// the default model and the clerk's two on its own, each charged exactly at its own
// model's catalog price, run and streamed on the Responses API. An agent's model is
// each call's own: the gateway charges what each call asked for and was answered.
func TestOpenAIAgentsSDKHandoffThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)
	defaultModel := agentsDefaultModel(t, dir)
	const in, out = 10_000, 2_000
	// The SDK offers a handoff as the tool transfer_to_<the agent's name, each character
	// not a letter or digit an underscore>.
	handoff := fakellm.ToolUse{Name: "transfer_to_Toll_clerk", Input: `{}`, Then: &tollCall}
	fake, _, s, o := agentStack(t, in, out, handoff)
	charged, used := 0, int64(0)
	for _, scenario := range []string{"agent-handoff", "agent-handoff-stream"} {
		t.Run(scenario, func(t *testing.T) {
			before := len(fake.Calls())
			r := runSDK(t, dir, "agents.mjs", scenario, s.gateway, o.key, model,
				"OPENAI_BASE_URL="+s.gateway+"/v1", "OPENAI_API_KEY="+o.key, "OPENAI_AGENTS_DISABLE_TRACING=1")
			if !r.OK || r.Text != fakellm.Text || r.Steps != 3 || !slices.Equal(r.Tolls, []string{"A1"}) || r.LastAgent != "Toll clerk" {
				t.Fatalf("the run: %+v; want three steps (the handoff, the tool's call, the answer), the toll of A1 paid once by the toll clerk", r)
			}
			got := fake.Calls()[before:]
			checkOnlyTheProviderCredential(t, got, o.key)
			wantModels := []string{defaultModel, model, model}
			if len(got) != len(wantModels) {
				t.Fatalf("the provider got %d calls (%+v), want the triage's and the clerk's two", len(got), got)
			}
			for i, call := range got {
				if call.API != fakellm.OpenAIResponses || call.Model != wantModels[i] {
					t.Errorf("call %d: %s for %q, want the Responses API for %q", i+1, call.API, call.Model, wantModels[i])
				}
				want := catalogCostOf(t, wantModels[i], in, out)
				if rec := waitReceipt(t, s, call.Header.Get("X-Service-Request-Id")); rec.cost() != want || rec["complete"] != true {
					t.Errorf("call %d (%s): receipt %s, want %d, complete", i+1, wantModels[i], rec, want)
				}
				charged, used = charged+1, used+want
			}
		})
	}
	s.waitUsed(t, o, charged, used)
}

// agentsDefaultModel is the model an Agents SDK agent runs on when it names none: the
// package's DEFAULT_OPENAI_MODEL, so that a release that changes it to a model the
// catalog does not price fails the tests that charge it.
func agentsDefaultModel(t *testing.T, dir string) string {
	t.Helper()
	return sdkDeclared(t, dir, "@openai/agents-openai/dist/defaults.d.ts", `DEFAULT_OPENAI_MODEL = "([^"]+)"`)
}

// refusedAtTheGateway runs call, a blocked member's program, and holds that the gateway
// refused times requests for it (1: nothing retried) and the provider got none.
func refusedAtTheGateway(t *testing.T, s *stack, fake *fakellm.Server, times int, call func()) {
	t.Helper()
	before := len(fake.Calls())
	refused := s.metric(t, "tollgate_enforcer_gateway_requests_total", "outcome", "refused")
	call()
	if n := s.metric(t, "tollgate_enforcer_gateway_requests_total", "outcome", "refused") - refused; n != float64(times) {
		t.Errorf("the gateway refused %v calls, want %d", n, times)
	}
	if n := len(fake.Calls()) - before; n != 0 {
		t.Errorf("blocked, the provider got %d calls", n)
	}
}

// tollCall is the agents' pay_toll tool called for the toll of A1.
var tollCall = fakellm.ToolUse{Name: "pay_toll", Input: `{"road":"A1"}`}

// agentStack is a stack whose provider asks for tool (tollCall, or a chain of calls)
// until a request carries its result, each answer reporting in input and out output
// tokens, or, once big is set, 10,000,000 input tokens (past the member's limit).
func agentStack(t *testing.T, in, out int64, tool fakellm.ToolUse) (fake *fakellm.Server, big *atomic.Bool, s *stack, o org) {
	t.Helper()
	big = new(atomic.Bool)
	fake = &fakellm.Server{Usage: func(fakellm.Call) fakellm.Usage {
		if big.Load() {
			return fakellm.Usage{InputTokens: 10_000_000}
		}
		return fakellm.Usage{InputTokens: in, OutputTokens: out}
	}, ToolUse: &tool}
	up := httptest.NewServer(fake)
	t.Cleanup(up.Close)
	s = startStack(t, gatewayEnv(up.URL))
	return fake, big, s, s.setUpOrg(t)
}

// responsesIn counts the responses the provider was asked for in calls: one an HTTP
// call, a WebSocket session's messages (its Body, once it ended).
func responsesIn(calls []fakellm.Call) int {
	n := 0
	for _, c := range calls {
		if c.API != fakellm.OpenAIResponsesWebSocket {
			n++
			continue
		}
		m, _ := strconv.Atoi(string(c.Body))
		n += m
	}
	return n
}

// TestVoiceAgentThroughTheGateway: a voice agent of OpenAI's Agents SDK
// (@openai/agents-realtime's RealtimeSession over its WebSocket transport, the SDK's
// default realtime model) holds a session through the gateway's /v1/realtime with the
// member's key: each of its two answers is a response of its own, charged exactly at the
// catalog's price of that model, and the provider sees its own key alone. Once a session
// spent the limit, the next one's handshake is refused with the 429 (the voice.mjs
// script reports the status the ws package gives it in its error's message).
func TestVoiceAgentThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)
	defaultModel := sdkDeclared(t, dir, "@openai/agents-realtime/dist/openaiRealtimeBase.mjs", `DEFAULT_OPENAI_REALTIME_MODEL = '([^']+)'`)
	const in, out = 10_000, 2_000
	var dear atomic.Bool // the second session's: its two answers spend past the limit
	fake := &fakellm.Server{Usage: func(fakellm.Call) fakellm.Usage {
		if dear.Load() {
			return fakellm.Usage{InputTokens: 10 * in, OutputTokens: 5 * out}
		}
		return fakellm.Usage{InputTokens: in, OutputTokens: out}
	}}
	up := httptest.NewServer(fake)
	t.Cleanup(up.Close)
	s := startStack(t, gatewayEnv(up.URL))
	o := s.setUpOrg(t)
	price, dearPrice := catalogCostOf(t, defaultModel, in, out), catalogCostOf(t, defaultModel, 10*in, 5*out)
	if 2*price+dearPrice >= usd || 2*price+2*dearPrice < usd {
		t.Fatalf("answers cost %d and %d micro-USD: the test wants the second session's second answer to spend the 1 USD limit, its first not to", price, dearPrice)
	}

	r := runSDK(t, dir, "voice.mjs", "voice", s.gateway, o.key, "default")
	if !r.OK || r.Chunks != 2 {
		t.Fatalf("the voice session: %+v; want two answers", r)
	}
	var calls []fakellm.Call
	waitFor(t, 10*time.Second, "the session to end at the provider", func() bool {
		calls = fake.Calls()
		return len(calls) == 1 && len(calls[0].Body) > 0
	})
	checkOnlyTheProviderCredential(t, calls, o.key)
	if calls[0].API != fakellm.OpenAIRealtime || calls[0].Model != defaultModel {
		t.Errorf("the provider got %s for %q, want a Realtime session of the SDK's default model %q", calls[0].API, calls[0].Model, defaultModel)
	}
	s.waitUsed(t, o, 2, 2*price)
	if got, want := chargedReceipts(t, s, o), []string{fmt.Sprint(price, " true"), fmt.Sprint(price, " true")}; !slices.Equal(got, want) {
		t.Errorf("charged %q, want each answer's %q", got, want)
	}

	// A session whose two answers spend the limit, then one refused at its handshake.
	dear.Store(true)
	if r := runSDK(t, dir, "voice.mjs", "voice", s.gateway, o.key, "default"); !r.OK || r.Chunks != 2 {
		t.Fatalf("the second session: %+v; want two answers", r)
	}
	s.waitUsed(t, o, 4, 2*price+2*dearPrice)
	s.waitBlocked(t, o)
	r = runSDK(t, dir, "voice.mjs", "voice", s.gateway, o.key, "default")
	if r.OK || r.Status != 429 || len(fake.Calls()) != 2 {
		t.Errorf("a blocked member's session: %+v; the provider got %d sessions, want 2", r, len(fake.Calls()))
	}
}

// sdkDeclared is what pattern's first group matches in an SDK package's file (its
// path under e2e/sdk/node_modules): a default the package declares.
func sdkDeclared(t *testing.T, dir, file, pattern string) string {
	t.Helper()
	path := filepath.Join(dir, "node_modules", filepath.FromSlash(file))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(pattern).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no %s in %s: has the package's shape changed?", pattern, path)
	}
	return string(m[1])
}
