package e2e_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/e2e/fakellm"
	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
)

// bedrockProviderAuth is the provider's Bedrock API key that bedrockGateway's route sends.
const bedrockProviderAuth = "Bearer bedrock-provider-key-0123456789"

// bedrockGateway is a stack whose gateway routes every path to a fakellm answering every
// call with usage u, with the provider's Bedrock API key (bedrockProviderAuth) as its
// Authorization, and an organization on it.
func bedrockGateway(t *testing.T, u fakellm.Usage) (*fakellm.Server, *stack, org) {
	t.Helper()
	return routedGateway(t, u, "authorization", bedrockProviderAuth)
}

// TestBedrockPriorityThroughTheGateway: AWS's official SDK's Converse and ConverseStream
// calls at Bedrock's priority tier (serviceTier {"type": "priority"}), answered with that
// serviceTier, and its InvokeModel call at it (serviceTier "priority": the
// X-Amzn-Bedrock-Service-Tier header, which its answer echoes), are charged the model's
// fast percent of its price (Amazon Nova Pro: the default, twice; AWS publishes a
// "premium" without its ratio, and twice bounds any premium up to the standard price);
// the same call at the default tier the price. Before 2026-11-29 they were charged the
// price; InvokeModel's, before 2026-11-30's fourth session.
func TestBedrockPriorityThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	fake, s, o := bedrockGateway(t, fakellm.Usage{InputTokens: 10_000, OutputTokens: 1_000})
	const model = "us.amazon.nova-pro-v1:0"
	e, standard := tenThousandIn(t, "nova-pro")
	if e.FastPercent != 0 || e.RegionalPremiumPercent != 0 {
		t.Fatalf("nova-pro: %+v; this test charges the default fast percent and no regional premium", e)
	}
	for _, tc := range []struct {
		scenario, tier, served string
		cost                   int64
	}{
		{"converse-priority", "fast", `"serviceTier":{"type":"priority"}`, 2 * standard},
		{"converse-stream-priority", "fast", `"serviceTier":{"type":"priority"}`, 2 * standard},
		{"invoke-priority", "fast", `"serviceTier":"priority"`, 2 * standard},
		{"converse", "", `"serviceTier":{"type":"default"}`, standard},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			before := len(fake.Calls())
			r := runSDK(t, dir, "bedrock.mjs", tc.scenario, s.gateway, o.key, model)
			calls := fake.Calls()[before:]
			if !r.OK || r.Status != 200 || len(calls) != 1 || !strings.Contains(string(r.Usage), tc.served) {
				t.Fatalf("the call: %+v (usage %s); %d provider calls", r, r.Usage, len(calls))
			}
			rec := waitReceipt(t, s, calls[0].Header.Get("X-Service-Request-Id"))
			if rec.cost() != tc.cost || rec["complete"] != true || rec["service_tier"] != tc.tier {
				t.Fatalf("receipt %s, want %d at tier %q", rec, tc.cost, tc.tier)
			}
		})
	}
}

// TestBedrockLatencyOptimizedThroughTheGateway: AWS's official SDK's calls at Bedrock's
// latency-optimized inference (Converse's and ConverseStream's performanceConfig
// {"latency": "optimized"}, InvokeModel's performanceConfigLatency, a header), answered
// as served at it, are charged a quarter above the model's price (Amazon Nova Pro, Claude
// 3.5 Haiku), the receipt at the tier latency_optimized. Before 2026-11-30's fourth
// session they were charged the standard price, a fifth below the bill.
func TestBedrockLatencyOptimizedThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	fake, s, o := bedrockGateway(t, fakellm.Usage{InputTokens: 10_000, OutputTokens: 1_000})
	for _, tc := range []struct {
		scenario, model, entry, served string
	}{
		{"converse-latency", "us.amazon.nova-pro-v1:0", "nova-pro", `"performanceConfig":{"latency":"optimized"}`},
		{"converse-stream-latency", "us.amazon.nova-pro-v1:0", "nova-pro", `"performanceConfig":{"latency":"optimized"}`},
		{"invoke-latency", "us.anthropic.claude-3-5-haiku-20241022-v1:0", "claude-3-5-haiku", `"performanceConfigLatency":"optimized"`},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			e, _ := tenThousandIn(t, tc.entry)
			if e.RegionalPremiumPercent != 0 {
				t.Fatalf("%s: %+v; this test charges no regional premium", tc.entry, e)
			}
			// The tier's percent of the whole cost, rounded up once.
			want := ceilDiv((10_000*e.InputPerMillion+1_000*e.OutputPerMillion)*125, 100*1_000_000)
			before := len(fake.Calls())
			r := runSDK(t, dir, "bedrock.mjs", tc.scenario, s.gateway, o.key, tc.model)
			calls := fake.Calls()[before:]
			if !r.OK || r.Status != 200 || len(calls) != 1 || !strings.Contains(string(r.Usage), tc.served) {
				t.Fatalf("the call: %+v (usage %s); %d provider calls", r, r.Usage, len(calls))
			}
			rec := waitReceipt(t, s, calls[0].Header.Get("X-Service-Request-Id"))
			if rec.cost() != want || rec["complete"] != true || rec["service_tier"] != "latency_optimized" {
				t.Fatalf("receipt %s, want %d at tier latency_optimized", rec, want)
			}
		})
	}
}

