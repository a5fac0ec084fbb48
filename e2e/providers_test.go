package e2e_test

import (
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/e2e/fakellm"
	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
)

// TestOpenAICompatibleProvidersThroughTheGateway: the official OpenAI SDK calls the
// OpenAI-compatible APIs of DeepSeek, xAI and Mistral through the gateway (one route
// with the provider's key), by the names their users send, streamed and not. Each is
// charged exactly at its catalog entry's price, found from the name (a -latest alias,
// a dated snapshot, a retired name its provider bills as another model), and the receipt
// is priced from the catalog: before 2026-11-29 the catalog had no entry of these
// providers, and each call was charged the fallback price, the catalog's highest, a
// hundred to several thousand times its own.
func TestOpenAICompatibleProvidersThroughTheGateway(t *testing.T) {
	t.Parallel()
	// Each model is called by the name its users send, and charged exactly its entry's
	// price (10,000 tokens in, 1,000 out).
	dir := sdkDir(t)
	fake, s, o := routedGateway(t, fakellm.Usage{InputTokens: 10_000, OutputTokens: 1_000}, "authorization", "Bearer provider-key")
	for _, tc := range []struct{ scenario, model, entry string }{
		{"json", "deepseek-v4-flash", "deepseek-v4-flash"},
		{"stream", "deepseek-v4-pro", "deepseek-v4-pro"},
		{"json", "grok-4.3", "grok-4.3"},
		{"stream", "grok-4-1-fast-reasoning", "grok-4"}, // retired, billed as grok-4.3
		{"json", "mistral-large-latest", "mistral-large"},
		{"stream", "mistral-small-2503", "mistral-small"},
		{"json", "codestral-2508", "codestral"},
		// The open models' other hosts (Groq, Cerebras, Together, Fireworks), by the
		// names their users send; a name several serve is charged the dearest's price.
		{"stream", "llama-3.3-70b-versatile", "llama-3.3-70b-versatile"},
		{"json", "openai/gpt-oss-120b", "gpt-oss-120b"},
		{"stream", "qwen-3.8-27b", "qwen-3.8-27b"},
		{"json", "meta-llama/Llama-3.3-70B-Instruct-Turbo", "llama-3.3-70b-instruct-turbo"},
		{"stream", "moonshotai/Kimi-K2-Instruct-0905", "kimi-k2-instruct-0905"},
		{"json", "accounts/fireworks/models/deepseek-v3p2", "deepseek-v3p2"},
		{"stream", "accounts/fireworks/models/kimi-k2p6", "kimi-k2p6"},
	} {
		t.Run(tc.scenario+" "+tc.model, func(t *testing.T) {
			_, want := tenThousandIn(t, tc.entry)
			rec := oneSDKCall(t, fake, s, dir, "openai.mjs", tc.scenario, o.key, tc.model)
			if rec.cost() != want || rec["price_source"] != "catalog" || rec["complete"] != true || rec["model"] != tc.model {
				t.Fatalf("receipt %s, want %d micro-USD for %s at the catalog's price of %s", rec, want, tc.model, tc.entry)
			}
		})
	}
}

// TestPerplexityThroughTheGateway: Perplexity's usage.cost is an object of the cost's
// parts (its tokens', its request fee, which no token count shows) with their total_cost.
// The official OpenAI SDK's call to sonar-pro, streamed and not, is charged that total
// exactly (cost basis upstream_cost); before 2026-11-29 the object was not read, and the
// call was charged its tokens at the fallback price, the catalog's highest. An answer
// without its cost is charged at the catalog's price of its model, request fee included.
func TestPerplexityThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	fake, s, o := routedGateway(t, fakellm.Usage{InputTokens: 480, OutputTokens: 2_823, CostUSD: "0.0517805", CostParts: true},
		"authorization", "Bearer pplx-key")
	for _, scenario := range []string{"json", "stream"} {
		t.Run(scenario, func(t *testing.T) {
			rec := oneSDKCall(t, fake, s, dir, "openai.mjs", scenario, o.key, "sonar-pro")
			if rec.cost() != 51_781 || rec["cost_basis"] != "upstream_cost" || rec["complete"] != true {
				t.Fatalf("receipt %s, want the 51,781 micro-USD Perplexity reported (0.0517805 USD, rounded up)", rec)
			}
		})
	}
	// An answer that reports no cost is charged its tokens at the catalog's price of
	// sonar-pro and its request fee, the dearest (14 USD per 1,000: search_context_size
	// high), which no token count shows.
	t.Run("no cost reported", func(t *testing.T) {
		fake, s, o := routedGateway(t, fakellm.Usage{InputTokens: 480, OutputTokens: 2_823}, "authorization", "Bearer pplx-key")
		e, _ := tenThousandIn(t, "sonar-pro")
		if !e.SearchesEveryRequest || e.WebSearchPerPrompt != 14_000 {
			t.Fatalf("sonar-pro: %+v", e)
		}
		want := ceilDiv(480*e.InputPerMillion+2_823*e.OutputPerMillion, 1_000_000) + 14_000
		rec := oneSDKCall(t, fake, s, dir, "openai.mjs", "json", o.key, "sonar-pro")
		if rec.cost() != want || rec["price_source"] != "catalog" {
			t.Fatalf("receipt %s, want %d micro-USD: its tokens and its request fee", rec, want)
		}
	})
}