// TestBedrockOpenModelsThroughTheGateway: AWS's official SDK calls the open models Amazon
// Bedrock hosts (Meta's Llama, OpenAI's gpt-oss, Qwen, DeepSeek, Kimi, Gemma, Amazon's Nova 2 Lite) by their
// Bedrock ids, in-region and through cross-region profiles, Converse and ConverseStream.
// Each is charged exactly at the catalog's price of its entry, found from the id
// (llama3-3-70b-instruct from meta.llama3-3-70b-instruct-v1:0), and the receipt is priced
// from the catalog: before 2026-11-29 they had no entry and were charged the fallback
// price, the catalog's highest, a few hundred times theirs. Nova 2 Lite and Kimi K3 cost
// 10% more through a geographic profile than through the global one, as AWS prices them.
func TestBedrockOpenModelsThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	fake, s, o := bedrockGateway(t, fakellm.Usage{InputTokens: 10_000, OutputTokens: 1_000})
	for _, tc := range []struct {
		scenario, id, entry string
		premium             bool
	}{
		{"converse", "us.meta.llama3-3-70b-instruct-v1:0", "llama3-3-70b-instruct", false},
		{"converse-stream", "meta.llama4-maverick-17b-instruct-v1:0", "llama4-maverick-17b-instruct", false},
		{"converse", "openai.gpt-oss-120b-1:0", "openai.gpt-oss-120b", false},
		{"converse-stream", "qwen.qwen3-coder-30b-a3b-v1:0", "qwen3-coder-30b-a3b", false},
		{"converse", "us.deepseek.r1-v1:0", "deepseek.r1", false},
		{"converse", "global.amazon.nova-2-lite-v1:0", "nova-2-lite", false},
		{"converse-stream", "us.amazon.nova-2-lite-v1:0", "nova-2-lite", true},
		// The models of late 2025 and 2026, whose ids have no version.
		{"converse", "moonshot.kimi-k2-thinking", "moonshot.kimi-k2-thinking", false},
		{"converse-stream", "deepseek.v3.2", "deepseek.v3.2", false},
		{"converse", "google.gemma-3-27b-it", "google.gemma-3-27b-it", false},
		{"converse", "global.moonshotai.kimi-k3", "moonshotai.kimi-k3", false},
		{"converse-stream", "us.moonshotai.kimi-k3", "moonshotai.kimi-k3", true},
	} {
		t.Run(tc.scenario+" "+tc.id, func(t *testing.T) {
			e, want := tenThousandIn(t, tc.entry)
			if tc.premium {
				var ok bool
				if want, ok = pricecatalog.RegionalPremium(want, e.RegionalPremiumPercent); !ok || e.RegionalPremiumPercent != 10 {
					t.Fatalf("%s's regional premium: %d%%", tc.entry, e.RegionalPremiumPercent)
				}
			}
			rec := oneSDKCall(t, fake, s, dir, "bedrock.mjs", tc.scenario, o.key, tc.id)
			if rec.cost() != want || rec["price_source"] != "catalog" || rec["complete"] != true {
				t.Fatalf("receipt %s, want %d micro-USD at the catalog's price of %s", rec, want, tc.entry)
			}
		})
	}
}

// TestBedrockOneHourCacheWritesThroughTheGateway: Bedrock Converse says which cache writes
// were made for an hour (usage.cacheDetails, ttl "1h"), which cost twice the input where
// the five-minute ones cost 1.25 times it. The official SDK's Converse and ConverseStream
// calls, 1,000 writes of which 400 for an hour, are charged each part at its price.
// Before 2026-11-29 every write was charged the five-minute price.
func TestBedrockOneHourCacheWritesThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	fake, s, o := bedrockGateway(t, fakellm.Usage{InputTokens: 2_000, CacheCreationInputTokens: 1_000, CacheCreation1hInputTokens: 400, OutputTokens: 100})
	const modelID = "global.anthropic.claude-sonnet-4-5-20250929-v1:0"
	e, ok := pricecatalog.Lookup("claude-sonnet-4-5")
	if !ok || e.CacheWritePerMillion == nil {
		t.Fatalf("claude-sonnet-4-5: %+v", e)
	}
	want := ceilDiv(2_000*e.InputPerMillion+600**e.CacheWritePerMillion+400*2*e.InputPerMillion+100*e.OutputPerMillion, 1_000_000)
	for _, scenario := range []string{"converse", "converse-stream"} {
		t.Run(scenario, func(t *testing.T) {
			rec := oneSDKCall(t, fake, s, dir, "bedrock.mjs", scenario, o.key, modelID)
			if rec.cost() != want || rec["complete"] != true || rec["cache_creation_input_tokens"] != 1_000.0 {
				t.Fatalf("receipt %s, want %d", rec, want)
			}
		})
	}
}