// TestGrokThinkingIsCharged: xAI's chat usage leaves a reasoning model's thinking out of
// completion_tokens and counts it in total_tokens; xAI bills it as output. The official
// OpenAI SDK's call to grok-4.3, streamed and not, is charged its 1,000 completion and
// 4,000 thinking tokens as output; before 2026-11-29 the thinking was free.
// TestGrokReportedCostIsCharged: xAI's answers report what they cost, tokens and
// server-side tools (web and X search, code execution) together, as
// usage.cost_in_usd_ticks (1e-10 USD); the gateway charges it as the upstream's cost,
// rounded up to micro-USD, in chat completions (streamed and not) and the Responses API.
func TestGrokReportedCostIsCharged(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	// grok-4.3's tokens (1.25 / 2.50 USD per million: 3,750 micro-USD) and three X
	// searches (15,000 micro-USD), as xAI billed them: 18,750.0001 micro-USD.
	fake, s, o := routedGateway(t, fakellm.Usage{InputTokens: 1_000, OutputTokens: 1_000, CostTicks: 187_500_001}, "authorization", "Bearer xai-key")
	for _, scenario := range []string{"json", "stream", "responses"} {
		t.Run(scenario, func(t *testing.T) {
			rec := oneSDKCall(t, fake, s, dir, "openai.mjs", scenario, o.key, "grok-4.3")
			if rec.cost() != 18_751 || rec["cost_basis"] != "upstream_cost" || rec["complete"] != true {
				t.Fatalf("receipt %s, want the 18,751 micro-USD xAI reported (187,500,001 ticks, rounded up)", rec)
			}
		})
	}
}

func TestGrokThinkingIsCharged(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	fake, s, o := routedGateway(t, fakellm.Usage{InputTokens: 10_000, OutputTokens: 1_000, ReasoningApart: 4_000}, "authorization", "Bearer xai-key")
	e, _ := tenThousandIn(t, "grok-4.3")
	want := ceilDiv(10_000*e.InputPerMillion+5_000*e.OutputPerMillion, 1_000_000)
	for _, scenario := range []string{"json", "stream"} {
		t.Run(scenario, func(t *testing.T) {
			rec := oneSDKCall(t, fake, s, dir, "openai.mjs", scenario, o.key, "grok-4.3")
			if rec.cost() != want || rec["output_tokens"] != 5_000.0 || rec["complete"] != true {
				t.Fatalf("receipt %s, want %d micro-USD for 5,000 output tokens", rec, want)
			}
		})
	}
}