// TestBedrockThroughTheGateway: AWS's official JavaScript SDK
// (@aws-sdk/client-bedrock-runtime) calls Amazon Bedrock Runtime through the gateway
// with a Bedrock API key, here the member's Tollgate key (Authorization: Bearer, no
// SigV4), and the gateway's route sends the provider's Bedrock API key the same way.
// A Claude model is invoked four ways: InvokeModel (Anthropic's message, the counts also
// in Bedrock's headers), InvokeModelWithResponseStream (Anthropic's stream events in
// AWS's binary event stream), Converse and ConverseStream (Bedrock's own shapes). The
// model is named by its in-region id, by the global cross-region inference profile
// (invoke stream) and by a geographic one (converse stream). The member's key never
// reaches the provider; each call is charged exactly at the catalog's price of
// claude-sonnet-4-5 from the usage the answer reports (input, cache reads, cache writes,
// output), complete, with the model's 10% premium of regional endpoints except the
// global profile's call;
// a blocked member's call is the 429 with its code, fast, and does not reach the
// provider. (bedrock.mjs makes one attempt: the SDK's default retry strategy would send
// a 429 three times, as it reads no X-Should-Retry.)
func TestBedrockThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)
	const providerAuth = bedrockProviderAuth
	// Bedrock, as Anthropic, counts the input without the cache reads and writes.
	fake, s, o := bedrockGateway(t, cloudClaudeUsage)

	// A model id without the global. prefix (in-region, or a geographic inference
	// profile) is a regional endpoint: the model's premium on top.
	global, regional := cloudClaudeCost(t)
	// The block below lowers the member's limit to 0.01 USD: four calls must be over it,
	// and their sum far from the 1 USD limit they are made under.
	if global <= usd/100 || 4*regional >= usd {
		t.Fatalf("the test's own arithmetic: %d micro-USD a call", global)
	}

	const modelID = "anthropic.claude-sonnet-4-5-20250929-v1:0"
	n, total := 0, int64(0)
	for _, tc := range []struct {
		scenario, model, api, operation string
		stream                          bool
		// usage: what the SDK's result shows of the answer's usage.
		usage []string
	}{
		{"invoke", modelID, fakellm.BedrockInvoke, "invoke", false,
			[]string{`"input_tokens":10000`, `"cache_read_input_tokens":2000`, `"cache_creation_input_tokens":1000`, `"output_tokens":1000`}},
		{"invoke-stream", "global." + modelID, fakellm.BedrockInvokeStream, "invoke-with-response-stream", true,
			[]string{`"input_tokens":10000`, `"cache_read_input_tokens":2000`, `"output_tokens":1000`, `"inputTokenCount":10000`}},
		{"converse", modelID, fakellm.BedrockConverse, "converse", false,
			[]string{`"inputTokens":10000`, `"cacheReadInputTokens":2000`, `"cacheWriteInputTokens":1000`, `"outputTokens":1000`, `"totalTokens":14000`}},
		{"converse-stream", "us." + modelID, fakellm.BedrockConverseStream, "converse-stream", true,
			[]string{`"inputTokens":10000`, `"cacheReadInputTokens":2000`, `"cacheWriteInputTokens":1000`, `"outputTokens":1000`}},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			before := len(fake.Calls())
			r := runSDK(t, dir, "bedrock.mjs", tc.scenario, s.gateway, o.key, tc.model)
			if !r.OK || r.Status != 200 || r.Text != fakellm.Text {
				t.Fatalf("the call failed or lost its text: %+v", r)
			}
			for _, u := range tc.usage {
				if !strings.Contains(string(r.Usage), u) {
					t.Errorf("the SDK's usage %s lacks %s", r.Usage, u)
				}
			}
			calls := fake.Calls()[before:]
			if len(calls) != 1 {
				t.Fatalf("the provider got %d calls: %+v", len(calls), calls)
			}
			call := calls[0]
			// The SDK percent-encodes the model id in the path (":" as %3A); the
			// provider gets the path as the SDK sent it, which names the model.
			if call.API != tc.api || call.Model != tc.model || call.Stream != tc.stream || call.Path != "/model/"+tc.model+"/"+tc.operation {
				t.Fatalf("the provider got %s %s (API %q, model %q, stream %v), want %s for %s", call.Method, call.Path, call.API, call.Model, call.Stream, tc.api, tc.model)
			}
			// Only the route's credential, once; nothing of the member's key; nothing a
			// SigV4 signature would have added.
			if a := call.Header.Values("Authorization"); len(a) != 1 || a[0] != providerAuth {
				t.Errorf("the provider got Authorization %q, want only the route's", a)
			}
			all := strings.Join(flatten(call.Header), "\n")
			if strings.Contains(all, o.key) || strings.Contains(all, "tgk_") {
				t.Errorf("the member's Tollgate key reached the provider: %v", call.Header)
			}
			for _, h := range []string{"X-Amz-Date", "X-Amz-Security-Token", "X-Amz-Content-Sha256"} {
				if v := call.Header.Get(h); v != "" {
					t.Errorf("the SDK signed with SigV4: the provider got %s: %s", h, v)
				}
			}
			t.Logf("the provider got %s %s, user agent %q, accept-encoding %q, answered gzip %v", call.Method, call.Path,
				call.Header.Get("User-Agent"), call.Header.Get("Accept-Encoding"), call.Gzip)

			rec := waitReceipt(t, s, call.Header.Get("X-Service-Request-Id"))
			n++
			want := regional
			if strings.HasPrefix(tc.model, "global.") {
				want = global
			}
			total += want
			model, _ := rec["model"].(string)
			t.Logf("receipt: model %q, cost %d (want %d), complete %v, cost_basis %v, price_source %v, cost_source %v; tokens: input %v, cached %v, cache writes %v, output %v",
				model, rec.cost(), want, rec["complete"], rec["cost_basis"], rec["price_source"], rec["cost_source"],
				rec["input_tokens"], rec["cached_input_tokens"], rec["cache_creation_input_tokens"], rec["output_tokens"])
			if rec.cost() != want || rec["complete"] != true || rec["cost_basis"] != "reported_usage" || rec["price_source"] != "catalog" {
				t.Errorf("receipt %s, want %d micro-USD, complete, from the reported usage at the catalog's price", rec, want)
			}
			// The receipt says why it costs the premium.
			if regionalCall := want == regional; rec["regional_endpoint"] != regionalCall {
				t.Errorf("receipt %s, want regional_endpoint %v", rec, regionalCall)
			}
			if !strings.Contains(model, cloudClaude) {
				t.Errorf("the receipt's model is %q, want one naming %s", model, cloudClaude)
			}
			if rec["output_tokens"] != 1_000.0 || rec["cached_input_tokens"] != 2_000.0 || rec["cache_creation_input_tokens"] != 1_000.0 {
				t.Errorf("receipt %s, want 1,000 output tokens, 2,000 cache reads, 1,000 cache writes", rec)
			}
		})
	}
	s.waitUsed(t, o, n, total)

	t.Run("a blocked member gets the 429, not retried", func(t *testing.T) {
		// The member has spent 4 calls' cost; a limit of 0.01 USD is below it.
		s.guardPolicy(t, o, "0.01", nil)
		s.waitBlocked(t, o)
		refusedBefore := s.metric(t, "tollgate_enforcer_gateway_requests_total", "outcome", "refused")
		before := len(fake.Calls())
		for _, scenario := range []string{"invoke", "converse-stream"} {
			// The code in the body (the AWS SDK's error carries the body's "error"
			// object) and in X-Service-Error-Code, X-Should-Retry false, within 2 s.
			runSDK(t, dir, "bedrock.mjs", scenario, s.gateway, o.key, modelID).wasRefusedFast(t)
		}
		if got := len(fake.Calls()) - before; got != 0 {
			t.Errorf("refused calls reached the provider (%d calls)", got)
		}
		// bedrock.mjs makes one attempt: with its defaults the SDK would retry the 429
		// twice (it reads neither X-Should-Retry nor the body's code).
		if got := s.metric(t, "tollgate_enforcer_gateway_requests_total", "outcome", "refused") - refusedBefore; got != 2 {
			t.Errorf("the gateway refused %v requests, want 2 (one per call)", got)
		}
		if st := s.status(t, o); st.Buckets[0].UsedMicroUsd != total {
			t.Errorf("used %d after the refusals, want %d", st.Buckets[0].UsedMicroUsd, total)
		}
	})
}

// cloudClaude is the model the cloud tests call (Bedrock's and Vertex AI's Claude), and
// cloudClaudeUsage the usage their fake provider answers: 10,000 input tokens (without
// the cache, as Anthropic counts), 2,000 cache reads, 1,000 cache writes, 1,000 output.
const cloudClaude = "claude-sonnet-4-5"

var cloudClaudeUsage = fakellm.Usage{InputTokens: 10_000, CachedInputTokens: 2_000, CacheCreationInputTokens: 1_000, OutputTokens: 1_000}

// cloudClaudeCost is what a call of cloudClaude with cloudClaudeUsage costs at the
// catalog's price on a cloud's global endpoint, and on a regional one (its 10% premium,
// rounded up).
func cloudClaudeCost(t *testing.T) (global, regional int64) {
	t.Helper()
	e, ok := pricecatalog.Lookup(cloudClaude)
	if !ok || e.CacheWritePerMillion == nil || e.RegionalPremiumPercent != 10 {
		t.Fatalf("%s is not in the catalog with a cache-write price and a 10%% regional premium: %+v", cloudClaude, e)
	}
	u := cloudClaudeUsage
	global = ceilDiv(u.InputTokens*e.InputPerMillion+u.CachedInputTokens*e.CachedInputPerMillion+
		u.CacheCreationInputTokens**e.CacheWritePerMillion+u.OutputTokens*e.OutputPerMillion, 1_000_000)
	return global, ceilDiv(global*110, 100)
}