// TestMistralThroughTheGateway: Mistral's API refuses a chat completion body with a
// member it does not know, stream_options among them (422), and ends each stream with its
// usage unasked. A gateway whose upstream is Mistral's (http://api.mistral.ai, reached
// through an HTTP proxy that is the test's fake Mistral) sends the official OpenAI SDK's
// stream as the SDK wrote it, and charges it its usage exactly; before 2026-11-29 the
// gateway asked every chat stream for its usage, and every stream to Mistral failed.
// TestHostsOwnPriceThroughTheGateway: a gateway whose upstream is Groq's API charges
// gpt-oss-120b at Groq's own price of it, not at the dearest host's, which the same name
// sent elsewhere pays.
func TestHostsOwnPriceThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	fake, s, o, gw := proxiedGateway(t, "http://api.groq.com", "Bearer gsk-provider-key")
	groq, ok := pricecatalog.Default().LookupFor("api.groq.com", "openai/gpt-oss-120b")
	_, dearest := tenThousandIn(t, "gpt-oss-120b")
	want := ceilDiv(10_000*groq.InputPerMillion+1_000*groq.OutputPerMillion, 1_000_000)
	if !ok || len(groq.Hosts) == 0 || want >= dearest {
		t.Fatalf("no cheaper Groq price of gpt-oss-120b: %+v (%d against %d)", groq, want, dearest)
	}
	for _, scenario := range []string{"stream", "json"} {
		t.Run(scenario, func(t *testing.T) {
			before := len(fake.Calls())
			r := runSDK(t, dir, "openai.mjs", scenario, gw, o.key, "openai/gpt-oss-120b")
			calls := fake.Calls()[before:]
			if !r.OK || r.Status != 200 || len(calls) != 1 || calls[0].Header.Get("Authorization") != "Bearer gsk-provider-key" {
				t.Fatalf("the call %+v; the provider got %d calls", r, len(calls))
			}
			rec := waitReceipt(t, s, calls[0].Header.Get("X-Service-Request-Id"))
			if rec.cost() != want || rec["price_source"] != "catalog" || rec["complete"] != true {
				t.Fatalf("receipt %s, want %d micro-USD at Groq's price (the name's elsewhere: %d)", rec, want, dearest)
			}
		})
	}
}

func TestMistralThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	fake, s, o, gw := proxiedGateway(t, "http://"+fakellm.MistralHost, "Bearer mistral-provider-key")
	_, want := tenThousandIn(t, "mistral-large")
	for _, scenario := range []string{"stream", "json"} {
		t.Run(scenario, func(t *testing.T) {
			before := len(fake.Calls())
			r := runSDK(t, dir, "openai.mjs", scenario, gw, o.key, "mistral-large-latest")
			calls := fake.Calls()[before:]
			if !r.OK || r.Status != 200 || r.Text != fakellm.Text || len(calls) != 1 {
				t.Fatalf("the call %+v; the provider got %d calls", r, len(calls))
			}
			if c := calls[0]; c.Header.Get("Authorization") != "Bearer mistral-provider-key" || strings.Contains(string(c.Body), "stream_options") {
				t.Fatalf("Mistral got %s with %s", c.Header, c.Body)
			}
			rec := waitReceipt(t, s, calls[0].Header.Get("X-Service-Request-Id"))
			if rec.cost() != want || rec["complete"] != true || rec["cost_basis"] != "reported_usage" {
				t.Fatalf("receipt %s, want %d micro-USD from the reported usage", rec, want)
			}
		})
	}
}

// TestMistralOCRThroughTheGateway: the official Mistral SDK's OCR call (ocr.process)
// through the gateway is charged by the page, as Mistral bills it: the pages its answer
// reports (usage_info.pages_processed) at the catalog's price of a page of the model
// (mistral-ocr-latest: 4 USD per 1,000 pages), its tokens at 0, and the receipt keeps
// the pages. An OCR model the catalog does not know is charged the catalog's highest
// page price, counted unpriced. Before 2026-11-29 an OCR call was charged its request's
// few estimated tokens at the fallback price, whatever its pages.
func TestMistralOCRThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	fake, s, o := routedGateway(t, fakellm.Usage{OCRPages: 12}, "authorization", "Bearer mistral-key")
	for _, tc := range []struct {
		model, source string
		perPage       int64
	}{
		{"mistral-ocr-latest", "catalog", 4_000},
		{"acme-ocr-1", "fallback", pricecatalog.Highest().PerPage},
	} {
		t.Run(tc.model, func(t *testing.T) {
			rec, r := oneSDKCallResult(t, fake, s, dir, "mistral.mjs", "ocr", o.key, tc.model)
			if r.Chunks != 12 || !strings.Contains(r.Text, fakellm.Text) || !strings.Contains(string(r.Usage), `"pagesProcessed":12`) {
				t.Fatalf("the SDK's answer: %+v", r)
			}
			if rec.cost() != 12*tc.perPage || rec["ocr_pages"] != 12.0 || rec["price_source"] != tc.source || rec["complete"] != true ||
				rec["cost_basis"] != "reported_usage" {
				t.Fatalf("receipt %s, want 12 pages at %d micro-USD each, priced from the %s", rec, tc.perPage, tc.source)
			}
		})
	}
}