// TestBedrockGuardrailsThroughTheGateway: AWS's official SDK calls Amazon Bedrock with a
// guardrail, Converse and ConverseStream (guardrailConfig), InvokeModel and its stream
// (guardrailIdentifier, headers on the wire), none asking for the guardrail's trace. The
// gateway asks for it (the provider gets trace "enabled", X-Amzn-Bedrock-Trace: ENABLED),
// the answer's trace says what the guardrail assessed, and each call is charged its tokens
// and its guardrail's units at the catalog's guardrail prices: the prompt's 2 text units
// and the answer's 1, by the content filter and the denied topics each. A prompt the
// guardrail refused is charged its guardrail alone: the model never ran; so is the
// guardrail called on its own (ApplyGuardrail), no model, and the detect-only guardrail
// checks (InvokeGuardrailChecks) at their own prices. Before 2026-11-29 a guardrail
// was charged nothing, and ApplyGuardrail's text as a prompt of no model, at the fallback
// price.
func TestBedrockGuardrailsThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	fake, s, o := bedrockGateway(t, fakellm.Usage{InputTokens: 10_000, OutputTokens: 1_000, GuardrailInputUnits: 2, GuardrailOutputUnits: 1})
	const model = "us.amazon.nova-pro-v1:0"
	_, tokens := tenThousandIn(t, "nova-pro")
	prices := pricecatalog.At(time.Now()).Guardrails()
	if prices.ContentText <= 0 || prices.DeniedTopics <= 0 {
		t.Fatalf("the catalog prices no content filter or denied topics: %+v", prices)
	}
	// Text units are priced per 1,000, the whole rounded up once.
	guard := func(units int64) int64 { return ceilDiv(units*(prices.ContentText+prices.DeniedTopics), 1000) }
	for _, tc := range []struct {
		scenario string
		header   bool // InvokeModel: the trace asked for by a header, not in the body
		cost     int64
	}{
		{"converse-guardrail", false, tokens + guard(3)},
		{"converse-stream-guardrail", false, tokens + guard(3)},
		{"invoke-guardrail", true, tokens + guard(3)},
		{"invoke-stream-guardrail", true, tokens + guard(3)},
		{"converse-guardrail-blocked", false, guard(2)},
		// A guardrail called on its own: its units, no model, no token.
		{"apply-guardrail", false, guard(2)},
		// The detect-only checks, content filter and prompt attack: 2 text units each at
		// their own prices.
		{"guardrail-checks", false, ceilDiv(2*(prices.ChecksContentFilter+prices.ChecksPromptAttack), 1000)},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			before := len(fake.Calls())
			r := runSDK(t, dir, "bedrock.mjs", tc.scenario, s.gateway, o.key, model)
			calls := fake.Calls()[before:]
			if !r.OK || r.Status != 200 || len(calls) != 1 || !strings.Contains(string(r.Usage), `"contentPolicyUnits":2`) &&
				!strings.Contains(string(r.Usage), `"promptAttack":{"textUnits":2}`) {
				t.Fatalf("the call: %+v (usage %s); %d provider calls", r, r.Usage, len(calls))
			}
			if tc.scenario == "apply-guardrail" || tc.scenario == "guardrail-checks" {
				// Its body goes as it came; its answer's usage is the guardrail's.
				if api := map[bool]string{true: fakellm.BedrockApplyGuardrail, false: fakellm.BedrockGuardrailChecks}[tc.scenario == "apply-guardrail"]; calls[0].API != api ||
					strings.Contains(string(calls[0].Body), "trace") {
					t.Fatalf("the provider got %s %s", calls[0].Path, calls[0].Body)
				}
			} else if tc.header {
				if got := calls[0].Header.Get("X-Amzn-Bedrock-Trace"); got != "ENABLED" || calls[0].Header.Get("X-Amzn-Bedrock-GuardrailIdentifier") != "gr-tolls" {
					t.Fatalf("the provider got X-Amzn-Bedrock-Trace %q", got)
				}
			} else if !strings.Contains(string(calls[0].Body), `"trace":"enabled"`) {
				t.Fatalf("the provider got %s", calls[0].Body)
			}
			if strings.HasSuffix(tc.scenario, "-blocked") && !strings.Contains(string(r.Usage), `"stopReason":"guardrail_intervened"`) {
				t.Fatalf("not refused by the guardrail: %s", r.Usage)
			}
			rec := waitReceipt(t, s, calls[0].Header.Get("X-Service-Request-Id"))
			if rec.cost() != tc.cost || rec["complete"] != true {
				t.Fatalf("receipt %s, want %d micro-USD (tokens %d)", rec, tc.cost, tokens)
			}
		})
	}
}

// TestBedrockCountTokensThroughTheGateway: AWS's SDK counts a Converse request's input
// through the gateway (CountTokens), which AWS does not charge: the provider answers it,
// and it is settled at 0. Before 2026-11-29 its input estimate was charged at the model's
// price.
func TestBedrockCountTokensThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	fake, s, o := bedrockGateway(t, fakellm.Usage{InputTokens: 12})
	r := runSDK(t, dir, "bedrock.mjs", "count-tokens", s.gateway, o.key, "us.amazon.nova-pro-v1:0")
	calls := fake.Calls()
	if !r.OK || r.Status != 200 || len(calls) != 1 || calls[0].API != fakellm.BedrockCountTokens || !strings.Contains(string(r.Usage), `"inputTokens":12`) {
		t.Fatalf("the call: %+v (usage %s); provider calls %+v", r, r.Usage, calls)
	}
	rec := waitReceipt(t, s, calls[0].Header.Get("X-Service-Request-Id"))
	if rec.cost() != 0 || rec["complete"] != true {
		t.Fatalf("receipt %s, want 0", rec)
	}
}
