package ledger_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"

	at "github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

func i64p(v int64) *int64 { return &v }

// Where a price comes from: the organization's own price (exact name, then the same
// matching as the catalog) overrides the shipped catalog per model; a model neither
// knows is charged at the organization's fallback price, else the catalog's highest
// price of each token class, and counts as unpriced.
func TestSettlementPricing(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 1)
	m := ms[0]
	now := e.Clock.Now()
	setPrices := func(ps ...store.ModelPrice) {
		t.Helper()
		if err := e.Store.InTx(ctx, func(tx pgx.Tx) error { return store.ReplaceModelPrices(ctx, tx, org, ps, now) }); err != nil {
			t.Fatal(err)
		}
	}
	high := pricecatalog.Highest()
	// Amazon Bedrock's guardrails at the shipped catalog's prices (content filters and
	// denied topics 0.15 USD per 1,000 text units, sensitive-information filters and
	// contextual grounding 0.10, automated reasoning 0.17, an image 0.00075). 3 content-text
	// units, 3 denied-topic units, 2 sensitive-information units and an image:
	// (3*150,000 + 3*150,000 + 2*100,000) / 1,000 + 750 = 1,100 + 750 = 1,850 micro-USD.
	// The detect-only guardrail checks (InvokeGuardrailChecks: content filter 0.07 USD per
	// 1,000 text units, prompt attack 0.08, sensitive information 0.10): 2 content-filter
	// units, 2 prompt-attack units and 1 sensitive-information unit:
	// (2*70,000 + 2*80,000 + 1*100,000) / 1,000 = 400 micro-USD.
	if g, want := pricecatalog.Default().Guardrails(), (pricecatalog.GuardrailPrices{ContentText: 150_000, DeniedTopics: 150_000,
		SensitiveInformation: 100_000, ContextualGrounding: 100_000, AutomatedReasoning: 170_000, ContentImage: 750,
		ChecksContentFilter: 70_000, ChecksPromptAttack: 80_000, ChecksSensitiveInformation: 100_000}); g != want {
		t.Fatalf("the catalog's guardrail prices are %+v, want %+v", g, want)
	}
	guardrailed := func() *internalv1.GuardrailUnits {
		return &internalv1.GuardrailUnits{ContentText: 3, DeniedTopics: 3, SensitiveInformation: 2, ContentImages: 1}
	}
	const guardrailCost = 1_850
	checked := func() *internalv1.GuardrailUnits {
		return &internalv1.GuardrailUnits{ChecksContentFilter: 2, ChecksPromptAttack: 2, ChecksSensitiveInformation: 1}
	}
	const checksCost = 400
	dearestContainer, ok := pricecatalog.Default().DearestContainer("")
	if !ok || dearestContainer.Kind != "openai-64g" {
		t.Fatalf("the catalog's dearest container is %+v, want openai-64g", dearestContainer)
	}
	// Anthropic's advisor tool: claude-haiku-4-5 executing (1, 5, 0.10 and 1.25 USD per
	// million input, output, cache reads and writes), claude-opus-4-7 advising (5, 25,
	// 0.50, 6.25), each at the shipped catalog's figures. The executor reads 10,000 input
	// tokens and writes 2,000 (20,000 micro-USD); the advisor reads 30,000 (12,000 from the
	// cache, 8,000 written to it, 10,000 neither) and writes 1,500 (50,000 + 6,000 +
	// 50,000 + 37,500 = 143,500 at Opus's prices, 28,700 at Haiku's).
	haiku, okHaiku := pricecatalog.Lookup("claude-haiku-4-5")
	opus, okOpus := pricecatalog.Lookup("claude-opus-4-7")
	sonnet, okSonnet := pricecatalog.Lookup("claude-sonnet-4-5")
	if !okHaiku || !okOpus || !okSonnet || sonnet.LongContext == nil {
		t.Fatal("the catalog lacks claude-haiku-4-5, claude-opus-4-7 or claude-sonnet-4-5's long context")
	}
	// tokensAt is ceil((uncached * input + cached * cachedInput + written * cacheWrite +
	// output * outputPrice) / 1e6) at a catalog price.
	tokensAt := func(p pricecatalog.Price, uncached, cached, written, output int64) int64 {
		return (uncached*p.InputPerMillion + cached*p.CachedInputPerMillion + written*p.CacheWrite() + output*p.OutputPerMillion + 999_999) / 1_000_000
	}
	executor := tokensAt(haiku.Price, 10_000, 0, 0, 2_000)                                              // 20,000
	advisorAtOpus := tokensAt(opus.Price, 10_000, 12_000, 8_000, 1_500)                                 // 143,500
	advisorAtHaiku := tokensAt(haiku.Price, 10_000, 12_000, 8_000, 1_500)                               // 28,700
	advisorAtHighest := tokensAt(high, 10_000, 12_000, 8_000, 1_500)                                    // the catalog's dearest of each class
	executorFast, _ := pricecatalog.AtPercent(executor, haiku.TierPercent(pricecatalog.Fast))           // 40,000
	executorFastRegional, _ := pricecatalog.RegionalPremium(executorFast, haiku.RegionalPremiumPercent) // 44,000
	advised := func(model string, it *internalv1.SettleItem) *internalv1.SettleItem {
		it.AdvisorModel, it.AdvisorInputTokens, it.AdvisorCachedInputTokens, it.AdvisorCacheCreationInputTokens, it.AdvisorOutputTokens =
			model, 30_000, 12_000, 8_000, 1_500
		return it
	}
	cases := []struct {
		name   string
		setup  func()
		item   *internalv1.SettleItem
		cost   int64
		source string
		price  string
		basis  string
	}{
		{"the issue's contract: gpt-4o-mini from the catalog", nil,
			&internalv1.SettleItem{Model: "gpt-4o-mini-2024-07-18", InputTokens: 1_000_000, OutputTokens: 1_000_000, Complete: true},
			750_000, "catalog_estimate", "catalog", "reported_usage"},
		// An organization's fine-tuned model: its base's fine-tuned price (0.30, 0.15 and
		// 1.20 USD per million input, cached and output tokens), priced from the catalog,
		// not the fallback (the catalog's highest, hundreds of times more).
		{"an OpenAI fine-tuned model at its fine-tuned price", nil,
			&internalv1.SettleItem{Model: "ft:gpt-4o-mini-2024-07-18:my-org::AbC123", InputTokens: 1_000_000, CachedInputTokens: 200_000,
				OutputTokens: 1_000_000, Complete: true},
			800_000*3/10 + 200_000*15/100 + 1_200_000, "catalog_estimate", "catalog", "reported_usage"},
		{"a fine-tuned model's checkpoint too", nil,
			&internalv1.SettleItem{Model: "ft:gpt-4.1-2025-04-14:my-org:support:AbC123:ckpt-step-500", InputTokens: 1_000_000, OutputTokens: 1_000_000, Complete: true},
			3_000_000 + 12_000_000, "catalog_estimate", "catalog", "reported_usage"},
		// Azure OpenAI names GPT-3.5 Turbo without the dot: gpt-3.5-turbo's price (0.50
		// and 1.50 USD per million), not the fallback.
		{"Azure's gpt-35-turbo at gpt-3.5-turbo's price", nil,
			&internalv1.SettleItem{Model: "gpt-35-turbo", InputTokens: 1_000_000, OutputTokens: 1_000_000, Complete: true},
			2_000_000, "catalog_estimate", "catalog", "reported_usage"},
		{"a cache write at the catalog's cache-write price", nil,
			&internalv1.SettleItem{Model: "claude-sonnet-4-20250514", InputTokens: 100_000, CacheCreationInputTokens: 100_000, Complete: true},
			375_000, "catalog_estimate", "catalog", "reported_usage"},
		// OpenAI's cache writes (GPT-5.6 on) are a part of the input, at 1.25 times its
		// price: the prompt-caching guide's example, 2,600 input tokens, 2,000 cached,
		// 400 written, 200 neither (gpt-6-sol: 2, 0.20 and 2.50 USD per million).
		{"an OpenAI cache write at its price", nil,
			&internalv1.SettleItem{Model: "gpt-6-sol", InputTokens: 2_600, CachedInputTokens: 2_000, CacheCreationInputTokens: 400, Complete: true},
			200*2 + 2_000*2/10 + 400*5/2, "catalog_estimate", "catalog", "reported_usage"},
		{"a long OpenAI prompt: every class at the long prompts' price", nil,
			&internalv1.SettleItem{Model: "gpt-6.1-sol", InputTokens: 300_000, CachedInputTokens: 200_000, CacheCreationInputTokens: 50_000, OutputTokens: 1_000, Complete: true},
			50_000*4 + 200_000*2/10 + 50_000*5 + 1_000*15, "catalog_estimate", "catalog", "reported_usage"},
		// Long prompts: the whole request at the long-context price, above the threshold
		// (input, cached and written tokens together), not at it.
		{"a long prompt at the long-context price", nil,
			&internalv1.SettleItem{Model: "claude-sonnet-4-5-20250929", InputTokens: 300_000, CachedInputTokens: 100_000, CacheCreationInputTokens: 50_000,
				OutputTokens: 10_000, Complete: true},
			150_000*6 + 100_000*6/10 + 50_000*15/2 + 10_000*45/2, "catalog_estimate", "catalog", "reported_usage"},
		// Counts that disagree (the cache's parts above the input: a reporter that sends
		// Anthropic's own input_tokens, which leaves them out) are charged the parts as
		// reported (accounting.CatalogCost): a prompt of at least that many tokens, and
		// its tier is chosen by it, not by the smaller input count.
		{"parts above the input: the tier of a prompt of the parts", nil,
			&internalv1.SettleItem{Model: "claude-sonnet-4-5-20250929", InputTokens: 5_000, CachedInputTokens: 180_000, CacheCreationInputTokens: 60_000,
				OutputTokens: 2_000, Complete: true},
			180_000*6/10 + 60_000*15/2 + 2_000*45/2, "catalog_estimate", "catalog", "reported_usage"},
		{"an advisor's parts above its input: the tier of a prompt of the parts", nil,
			&internalv1.SettleItem{Model: "claude-haiku-4-5", InputTokens: 10_000, OutputTokens: 2_000, AdvisorModel: "claude-sonnet-4-5",
				AdvisorInputTokens: 5_000, AdvisorCachedInputTokens: 250_000, AdvisorOutputTokens: 1_000, Complete: true},
			executor + tokensAt(sonnet.ForInput(250_000), 0, 250_000, 0, 1_000), "catalog_estimate", "catalog", "reported_usage"},
		{"a prompt at the threshold: the shorter prompts' price", nil,
			&internalv1.SettleItem{Model: "gemini-2.5-pro", InputTokens: 200_000, OutputTokens: 1_000, Complete: true},
			200_000*5/4 + 1_000*10, "catalog_estimate", "catalog", "reported_usage"},
		{"a token beyond it: the long prompts' price, rounded up once", nil,
			&internalv1.SettleItem{Model: "gemini-2.5-pro", InputTokens: 200_001, OutputTokens: 1_000, Complete: true},
			500_003 + 1_000*15, "catalog_estimate", "catalog", "reported_usage"},
		{"an estimated long prompt too", nil,
			&internalv1.SettleItem{Model: "gemini-3-pro-preview", InputTokens: 250_000, UsageEstimated: true},
			250_000 * 4, "catalog_estimate", "catalog", "estimate"},
		// A regional endpoint (Bedrock's in-region or geographic inference, a Vertex AI
		// region): the newest Claude models' 10% premium on the catalog's price.
		{"a regional endpoint: the catalog's price and its premium", nil,
			&internalv1.SettleItem{Model: "us.anthropic.claude-sonnet-4-5-20250929-v1:0", InputTokens: 100_000, OutputTokens: 10_000, Complete: true,
				RegionalEndpoint: true},
			(100_000*3 + 10_000*15) * 110 / 100, "catalog_estimate", "catalog", "reported_usage"},
		// A speed tier: the model's own percent of the catalog's price, else the tier's
		// default (docs/prices.md, "Service tiers"). An enforcer older than service_tier
		// says priority_tier alone: the fast tier.
		{"the priority tier of an older enforcer: gpt-4o-mini's fast percent", nil,
			&internalv1.SettleItem{Model: "gpt-4o-mini", InputTokens: 1_000_000, Complete: true, PriorityTier: true},
			150_000 * 167 / 100, "catalog_estimate", "catalog", "reported_usage"},
		{"the fast tier of gpt-5.5: 2.5 times", nil,
			&internalv1.SettleItem{Model: "gpt-5.5-2026-04-23", InputTokens: 100_000, OutputTokens: 10_000, Complete: true, PriorityTier: true,
				ServiceTier: internalv1.ServiceTier_SERVICE_TIER_FAST},
			(100_000*5 + 10_000*30) * 250 / 100, "catalog_estimate", "catalog", "reported_usage"},
		{"the fast tier of a model without its own percent: twice", nil,
			&internalv1.SettleItem{Model: "gpt-6-sol", InputTokens: 100_000, OutputTokens: 10_000, Complete: true, PriorityTier: true,
				ServiceTier: internalv1.ServiceTier_SERVICE_TIER_FAST},
			(100_000*2 + 10_000*10) * 2, "catalog_estimate", "catalog", "reported_usage"},
		{"the ultrafast tier: six times", nil,
			&internalv1.SettleItem{Model: "gpt-6-astra", InputTokens: 100_000, CachedInputTokens: 50_000, OutputTokens: 10_000, Complete: true, PriorityTier: true,
				ServiceTier: internalv1.ServiceTier_SERVICE_TIER_ULTRAFAST},
			(50_000*10 + 50_000*1 + 10_000*50) * 6, "catalog_estimate", "catalog", "reported_usage"},
		{"a tier this control plane does not know: the dearest it knows", nil,
			&internalv1.SettleItem{Model: "gpt-6-sol", InputTokens: 100_000, Complete: true, PriorityTier: true, ServiceTier: internalv1.ServiceTier(7)},
			100_000 * 2 * 6, "catalog_estimate", "catalog", "reported_usage"},
		// The tier below standard (OpenAI's flex, Google's Flex PayGo and flex
		// inference): half the price, rounded up once, so never 0 for a cost above 0. It
		// travels in discount_tier, apart from service_tier: a settlement without it (an
		// enforcer older than the field, or a flex answer it did not read) is standard.
		{"the flex tier: half the price", nil,
			&internalv1.SettleItem{Model: "gpt-6-sol", InputTokens: 100_000, OutputTokens: 10_000, Complete: true,
				DiscountTier: internalv1.DiscountTier_DISCOUNT_TIER_FLEX},
			(100_000*2 + 10_000*10) / 2, "catalog_estimate", "catalog", "reported_usage"},
		{"the flex tier of a cost of 1 micro-USD: 1, not 0", nil,
			&internalv1.SettleItem{Model: "gpt-4o-mini", InputTokens: 1, Complete: true, DiscountTier: internalv1.DiscountTier_DISCOUNT_TIER_FLEX},
			1, "catalog_estimate", "catalog", "reported_usage"},
		{"the flex tier rounded up: 15 micro-USD at half is 8", nil,
			&internalv1.SettleItem{Model: "gpt-4o-mini", InputTokens: 100, Complete: true, DiscountTier: internalv1.DiscountTier_DISCOUNT_TIER_FLEX},
			8, "catalog_estimate", "catalog", "reported_usage"},
		{"an old-style settlement of a flex request (no discount_tier): standard", nil,
			&internalv1.SettleItem{Model: "gpt-6-sol", InputTokens: 100_000, OutputTokens: 10_000, Complete: true},
			100_000*2 + 10_000*10, "catalog_estimate", "catalog", "reported_usage"},
		{"a discount_tier this control plane does not know: standard", nil,
			&internalv1.SettleItem{Model: "gpt-6-sol", InputTokens: 100_000, Complete: true, DiscountTier: internalv1.DiscountTier(9)},
			100_000 * 2, "catalog_estimate", "catalog", "reported_usage"},
		{"flex beside a dear service_tier: the dear one", nil,
			&internalv1.SettleItem{Model: "gpt-6-sol", InputTokens: 100_000, Complete: true, PriorityTier: true,
				ServiceTier: internalv1.ServiceTier_SERVICE_TIER_FAST, DiscountTier: internalv1.DiscountTier_DISCOUNT_TIER_FLEX},
			100_000 * 2 * 2, "catalog_estimate", "catalog", "reported_usage"},
		{"flex with the regional premium: half, then 10% more", nil,
			&internalv1.SettleItem{Model: "claude-sonnet-4-5", InputTokens: 100_000, OutputTokens: 10_000, Complete: true, RegionalEndpoint: true,
				DiscountTier: internalv1.DiscountTier_DISCOUNT_TIER_FLEX},
			(100_000*3 + 10_000*15) / 2 * 110 / 100, "catalog_estimate", "catalog", "reported_usage"},
		// Amazon Bedrock's latency-optimized inference: a quarter more, every model's
		// (Nova Pro: 1.00 / 4.00 USD per million against 0.80 / 3.20), rounded up once.
		{"Bedrock's latency-optimized inference: Nova Pro at 125%", nil,
			&internalv1.SettleItem{Model: "us.amazon.nova-pro-v1:0", InputTokens: 100_000, OutputTokens: 10_000, Complete: true, PriorityTier: true,
				ServiceTier: internalv1.ServiceTier_SERVICE_TIER_LATENCY_OPTIMIZED},
			100_000 + 40_000, "catalog_estimate", "catalog", "reported_usage"},
		{"Bedrock's latency-optimized inference: Llama 3.1 70B, rounded up", nil,
			&internalv1.SettleItem{Model: "us.meta.llama3-1-70b-instruct-v1:0", InputTokens: 1_001, OutputTokens: 10, Complete: true, PriorityTier: true,
				ServiceTier: internalv1.ServiceTier_SERVICE_TIER_LATENCY_OPTIMIZED},
			(1_011*720_000/1_000_000 + 1) * 125 / 100, "catalog_estimate", "catalog", "reported_usage"},
		{"Anthropic's fast mode on Opus 4.6: six times, with the regional premium", nil,
			&internalv1.SettleItem{Model: "claude-opus-4-6", InputTokens: 100_000, OutputTokens: 10_000, Complete: true, PriorityTier: true,
				ServiceTier: internalv1.ServiceTier_SERVICE_TIER_FAST, RegionalEndpoint: true},
			(100_000*5 + 10_000*25) * 6 * 110 / 100, "catalog_estimate", "catalog", "reported_usage"},
		{"Anthropic's fast mode on Opus 5: twice", nil,
			&internalv1.SettleItem{Model: "claude-opus-5", InputTokens: 100_000, OutputTokens: 10_000, Complete: true, PriorityTier: true,
				ServiceTier: internalv1.ServiceTier_SERVICE_TIER_FAST},
			(100_000*5 + 10_000*25) * 2, "catalog_estimate", "catalog", "reported_usage"},
		{"the global endpoint: no premium", nil,
			&internalv1.SettleItem{Model: "global.anthropic.claude-sonnet-4-5-20250929-v1:0", InputTokens: 100_000, OutputTokens: 10_000, Complete: true},
			100_000*3 + 10_000*15, "catalog_estimate", "catalog", "reported_usage"},
		{"a regional endpoint of a model without a premium", nil,
			&internalv1.SettleItem{Model: "claude-sonnet-4-20250514", InputTokens: 100_000, Complete: true, RegionalEndpoint: true},
			300_000, "catalog_estimate", "catalog", "reported_usage"},
		{"Amazon Nova on Bedrock, by its model id", nil,
			&internalv1.SettleItem{Model: "us.amazon.nova-micro-v1:0", InputTokens: 1_000_000, CachedInputTokens: 200_000, OutputTokens: 100_000, Complete: true},
			800_000*35/1000 + 200_000*875/100_000 + 100_000*140/1000, "catalog_estimate", "catalog", "reported_usage"},
		{"a model nobody priced: the default fallback, still charged", nil,
			&internalv1.SettleItem{Model: "acme-llm-7", InputTokens: 1_000_000, OutputTokens: 1_000_000, Complete: true},
			high.InputPerMillion + high.OutputPerMillion, "fallback", "fallback", "reported_usage"},
		{"no model at all: the fallback too", nil,
			&internalv1.SettleItem{OutputTokens: 1_000_000, Complete: true}, high.OutputPerMillion, "fallback", "fallback", "reported_usage"},
		{"nothing counted: unknown, cost 0", nil, &internalv1.SettleItem{Model: "acme-llm-7"}, 0, "unknown", "", "none"},
		{"an upstream cost wins", nil, &internalv1.SettleItem{Model: "acme-llm-7", InputTokens: 5, UpstreamCostMicroUsd: at.Cost(42), Complete: true},
			42, "upstream", "", "upstream_cost"},
		{"estimated tokens", nil, &internalv1.SettleItem{Model: "gpt-4o-mini", OutputTokens: 1_000_000, UsageEstimated: true, Complete: true},
			600_000, "catalog_estimate", "catalog", "estimate"},
		{"the organization's price overrides the catalog, matched by key",
			func() {
				setPrices(store.ModelPrice{Model: "OpenAI/GPT-4o-mini", InputPerMillion: 1_000_000, OutputPerMillion: 2_000_000},
					store.ModelPrice{Model: "gpt-4o", InputPerMillion: 9, OutputPerMillion: 9})
			},
			&internalv1.SettleItem{Model: "gpt-4o-mini-2024-07-18", InputTokens: 1_000_000, OutputTokens: 1_000_000, Complete: true},
			3_000_000, "catalog_estimate", "organization", "reported_usage"},
		{"the organization's price at a speed tier: the catalog's percent of the model's tier", nil,
			&internalv1.SettleItem{Model: "gpt-4o-mini-2024-07-18", InputTokens: 1_000_000, OutputTokens: 1_000_000, Complete: true, PriorityTier: true,
				ServiceTier: internalv1.ServiceTier_SERVICE_TIER_FAST},
			3_000_000 * 167 / 100, "catalog_estimate", "organization", "reported_usage"},
		{"the organization's price at flex: half of it", nil,
			&internalv1.SettleItem{Model: "gpt-4o-mini-2024-07-18", InputTokens: 1_000_000, OutputTokens: 1_000_000, Complete: true,
				DiscountTier: internalv1.DiscountTier_DISCOUNT_TIER_FLEX},
			3_000_000 / 2, "catalog_estimate", "organization", "reported_usage"},
		{"a catalog family nearer than the organization's: gpt-4o-mini is never gpt-4o", func() {
			setPrices(store.ModelPrice{Model: "gpt-4o", InputPerMillion: 9, OutputPerMillion: 9})
		}, &internalv1.SettleItem{Model: "gpt-4o-mini-2024-07-18", InputTokens: 1_000_000, Complete: true}, 150_000, "catalog_estimate", "catalog", "reported_usage"},
		{"the organization's price, exact name", func() {
			setPrices(store.ModelPrice{Model: "acme-llm-7", InputPerMillion: 3, OutputPerMillion: 4, CachedInputPerMillion: 1, CacheWritePerMillion: i64p(5)})
		}, &internalv1.SettleItem{Model: "acme-llm-7", InputTokens: 3_000_000, CachedInputTokens: 1_000_000, CacheCreationInputTokens: 1_000_000,
			OutputTokens: 1_000_000, Complete: true}, 3 + 1 + 5 + 4, "catalog_estimate", "organization", "reported_usage"},
		{"the organization's own price has no regional premium", func() {
			setPrices(store.ModelPrice{Model: "claude-sonnet-4-5", InputPerMillion: 2_000_000, OutputPerMillion: 2_000_000})
		}, &internalv1.SettleItem{Model: "claude-sonnet-4-5@20250929", InputTokens: 1_000_000, Complete: true, RegionalEndpoint: true},
			2_000_000, "catalog_estimate", "organization", "reported_usage"},
		{"the organization's fallback price", func() {
			setPrices()
			if err := store.SetFallbackPrice(ctx, e.Store.Pool, org, store.FallbackPrice{InputPerMillion: 7, OutputPerMillion: 11}, now); err != nil {
				t.Fatal(err)
			}
		}, &internalv1.SettleItem{Model: "acme-llm-7", InputTokens: 1_000_000, CacheCreationInputTokens: 1_000_000, OutputTokens: 1_000_000, Complete: true},
			7 + 11, "fallback", "fallback", "reported_usage"},
		// Audio billed by duration (whisper-1: 6,000 micro-USD a minute) is priced from the
		// catalog by the minute, whatever priced the tokens.
		{"whisper-1's seconds at the catalog's minute price", func() { setPrices() },
			&internalv1.SettleItem{Model: "whisper-1", AudioInputMillis: 90_500, Complete: true}, 9_050, "catalog_estimate", "catalog", "reported_usage"},
		{"a transcript without usage: its estimated tokens at the catalog's token price for whisper-1", nil,
			&internalv1.SettleItem{Model: "whisper-1", OutputTokens: 200, UsageEstimated: true}, 6_000, "catalog_estimate", "catalog", "estimate"},
		{"the organization's token price leaves the catalog's minute price", func() {
			setPrices(store.ModelPrice{Model: "whisper-1", InputPerMillion: 1, OutputPerMillion: 1})
		}, &internalv1.SettleItem{Model: "whisper-1", AudioInputMillis: 60_000, OutputTokens: 1_000_000, Complete: true},
			6_000 + 1, "catalog_estimate", "organization", "reported_usage"},
		{"audio of a model nobody priced by the minute: the catalog's highest, unpriced", func() { setPrices() },
			&internalv1.SettleItem{Model: "acme-listen-2", AudioInputMillis: 60_000, Complete: true},
			high.AudioPerMinute, "fallback", "fallback", "reported_usage"},
		// Web searches apiece at the catalog's price for the model's provider (Anthropic:
		// 10,000 micro-USD each), whatever priced the tokens.
		{"Anthropic's web searches apiece, on top of the tokens", nil,
			&internalv1.SettleItem{Model: "claude-sonnet-4-5-20250929", InputTokens: 100_000, WebSearchRequests: 3, Complete: true},
			300_000 + 30_000, "catalog_estimate", "catalog", "reported_usage"},
		// Google: a Gemini 3 query apiece (14,000); Gemini 2.5 bills the grounded prompt,
		// 35,000 once however many queries it ran.
		{"Gemini 3's search queries apiece", nil,
			&internalv1.SettleItem{Model: "gemini-3-pro-preview", WebSearchRequests: 3, Complete: true},
			3 * 14_000, "catalog_estimate", "catalog", "reported_usage"},
		{"Gemini 2.5's grounded prompt once", nil,
			&internalv1.SettleItem{Model: "gemini-2.5-flash", WebSearchRequests: 3, Complete: true},
			35_000, "catalog_estimate", "catalog", "reported_usage"},
		// OpenAI's Chat Completions search models search for every request they answer,
		// unreported: gpt-4o-mini-search-preview's search is 30,000 once, whoever reports
		// (a status 0 is /settle's), and a refused request (status 400 and above) made none.
		{"a search model's unreported search", nil,
			&internalv1.SettleItem{Model: "gpt-4o-mini-search-preview-2025-03-11", InputTokens: 1_000_000, UpstreamStatus: 200, Complete: true},
			150_000 + 30_000, "catalog_estimate", "catalog", "reported_usage"},
		{"a search model reported by /settle (no status)", nil,
			&internalv1.SettleItem{Model: "gpt-4o-mini-search-preview", OutputTokens: 1_000_000, Complete: true},
			600_000 + 30_000, "catalog_estimate", "catalog", "reported_usage"},
		{"a search model's estimated answer searched too", nil,
			&internalv1.SettleItem{Model: "gpt-4o-search-preview", InputTokens: 100_000, UpstreamStatus: 200, UsageEstimated: true},
			250_000 + 50_000, "catalog_estimate", "catalog", "estimate"},
		{"a search model's error answer searched nothing", nil,
			&internalv1.SettleItem{Model: "gpt-4o-mini-search-preview", InputTokens: 1_000_000, UpstreamStatus: 400, Complete: true},
			150_000, "catalog_estimate", "catalog", "reported_usage"},
		{"a search model's reported searches are not added to", nil,
			&internalv1.SettleItem{Model: "gpt-4o-mini-search-preview", WebSearchRequests: 2, UpstreamStatus: 200, Complete: true},
			30_000, "catalog_estimate", "catalog", "reported_usage"},
		{"web searches of a model nobody priced: the catalog's highest, unpriced", func() { setPrices() },
			&internalv1.SettleItem{Model: "acme-search-1", WebSearchRequests: 2, Complete: true},
			2 * pricecatalog.Default().HighestWebSearch(), "fallback", "fallback", "reported_usage"},
		// File search calls apiece at the catalog's price for the model's provider
		// (OpenAI: 2,500 micro-USD each), whatever priced the tokens.
		{"OpenAI's file search calls apiece, on top of the tokens", nil,
			&internalv1.SettleItem{Model: "gpt-4o-mini-2024-07-18", InputTokens: 1_000_000, FileSearchCalls: 3, Complete: true},
			150_000 + 7_500, "catalog_estimate", "catalog", "reported_usage"},
		{"file search calls and web searches, each at its price", nil,
			&internalv1.SettleItem{Model: "gpt-4o-mini-2024-07-18", WebSearchRequests: 1, FileSearchCalls: 2, Complete: true},
			10_000 + 2*2_500, "catalog_estimate", "catalog", "reported_usage"},
		{"file search calls of a model nobody priced: the catalog's highest, unpriced", func() { setPrices() },
			&internalv1.SettleItem{Model: "acme-search-1", FileSearchCalls: 2, Complete: true},
			2 * pricecatalog.Default().HighestFileSearch(), "fallback", "fallback", "reported_usage"},
		{"file search calls of a provider the catalog prices none for: the highest, unpriced", nil,
			&internalv1.SettleItem{Model: "claude-sonnet-4-5-20250929", InputTokens: 100_000, FileSearchCalls: 1, Complete: true},
			300_000 + pricecatalog.Default().HighestFileSearch(), "fallback", "fallback", "reported_usage"},
		// Gemini's grounding with Google Maps: a grounded prompt at the catalog's price for
		// the model's provider (Google: 25,000 micro-USD), on top of the tokens and of any
		// web searches, whatever priced the tokens; gemini-2.5-flash's 1,000 input tokens,
		// none of them audio (else the audio input price, the dearer, prices them all), and
		// 200 output tokens cost 300 + 500.
		{"Gemini's maps-grounded prompt, on top of the tokens", nil,
			&internalv1.SettleItem{Model: "gemini-2.5-flash", InputTokens: 1_000, AudioInputTokens: i64p(0), OutputTokens: 200, MapsGroundedPrompts: 1, Complete: true},
			300 + 500 + 25_000, "catalog_estimate", "catalog", "reported_usage"},
		{"no maps-grounded prompt: nothing more than the tokens", nil,
			&internalv1.SettleItem{Model: "gemini-2.5-flash", InputTokens: 1_000, AudioInputTokens: i64p(0), OutputTokens: 200, Complete: true},
			300 + 500, "catalog_estimate", "catalog", "reported_usage"},
		{"grounded with Google Search and Google Maps: the grounded prompt of each", nil,
			&internalv1.SettleItem{Model: "gemini-2.5-flash", InputTokens: 1_000, AudioInputTokens: i64p(0), OutputTokens: 200, WebSearchRequests: 3,
				MapsGroundedPrompts: 1, Complete: true},
			300 + 500 + 35_000 + 25_000, "catalog_estimate", "catalog", "reported_usage"},
		{"Gemini 3's search queries apiece and its maps-grounded prompt", nil,
			&internalv1.SettleItem{Model: "gemini-3-pro-preview", WebSearchRequests: 2, MapsGroundedPrompts: 1, Complete: true},
			2*14_000 + 25_000, "catalog_estimate", "catalog", "reported_usage"},
		{"a maps-grounded prompt is not doubled by the fast tier", nil,
			&internalv1.SettleItem{Model: "gemini-2.5-flash", InputTokens: 1_000, AudioInputTokens: i64p(0), OutputTokens: 200, MapsGroundedPrompts: 1,
				PriorityTier: true, ServiceTier: internalv1.ServiceTier_SERVICE_TIER_FAST, Complete: true},
			2*(300+500) + 25_000, "catalog_estimate", "catalog", "reported_usage"},
		{"a maps-grounded prompt of a model nobody priced: the catalog's highest, unpriced", func() { setPrices() },
			&internalv1.SettleItem{Model: "acme-maps-1", MapsGroundedPrompts: 1, Complete: true},
			pricecatalog.Default().HighestMapsGrounding(), "fallback", "fallback", "reported_usage"}, // 25,000
		{"a maps-grounded prompt of a provider the catalog prices none for: the highest, unpriced", nil,
			&internalv1.SettleItem{Model: "claude-sonnet-4-5-20250929", InputTokens: 100_000, MapsGroundedPrompts: 1, Complete: true},
			300_000 + pricecatalog.Default().HighestMapsGrounding(), "fallback", "fallback", "reported_usage"},
		{"the organization's price of the model does not price its maps grounding", func() {
			setPrices(store.ModelPrice{Model: "gemini-2.5-flash", InputPerMillion: 1_000_000, OutputPerMillion: 2_000_000})
		}, &internalv1.SettleItem{Model: "gemini-2.5-flash", InputTokens: 1_000, AudioInputTokens: i64p(0), OutputTokens: 200, MapsGroundedPrompts: 1,
			Complete: true},
			1_000 + 400 + 25_000, "catalog_estimate", "organization", "reported_usage"},
		// OCR models bill the pages they read, at the catalog's price of a page whatever
		// priced the tokens (mistral-ocr-latest: 4,000 micro-USD; the 2505 snapshot 1,000
		// under the name its answers give).
		{"an OCR model's pages at the catalog's page price", nil,
			&internalv1.SettleItem{Model: "mistral-ocr-latest", InputTokens: 3_000, OcrPages: 12, Complete: true},
			12 * 4_000, "catalog_estimate", "catalog", "reported_usage"},
		{"an OCR snapshot by the name its answer gives", nil,
			&internalv1.SettleItem{Model: "mistral-ocr-2505-completion", OcrPages: 3, Complete: true},
			3 * 1_000, "catalog_estimate", "catalog", "reported_usage"},
		{"the pages of a model nobody priced by the page: the catalog's highest, unpriced", func() { setPrices() },
			&internalv1.SettleItem{Model: "acme-ocr-1", OcrPages: 2, Complete: true},
			2 * high.PerPage, "fallback", "fallback", "reported_usage"},
		{"a lost OCR answer: one page at the least, an estimate", nil,
			&internalv1.SettleItem{Model: "mistral-ocr-latest", InputTokens: 30, UsageEstimated: true, UpstreamStatus: 200},
			4_000, "catalog_estimate", "catalog", "estimate"},
		{"an OCR request refused by the provider read nothing", nil,
			&internalv1.SettleItem{Model: "mistral-ocr-latest", InputTokens: 30, UsageEstimated: true, UpstreamStatus: 422},
			0, "catalog_estimate", "catalog", "estimate"},
		{"the organization's token price leaves the catalog's page price", func() {
			setPrices(store.ModelPrice{Model: "mistral-ocr-latest", InputPerMillion: 1_000_000, OutputPerMillion: 1_000_000})
		}, &internalv1.SettleItem{Model: "mistral-ocr-latest", InputTokens: 1_000, OcrPages: 1, Complete: true},
			1_000 + 4_000, "catalog_estimate", "organization", "reported_usage"},
		// Containers are billed by the minute they live, at the catalog's price per hour of
		// the kind the item names whatever priced the tokens, after the tier (openai-1g: 0.09
		// USD an hour, 25 minutes 37,500 micro-USD; anthropic: 0.05, 5 minutes 4,167
		// rounded up; openai-4g: 0.36, 5 minutes 30,000). A kind the catalog does not know,
		// or none, is charged the catalog's dearest container, unpriced.
		{"a container's minutes at its kind's price, beside the tokens", nil,
			&internalv1.SettleItem{Model: "gpt-4.1-nano", InputTokens: 1_000_000, OutputTokens: 100_000, ContainerKind: "openai-1g", ContainerMinutes: 25,
				Complete: true},
			100_000 + 40_000 + 37_500, "catalog_estimate", "catalog", "reported_usage"},
		{"Anthropic's container minutes, rounded up", nil,
			&internalv1.SettleItem{Model: "claude-sonnet-4-5", InputTokens: 1_000, ContainerKind: "anthropic", ContainerMinutes: 5, Complete: true},
			3_000 + 4_167, "catalog_estimate", "catalog", "reported_usage"},
		{"container minutes alone are usage", nil,
			&internalv1.SettleItem{Model: "gpt-4.1-nano", ContainerKind: "openai-4g", ContainerMinutes: 5, Complete: true},
			30_000, "catalog_estimate", "catalog", "reported_usage"},
		{"container minutes are not multiplied by the fast tier", nil,
			&internalv1.SettleItem{Model: "gpt-5-mini", InputTokens: 1_000_000, ContainerKind: "openai-1g", ContainerMinutes: 25, Complete: true,
				PriorityTier: true, ServiceTier: internalv1.ServiceTier_SERVICE_TIER_FAST},
			250_000*180/100 + 37_500, "catalog_estimate", "catalog", "reported_usage"},
		{"a container kind the catalog does not know: its dearest container, unpriced", nil,
			&internalv1.SettleItem{Model: "gpt-4.1-nano", InputTokens: 1_000_000, ContainerKind: "openai-128g", ContainerMinutes: 10, Complete: true},
			100_000 + containerCost(dearestContainer, 10), "fallback", "fallback", "reported_usage"},
		{"container minutes of no kind: the dearest container, unpriced", nil,
			&internalv1.SettleItem{Model: "gpt-4.1-nano", ContainerMinutes: 5, Complete: true},
			containerCost(dearestContainer, 5), "fallback", "fallback", "reported_usage"},
		{"the organization's token price leaves the catalog's container price", func() {
			setPrices(store.ModelPrice{Model: "gpt-4.1-nano", InputPerMillion: 1_000_000, OutputPerMillion: 1_000_000})
		}, &internalv1.SettleItem{Model: "gpt-4.1-nano", InputTokens: 1_000, ContainerKind: "openai-4g", ContainerMinutes: 5, Complete: true},
			1_000 + 30_000, "catalog_estimate", "organization", "reported_usage"},
		{"an upstream cost wins over container minutes, which the receipt keeps", func() { setPrices() },
			&internalv1.SettleItem{Model: "gpt-4.1-nano", InputTokens: 1_000, ContainerKind: "openai-1g", ContainerMinutes: 25,
				UpstreamCostMicroUsd: at.Cost(42), Complete: true},
			42, "upstream", "", "upstream_cost"},
		// Amazon Bedrock's guardrails are billed apart from the model they guard: their
		// units at the catalog's guardrail prices whatever priced the tokens, after the
		// tier and the regional premium (nova-micro: 0.035 and 0.14 USD per million input
		// and output tokens; claude-haiku-4-5: 1 and 5, 10% more on a regional endpoint).
		{"a guardrail's units beside the tokens", nil,
			&internalv1.SettleItem{Model: "amazon.nova-micro-v1:0", InputTokens: 1_000_000, OutputTokens: 100_000, GuardrailUnits: guardrailed(),
				Complete: true},
			35_000 + 14_000 + guardrailCost, "catalog_estimate", "catalog", "reported_usage"},
		{"a request its guardrail blocked: its units and no token", nil,
			&internalv1.SettleItem{Model: "amazon.nova-micro-v1:0", GuardrailUnits: guardrailed(), Complete: true},
			guardrailCost, "catalog_estimate", "catalog", "reported_usage"},
		{"a blocked request, estimated", nil,
			&internalv1.SettleItem{Model: "amazon.nova-micro-v1:0", GuardrailUnits: guardrailed(), UsageEstimated: true},
			guardrailCost, "catalog_estimate", "catalog", "estimate"},
		{"contextual grounding and automated reasoning at their prices", nil,
			&internalv1.SettleItem{Model: "amazon.nova-micro-v1:0", GuardrailUnits: &internalv1.GuardrailUnits{ContextualGrounding: 4,
				AutomatedReasoning: 6}, Complete: true},
			4*100 + 6*170, "catalog_estimate", "catalog", "reported_usage"},
		{"guardrail units are not raised by the regional premium", nil,
			&internalv1.SettleItem{Model: "us.anthropic.claude-haiku-4-5-20251001-v1:0", InputTokens: 100_000, OutputTokens: 10_000,
				GuardrailUnits: guardrailed(), RegionalEndpoint: true, Complete: true},
			(100_000+50_000)*110/100 + guardrailCost, "catalog_estimate", "catalog", "reported_usage"},
		{"guardrail units are not multiplied by the fast tier", nil,
			&internalv1.SettleItem{Model: "gpt-5-mini", InputTokens: 1_000_000, GuardrailUnits: guardrailed(), Complete: true,
				PriorityTier: true, ServiceTier: internalv1.ServiceTier_SERVICE_TIER_FAST},
			250_000*180/100 + guardrailCost, "catalog_estimate", "catalog", "reported_usage"},
		{"the organization's token price leaves the catalog's guardrail prices", func() {
			setPrices(store.ModelPrice{Model: "nova-micro", InputPerMillion: 1_000_000, OutputPerMillion: 1_000_000})
		}, &internalv1.SettleItem{Model: "amazon.nova-micro-v1:0", InputTokens: 1_000, GuardrailUnits: guardrailed(), Complete: true},
			1_000 + guardrailCost, "catalog_estimate", "organization", "reported_usage"},
		{"a blocked request of a model nobody priced: its units at the catalog's prices, priced (no token needed a price)", func() { setPrices() },
			&internalv1.SettleItem{Model: "acme-guarded-1", GuardrailUnits: guardrailed(), Complete: true},
			guardrailCost, "catalog_estimate", "catalog", "reported_usage"},
		{"ApplyGuardrail, no model: its units at the catalog's prices, priced", nil,
			&internalv1.SettleItem{GuardrailUnits: guardrailed(), Complete: true},
			guardrailCost, "catalog_estimate", "catalog", "reported_usage"},
		// InvokeGuardrailChecks, the detect-only checks: no guardrail, no model, each check's
		// text units at its own price in the catalog.
		{"InvokeGuardrailChecks, no model: its checks' units at their prices, priced", nil,
			&internalv1.SettleItem{GuardrailUnits: checked(), Complete: true},
			checksCost, "catalog_estimate", "catalog", "reported_usage"},
		{"InvokeGuardrailChecks, estimated", nil,
			&internalv1.SettleItem{GuardrailUnits: checked(), UsageEstimated: true},
			checksCost, "catalog_estimate", "catalog", "estimate"},
		{"each check at its own price", nil,
			&internalv1.SettleItem{GuardrailUnits: &internalv1.GuardrailUnits{ChecksPromptAttack: 1_000}, Complete: true},
			80_000, "catalog_estimate", "catalog", "reported_usage"},
		{"the checks' units of a model nobody priced, no token: the catalog's, priced", nil,
			&internalv1.SettleItem{Model: "acme-guarded-1", GuardrailUnits: checked(), Complete: true},
			checksCost, "catalog_estimate", "catalog", "reported_usage"},
		{"the checks' units beside a guardrail's and the tokens", nil,
			&internalv1.SettleItem{Model: "amazon.nova-micro-v1:0", InputTokens: 1_000_000, OutputTokens: 100_000, GuardrailUnits: &internalv1.GuardrailUnits{
				ContentText: 3, DeniedTopics: 3, SensitiveInformation: 2, ContentImages: 1, ChecksContentFilter: 2, ChecksPromptAttack: 2,
				ChecksSensitiveInformation: 1}, Complete: true},
			35_000 + 14_000 + guardrailCost + checksCost, "catalog_estimate", "catalog", "reported_usage"},
		{"an upstream cost wins over the checks' units, which the receipt keeps", nil,
			&internalv1.SettleItem{GuardrailUnits: checked(), UpstreamCostMicroUsd: at.Cost(42), Complete: true},
			42, "upstream", "", "upstream_cost"},
		{"a guardrail's units beside tokens of a model nobody priced: unpriced", func() { setPrices() },
			&internalv1.SettleItem{Model: "acme-guarded-1", InputTokens: 1, GuardrailUnits: guardrailed(), Complete: true},
			guardrailCost + 1, "fallback", "fallback", "reported_usage"}, // the token at the organization's fallback price
		{"an upstream cost wins over guardrail units, which the receipt keeps", nil,
			&internalv1.SettleItem{Model: "amazon.nova-micro-v1:0", InputTokens: 1_000, GuardrailUnits: guardrailed(),
				UpstreamCostMicroUsd: at.Cost(42), Complete: true},
			42, "upstream", "", "upstream_cost"},
		// OpenAI's image generation tool: the images' output tokens at the catalog's
		// output price of the image model (gpt-image-1: 40 USD per million, its mini 8,
		// 1.5 32), on top of the tokens, whatever priced them, after the tier.
		{"image generation calls at gpt-image-1's output price, on top of the tokens", nil,
			&internalv1.SettleItem{Model: "gpt-4o-mini-2024-07-18", InputTokens: 1_000_000, ImageGenerationCalls: 2, ImageModel: "gpt-image-1",
				ImageOutputTokens: 12_480, Complete: true},
			150_000 + 499_200, "catalog_estimate", "catalog", "reported_usage"},
		{"image generation calls naming no image model: gpt-image-1", nil,
			&internalv1.SettleItem{Model: "gpt-4o-mini", InputTokens: 1_000_000, ImageGenerationCalls: 2, ImageOutputTokens: 12_480, Complete: true},
			150_000 + 499_200, "catalog_estimate", "catalog", "reported_usage"},
		{"gpt-image-1-mini's images at its own price", nil,
			&internalv1.SettleItem{Model: "gpt-4o-mini", OutputTokens: 1_000, ImageGenerationCalls: 1, ImageModel: "gpt-image-1-mini",
				ImageOutputTokens: 1_056, Complete: true},
			600 + 8_448, "catalog_estimate", "catalog", "reported_usage"},
		{"gpt-image-1.5's images at its own price", nil,
			&internalv1.SettleItem{Model: "gpt-5", ImageGenerationCalls: 1, ImageModel: "gpt-image-1.5", ImageOutputTokens: 4_160, Complete: true},
			133_120, "catalog_estimate", "catalog", "reported_usage"},
		{"a dated image model: its family's price", nil,
			&internalv1.SettleItem{Model: "gpt-5", ImageGenerationCalls: 1, ImageModel: "gpt-image-1-mini-2025-10-06", ImageOutputTokens: 4_160, Complete: true},
			33_280, "catalog_estimate", "catalog", "reported_usage"},
		{"image generation calls without tokens: the dearest image each", nil,
			&internalv1.SettleItem{Model: "gpt-4o-mini", ImageGenerationCalls: 2, Complete: true},
			2 * 249_600, "catalog_estimate", "catalog", "reported_usage"},
		{"gpt-image-1-mini's calls without tokens: the dearest image each at its price", nil,
			&internalv1.SettleItem{Model: "gpt-4o-mini", ImageGenerationCalls: 2, ImageModel: "gpt-image-1-mini", Complete: true},
			2 * 6_240 * 8, "catalog_estimate", "catalog", "reported_usage"},
		{"gpt-image-2's call without tokens: its dearest image (2880x2880, high) at its price", nil,
			&internalv1.SettleItem{Model: "gpt-5", ImageGenerationCalls: 1, ImageModel: "gpt-image-2", Complete: true},
			23_719 * 30, "catalog_estimate", "catalog", "reported_usage"},
		{"an image model nobody priced: the catalog's highest image output price, unpriced", nil,
			&internalv1.SettleItem{Model: "gpt-4o-mini", InputTokens: 1_000_000, ImageGenerationCalls: 1, ImageModel: "acme-image-9",
				ImageOutputTokens: 6_240, Complete: true},
			150_000 + 6_240*pricecatalog.Default().HighestImageOutput()/1_000_000, "fallback", "fallback", "reported_usage"},
		{"images are not raised by the fast tier", nil,
			&internalv1.SettleItem{Model: "gpt-4o-mini", InputTokens: 1_000_000, ImageGenerationCalls: 1, ImageOutputTokens: 6_240,
				PriorityTier: true, ServiceTier: internalv1.ServiceTier_SERVICE_TIER_FAST, Complete: true},
			250_500 + 249_600, "catalog_estimate", "catalog", "reported_usage"}, // gpt-4o-mini: 1.67 times
		{"an image model's name is cleaned", nil,
			&internalv1.SettleItem{Model: "gpt-4o-mini", ImageGenerationCalls: 1, ImageModel: "gpt-image-1-mini\x00", ImageOutputTokens: 272, Complete: true},
			2_176, "catalog_estimate", "catalog", "reported_usage"},
		{"image generation calls, estimated", nil,
			&internalv1.SettleItem{Model: "gpt-4o-mini", InputTokens: 1_000, ImageGenerationCalls: 1, ImageOutputTokens: 6_240, UsageEstimated: true},
			150 + 249_600, "catalog_estimate", "catalog", "estimate"},
		{"the organization's price of the model does not price its images", func() {
			setPrices(store.ModelPrice{Model: "gpt-4o-mini", InputPerMillion: 1_000_000, OutputPerMillion: 2_000_000, CachedInputPerMillion: 100_000})
		}, &internalv1.SettleItem{Model: "gpt-4o-mini", InputTokens: 1_000_000, ImageGenerationCalls: 1, ImageOutputTokens: 6_240, Complete: true},
			1_000_000 + 249_600, "catalog_estimate", "organization", "reported_usage"},
		// The image model's input (tool_usage.image_gen): at the catalog's input and cached
		// input prices of the image model (gpt-image-1: 10 and 2.5 USD per million, its
		// image input price), whatever priced the tokens, after the tier.
		{"the image model's input at gpt-image-1's input prices", func() { setPrices() },
			&internalv1.SettleItem{Model: "gpt-4o-mini", InputTokens: 1_000_000, ImageGenerationCalls: 1, ImageOutputTokens: 6_240,
				ImageToolInputTokens: 1_100, ImageToolCachedInputTokens: 100, Complete: true},
			150_000 + 249_600 + 10_000 + 250, "catalog_estimate", "catalog", "reported_usage"},
		{"gpt-image-1-mini's input at its own prices", nil,
			&internalv1.SettleItem{Model: "gpt-5", ImageGenerationCalls: 1, ImageModel: "gpt-image-1-mini", ImageOutputTokens: 272,
				ImageToolInputTokens: 4_000, Complete: true},
			2_176 + 10_000, "catalog_estimate", "catalog", "reported_usage"},
		{"an image model's input alone is usage", nil,
			&internalv1.SettleItem{Model: "gpt-5", ImageModel: "gpt-image-1.5", ImageToolInputTokens: 1_000, Complete: true},
			8_000, "catalog_estimate", "catalog", "reported_usage"},
		{"the input of an image model nobody priced: the catalog's highest image input prices, unpriced", nil,
			&internalv1.SettleItem{Model: "gpt-4o-mini", ImageGenerationCalls: 1, ImageModel: "acme-image-9", ImageOutputTokens: 1_000,
				ImageToolInputTokens: 1_000, Complete: true},
			1_000*pricecatalog.Default().HighestImageOutput()/1_000_000 + 10_000, "fallback", "fallback", "reported_usage"},
		{"the image model's input is not raised by the fast tier", nil,
			&internalv1.SettleItem{Model: "gpt-4o-mini", InputTokens: 1_000_000, ImageToolInputTokens: 1_000,
				PriorityTier: true, ServiceTier: internalv1.ServiceTier_SERVICE_TIER_FAST, Complete: true},
			250_500 + 10_000, "catalog_estimate", "catalog", "reported_usage"},
		{"the organization's price of the model does not price the image model's input", func() {
			setPrices(store.ModelPrice{Model: "gpt-4o-mini", InputPerMillion: 1_000_000, OutputPerMillion: 2_000_000, CachedInputPerMillion: 100_000})
		}, &internalv1.SettleItem{Model: "gpt-4o-mini", InputTokens: 1_000_000, ImageToolInputTokens: 1_000, Complete: true},
			1_000_000 + 10_000, "catalog_estimate", "organization", "reported_usage"},
		// Anthropic's advisor tool: the advisor's sub-inferences at the catalog's prices of
		// the advisor model, on top of the executor's tokens, whatever priced them, after
		// the tier and the regional premium.
		{"the advisor at claude-opus-4-7's prices, the executor at claude-haiku-4-5's", func() { setPrices() },
			advised("claude-opus-4-7", &internalv1.SettleItem{Model: "claude-haiku-4-5-20251001", InputTokens: 10_000, OutputTokens: 2_000, Complete: true}),
			executor + advisorAtOpus, "catalog_estimate", "catalog", "reported_usage"}, // 163,500; 48,700 before
		{"the advisor alone is usage", nil,
			advised("claude-opus-4-7", &internalv1.SettleItem{Model: "claude-haiku-4-5", Complete: true}),
			advisorAtOpus, "catalog_estimate", "catalog", "reported_usage"},
		{"the advisor's writes made for an hour: at twice claude-opus-4-7's input", nil,
			func() *internalv1.SettleItem {
				it := advised("claude-opus-4-7", &internalv1.SettleItem{Model: "claude-haiku-4-5", InputTokens: 10_000, OutputTokens: 2_000, Complete: true})
				it.AdvisorCacheCreationOneHourInputTokens = 8_000
				return it
			}(),
			executor + advisorAtOpus + 8_000*(2*opus.InputPerMillion-opus.CacheWrite())/1_000_000, "catalog_estimate", "catalog", "reported_usage"}, // 30,000 more
		{"a dated advisor model: its family's price", nil,
			advised("claude-opus-4-7-20260301", &internalv1.SettleItem{Model: "claude-haiku-4-5", InputTokens: 10_000, OutputTokens: 2_000, Complete: true}),
			executor + advisorAtOpus, "catalog_estimate", "catalog", "reported_usage"},
		{"an advisor's long prompt: its model's long-context price, the executor's short one", nil,
			&internalv1.SettleItem{Model: "claude-haiku-4-5", InputTokens: 10_000, OutputTokens: 2_000, AdvisorModel: "claude-sonnet-4-5",
				AdvisorInputTokens: 300_000, AdvisorOutputTokens: 1_000, Complete: true},
			executor + tokensAt(sonnet.ForInput(300_000), 300_000, 0, 0, 1_000), "catalog_estimate", "catalog", "reported_usage"}, // 20,000 + 1,822,500
		{"an advisor model nobody priced: the catalog's highest prices, unpriced", nil,
			advised("acme-advisor-9", &internalv1.SettleItem{Model: "claude-haiku-4-5", InputTokens: 10_000, OutputTokens: 2_000, Complete: true}),
			executor + advisorAtHighest, "fallback", "fallback", "reported_usage"},
		{"advisor counts naming no advisor model: the response's price, as before", nil,
			advised("", &internalv1.SettleItem{Model: "claude-haiku-4-5", InputTokens: 10_000, OutputTokens: 2_000, Complete: true}),
			executor + advisorAtHaiku, "catalog_estimate", "catalog", "reported_usage"}, // 48,700
		{"the advisor is not raised by the executor's tier or regional premium", nil,
			advised("claude-opus-4-7", &internalv1.SettleItem{Model: "claude-haiku-4-5", InputTokens: 10_000, OutputTokens: 2_000,
				PriorityTier: true, ServiceTier: internalv1.ServiceTier_SERVICE_TIER_FAST, RegionalEndpoint: true, Complete: true}),
			executorFastRegional + advisorAtOpus, "catalog_estimate", "catalog", "reported_usage"}, // 44,000 + 143,500
		{"an advisor model's name is cleaned", nil,
			advised("claude-opus-4-7\x00", &internalv1.SettleItem{Model: "claude-haiku-4-5", Complete: true}),
			advisorAtOpus, "catalog_estimate", "catalog", "reported_usage"},
		{"the advisor, estimated", nil,
			advised("claude-opus-4-7", &internalv1.SettleItem{Model: "claude-haiku-4-5", InputTokens: 10_000, UsageEstimated: true}),
			10_000 + advisorAtOpus, "catalog_estimate", "catalog", "estimate"},
		{"the organization's price of the executor does not price its advisor", func() {
			setPrices(store.ModelPrice{Model: "claude-haiku-4-5", InputPerMillion: 2_000_000, OutputPerMillion: 3_000_000, CachedInputPerMillion: 200_000})
		}, advised("claude-opus-4-7", &internalv1.SettleItem{Model: "claude-haiku-4-5", InputTokens: 10_000, OutputTokens: 2_000, Complete: true}),
			20_000 + 6_000 + advisorAtOpus, "catalog_estimate", "organization", "reported_usage"},
		{"the organization's price of the executor prices an advisor the item does not name", nil,
			advised("", &internalv1.SettleItem{Model: "claude-haiku-4-5", InputTokens: 10_000, OutputTokens: 2_000, Complete: true}),
			20_000 + 6_000 + 20_000 + 2_400 + 16_000 + 4_500, "catalog_estimate", "organization", "reported_usage"}, // writes at its input price
		// Audio tokens at the catalog's audio prices (gpt-realtime: text input 4 USD per
		// million, audio input 32, cached input 0.40, text output 16, audio output 64;
		// image input 5, cached 0.50): 10,000 input tokens of which 2,000 cached and 6,000
		// audio (on the 8,000 uncached first), no image, 5,000 output tokens of which
		// 2,000 audio.
		{"gpt-realtime with the audio split: each part at its price", func() { setPrices() },
			&internalv1.SettleItem{Model: "gpt-realtime-2025-08-28", InputTokens: 10_000, CachedInputTokens: 2_000, AudioInputTokens: i64p(6_000),
				ImageInputTokens: i64p(0), CachedImageInputTokens: i64p(0), OutputTokens: 5_000, AudioOutputTokens: i64p(2_000), Complete: true},
			6_000*32 + 2_000*4 + 2_000*4/10 + 2_000*64 + 3_000*16, "catalog_estimate", "catalog", "reported_usage"}, // 376,800
		// The cached input at the dearer of its prices too: the cached image's, 0.50.
		{"gpt-realtime without the split: the dearer price for all", nil,
			&internalv1.SettleItem{Model: "gpt-realtime-2025-08-28", InputTokens: 10_000, CachedInputTokens: 2_000, OutputTokens: 5_000, Complete: true},
			8_000*32 + 2_000*5/10 + 5_000*64, "catalog_estimate", "catalog", "reported_usage"}, // 577,000
		{"gpt-realtime, output split only", nil,
			&internalv1.SettleItem{Model: "gpt-realtime", InputTokens: 1_000, OutputTokens: 1_000, AudioOutputTokens: i64p(0), Complete: true},
			1_000*32 + 1_000*16, "catalog_estimate", "catalog", "reported_usage"},
		{"gpt-realtime, an estimate: the dearer price", nil,
			&internalv1.SettleItem{Model: "gpt-realtime", OutputTokens: 1_000, UsageEstimated: true},
			1_000 * 64, "catalog_estimate", "catalog", "estimate"},
		{"gpt-realtime, a negative audio count is ignored: the dearer price", nil,
			&internalv1.SettleItem{Model: "gpt-realtime", InputTokens: 1_000, AudioInputTokens: i64p(-5), Complete: true},
			1_000 * 32, "catalog_estimate", "catalog", "reported_usage"},
		// Gemini 2.5 Flash: text input 0.30, audio input 1.00, one output price.
		{"gemini-2.5-flash's audio input at its audio price", nil,
			&internalv1.SettleItem{Model: "gemini-2.5-flash", InputTokens: 1_000_000, AudioInputTokens: i64p(250_000), OutputTokens: 1_000,
				AudioOutputTokens: i64p(1_000), Complete: true},
			250_000 + 750_000*3/10 + 1_000*25/10, "catalog_estimate", "catalog", "reported_usage"},
		// Its cached audio at 0.25, its cached text at 0.075: 1,000,000 input tokens, 400,000
		// of them cached (100,000 audio), 250,000 audio in all (so 150,000 uncached).
		{"gemini-2.5-flash's cached audio at its cached audio price", nil,
			&internalv1.SettleItem{Model: "gemini-2.5-flash", InputTokens: 1_000_000, CachedInputTokens: 400_000, AudioInputTokens: i64p(250_000),
				CachedAudioInputTokens: i64p(100_000), Complete: true},
			150_000 + 450_000*3/10 + 100_000/4 + 300_000*75/1000, "catalog_estimate", "catalog", "reported_usage"}, // 332,500
		{"gemini-2.5-flash's cached input without its split: the cached audio price for all", nil,
			&internalv1.SettleItem{Model: "gemini-2.5-flash", InputTokens: 1_000_000, CachedInputTokens: 400_000, AudioInputTokens: i64p(250_000), Complete: true},
			250_000 + 350_000*3/10 + 400_000/4, "catalog_estimate", "catalog", "reported_usage"}, // 455,000
		// gpt-realtime-mini: text 0.60, cached text 0.06 (cached audio 0.30).
		{"gpt-realtime-mini's cached text at its cached text price", nil,
			&internalv1.SettleItem{Model: "gpt-realtime-mini", InputTokens: 10_000, CachedInputTokens: 8_000, AudioInputTokens: i64p(0),
				CachedAudioInputTokens: i64p(0), ImageInputTokens: i64p(0), CachedImageInputTokens: i64p(0), Complete: true},
			2_000*6/10 + 8_000*6/100, "catalog_estimate", "catalog", "reported_usage"}, // 1,680
		// Image input at the catalog's image prices (gpt-realtime: 5 USD per million, cached
		// 0.50): 1,000,000 text and 200,000 image tokens uncached, 100,000 cached of which
		// 40,000 image, no audio.
		{"gpt-realtime's image input at its image prices", nil,
			&internalv1.SettleItem{Model: "gpt-realtime-2025-08-28", InputTokens: 1_300_000, CachedInputTokens: 100_000, AudioInputTokens: i64p(0),
				CachedAudioInputTokens: i64p(0), ImageInputTokens: i64p(240_000), CachedImageInputTokens: i64p(40_000), Complete: true},
			1_000_000*4 + 200_000*5 + 60_000*4/10 + 40_000*5/10, "catalog_estimate", "catalog", "reported_usage"}, // 5,044,000
		// Without the image counts (an enforcer older than the image prices) the images
		// may be any of the tokens the audio part leaves: those at the image prices, the
		// dearer (5 and 0.50).
		{"gpt-realtime's input without its image counts: the image prices", nil,
			&internalv1.SettleItem{Model: "gpt-realtime-2025-08-28", InputTokens: 1_300_000, CachedInputTokens: 100_000, AudioInputTokens: i64p(0),
				CachedAudioInputTokens: i64p(0), Complete: true},
			1_200_000*5 + 100_000*5/10, "catalog_estimate", "catalog", "reported_usage"}, // 6,050,000
		// Nor the audio count: every uncached token at the audio price, the dearest.
		{"gpt-realtime's input without any split: the dearest prices", nil,
			&internalv1.SettleItem{Model: "gpt-realtime-2025-08-28", InputTokens: 1_300_000, CachedInputTokens: 100_000, Complete: true},
			1_200_000*32 + 100_000*5/10, "catalog_estimate", "catalog", "reported_usage"}, // 38,450,000
		// gpt-realtime-mini: image 0.80, cached 0.08 (text 0.60, cached 0.06).
		{"gpt-realtime-mini's image input at its image prices", nil,
			&internalv1.SettleItem{Model: "gpt-realtime-mini", InputTokens: 1_300_000, CachedInputTokens: 100_000, AudioInputTokens: i64p(0),
				CachedAudioInputTokens: i64p(0), ImageInputTokens: i64p(240_000), CachedImageInputTokens: i64p(40_000), Complete: true},
			1_000_000*6/10 + 200_000*8/10 + 60_000*6/100 + 40_000*8/100, "catalog_estimate", "catalog", "reported_usage"}, // 766,800
		{"audio counts of a model without audio prices change nothing", nil,
			&internalv1.SettleItem{Model: "gpt-4o-mini", InputTokens: 1_000_000, AudioInputTokens: i64p(1_000_000), Complete: true},
			150_000, "catalog_estimate", "catalog", "reported_usage"},
		// The organization's price is the authority for its model: all its tokens at its
		// token prices, audio or not, reported or not.
		{"the organization's price of gpt-realtime prices its audio tokens too", func() {
			setPrices(store.ModelPrice{Model: "gpt-realtime", InputPerMillion: 1_000_000, OutputPerMillion: 2_000_000, CachedInputPerMillion: 100_000})
		}, &internalv1.SettleItem{Model: "gpt-realtime-2025-08-28", InputTokens: 10_000, CachedInputTokens: 2_000, AudioInputTokens: i64p(6_000),
			OutputTokens: 5_000, AudioOutputTokens: i64p(2_000), Complete: true},
			8_000 + 2_000/10 + 5_000*2, "catalog_estimate", "organization", "reported_usage"},
		{"the organization's price of gpt-realtime, split unknown", nil,
			&internalv1.SettleItem{Model: "gpt-realtime", InputTokens: 10_000, OutputTokens: 5_000, Complete: true},
			10_000 + 5_000*2, "catalog_estimate", "organization", "reported_usage"},
		{"the organization's price of gpt-realtime prices its image tokens too", nil,
			&internalv1.SettleItem{Model: "gpt-realtime", InputTokens: 1_300_000, CachedInputTokens: 100_000, AudioInputTokens: i64p(0),
				CachedAudioInputTokens: i64p(0), ImageInputTokens: i64p(240_000), CachedImageInputTokens: i64p(40_000), Complete: true},
			1_200_000 + 100_000/10, "catalog_estimate", "organization", "reported_usage"},
		// The organization's fallback price (7 and 11, set above) has no audio prices.
		{"audio tokens of a model nobody priced: the fallback price", func() { setPrices() },
			&internalv1.SettleItem{Model: "acme-voice-1", InputTokens: 1_000_000, AudioInputTokens: i64p(500_000), OutputTokens: 1_000_000, Complete: true},
			7 + 11, "fallback", "fallback", "reported_usage"},
	}
	var unpriced int64
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.setup != nil {
				c.setup()
			}
			id := at.ReqID()
			start1(t, e, at.StartItem(id, org, m, now, 0))
			c.item.RequestId = id
			r := settle1(t, e, c.item)
			if r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED || r.CostMicroUsd != c.cost || r.CostSource != c.source ||
				r.PriceSource != c.price || r.CostBasis != c.basis {
				t.Fatalf("%v; want %d %s %s %s", r, c.cost, c.source, c.price, c.basis)
			}
			if c.source == "fallback" || c.source == "unknown" {
				unpriced++
			}
			// The receipt counts a search model's unreported search (its catalog entry's).
			wantPages := c.item.GetOcrPages()
			if e, _ := pricecatalog.Lookup(c.item.GetModel()); e.Kind == pricecatalog.OCR && wantPages == 0 && c.item.GetUsageEstimated() &&
				c.item.GetUpstreamStatus() < 400 {
				wantPages = 1
			}
			wantSearches := c.item.GetWebSearchRequests()
			if e, _ := pricecatalog.Lookup(c.item.GetModel()); e.SearchesEveryRequest && wantSearches == 0 && c.item.GetUpstreamStatus() < 400 {
				wantSearches = 1
			}
			var basis, priceSource, containerKind string
			var audio, searches, fileSearches, mapsGrounded, ocrPages, containerMinutes int64
			var audioIn, audioOut, cachedAudio, imageIn, cachedImage *int64
			var priority, regional bool
			var tier, imageModel string
			var imageCalls, imageTokens int64
			var advisorModel string
			var advisorIn, advisorOut, advisorCached, advisorWritten int64
			if err := e.Store.Pool.QueryRow(ctx, `SELECT cost_basis, price_source, audio_input_millis, web_search_requests, file_search_calls,
					audio_input_tokens, audio_output_tokens, cached_audio_input_tokens, priority_tier, regional_endpoint, service_tier,
					image_generation_calls, image_model, image_output_tokens, advisor_model, advisor_input_tokens, advisor_output_tokens,
					advisor_cached_input_tokens, advisor_cache_creation_input_tokens, maps_grounded_prompts, image_input_tokens,
					cached_image_input_tokens, ocr_pages, container_kind, container_minutes
				FROM usage_receipts WHERE request_id = $1`, id).Scan(&basis, &priceSource, &audio, &searches, &fileSearches, &audioIn, &audioOut,
				&cachedAudio, &priority, &regional, &tier, &imageCalls, &imageModel, &imageTokens, &advisorModel, &advisorIn, &advisorOut,
				&advisorCached, &advisorWritten, &mapsGrounded, &imageIn, &cachedImage, &ocrPages, &containerKind, &containerMinutes); err != nil ||
				basis != c.basis || priceSource != c.price || audio != c.item.GetAudioInputMillis() || searches != wantSearches ||
				fileSearches != c.item.GetFileSearchCalls() || mapsGrounded != c.item.GetMapsGroundedPrompts() || ocrPages != wantPages {
				t.Fatalf("stored %q %q %d ms of audio %d searches %d file searches %d maps-grounded prompts %d OCR pages %v", basis, priceSource,
					audio, searches, fileSearches, mapsGrounded, ocrPages, err)
			}
			// The guardrail units as reported, by policy, and the guardrail checks' by check.
			var guardText, guardTopics, guardSensitive, guardGrounding, guardReasoning, guardImages int64
			var checksContent, checksAttack, checksSensitive int64
			if err := e.Store.Pool.QueryRow(ctx, `SELECT guardrail_content_text_units, guardrail_denied_topic_units,
					guardrail_sensitive_information_units, guardrail_contextual_grounding_units, guardrail_automated_reasoning_units,
					guardrail_content_images, guardrail_checks_content_filter_units, guardrail_checks_prompt_attack_units,
					guardrail_checks_sensitive_information_units
				FROM usage_receipts WHERE request_id = $1`, id).Scan(&guardText, &guardTopics, &guardSensitive, &guardGrounding, &guardReasoning,
				&guardImages, &checksContent, &checksAttack, &checksSensitive); err != nil {
				t.Fatal(err)
			}
			if g := c.item.GetGuardrailUnits(); guardText != g.GetContentText() || guardTopics != g.GetDeniedTopics() ||
				guardSensitive != g.GetSensitiveInformation() || guardGrounding != g.GetContextualGrounding() ||
				guardReasoning != g.GetAutomatedReasoning() || guardImages != g.GetContentImages() ||
				checksContent != g.GetChecksContentFilter() || checksAttack != g.GetChecksPromptAttack() ||
				checksSensitive != g.GetChecksSensitiveInformation() {
				t.Fatalf("stored guardrail units %d %d %d %d %d, %d images, checks %d %d %d; want %v", guardText, guardTopics, guardSensitive,
					guardGrounding, guardReasoning, guardImages, checksContent, checksAttack, checksSensitive, g)
			}
			// The container minutes as reported, and their kind as named.
			if containerMinutes != c.item.GetContainerMinutes() || containerKind != c.item.GetContainerKind() {
				t.Fatalf("stored %d container minutes of %q, want %d of %q", containerMinutes, containerKind, c.item.GetContainerMinutes(),
					c.item.GetContainerKind())
			}
			// The image generation calls, their image model (gpt-image-1 when the item names
			// none, cleaned) and their tokens, as reported.
			wantImageModel := strings.ReplaceAll(c.item.GetImageModel(), "\x00", "")
			if wantImageModel == "" && (c.item.GetImageGenerationCalls() > 0 || c.item.GetImageToolInputTokens() > 0) {
				wantImageModel = "gpt-image-1"
			}
			if imageCalls != c.item.GetImageGenerationCalls() || imageModel != wantImageModel || imageTokens != c.item.GetImageOutputTokens() {
				t.Fatalf("stored %d image calls of %q, %d tokens; want %d of %q, %d", imageCalls, imageModel, imageTokens,
					c.item.GetImageGenerationCalls(), wantImageModel, c.item.GetImageOutputTokens())
			}
			// The image model's input as reported.
			var imageToolIn, imageToolCached int64
			if err := e.Store.Pool.QueryRow(ctx, `SELECT image_tool_input_tokens, image_tool_cached_input_tokens FROM usage_receipts
				WHERE request_id = $1`, id).Scan(&imageToolIn, &imageToolCached); err != nil ||
				imageToolIn != c.item.GetImageToolInputTokens() || imageToolCached != c.item.GetImageToolCachedInputTokens() {
				t.Fatalf("stored the image model's input %d (%d cached), want %d (%d) %v", imageToolIn, imageToolCached,
					c.item.GetImageToolInputTokens(), c.item.GetImageToolCachedInputTokens(), err)
			}
			// The advisor's model (cleaned; '' when the item names none) and its counts, as
			// reported.
			if advisorModel != strings.ReplaceAll(c.item.GetAdvisorModel(), "\x00", "") || advisorIn != c.item.GetAdvisorInputTokens() ||
				advisorOut != c.item.GetAdvisorOutputTokens() || advisorCached != c.item.GetAdvisorCachedInputTokens() ||
				advisorWritten != c.item.GetAdvisorCacheCreationInputTokens() {
				t.Fatalf("stored the advisor %q: %d in (%d cached, %d written), %d out; want %q: %d (%d, %d), %d", advisorModel, advisorIn,
					advisorCached, advisorWritten, advisorOut, c.item.GetAdvisorModel(), c.item.GetAdvisorInputTokens(),
					c.item.GetAdvisorCachedInputTokens(), c.item.GetAdvisorCacheCreationInputTokens(), c.item.GetAdvisorOutputTokens())
			}
			// The audio counts as reported (NULL when not; a negative one is ignored).
			if !sameCount(audioIn, storedCount(c.item.AudioInputTokens)) || !sameCount(audioOut, storedCount(c.item.AudioOutputTokens)) ||
				!sameCount(cachedAudio, storedCount(c.item.CachedAudioInputTokens)) {
				t.Fatalf("stored audio tokens %v %v (cached %v), want %v %v (%v)", fmtCount(audioIn), fmtCount(audioOut), fmtCount(cachedAudio),
					fmtCount(c.item.AudioInputTokens), fmtCount(c.item.AudioOutputTokens), fmtCount(c.item.CachedAudioInputTokens))
			}
			// The image input counts as reported (NULL when not).
			if !sameCount(imageIn, storedCount(c.item.ImageInputTokens)) || !sameCount(cachedImage, storedCount(c.item.CachedImageInputTokens)) {
				t.Fatalf("stored image input tokens %v (cached %v), want %v (%v)", fmtCount(imageIn), fmtCount(cachedImage),
					fmtCount(c.item.ImageInputTokens), fmtCount(c.item.CachedImageInputTokens))
			}
			// The tier flags the cost was priced with.
			if wantTier := receiptTier(c.item); priority != c.item.GetPriorityTier() || regional != c.item.GetRegionalEndpoint() || tier != wantTier {
				t.Fatalf("stored priority %v regional %v tier %q, want %v %v %q", priority, regional, tier, c.item.GetPriorityTier(),
					c.item.GetRegionalEndpoint(), wantTier)
			}
			// The same settlement again changes nothing, a fallback-priced one included.
			if again := settle1(t, e, c.item); again.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_DUPLICATE || again.CostMicroUsd != c.cost ||
				again.CostBasis != c.basis || again.PriceSource != c.price {
				t.Fatalf("repeat: %v", again)
			}
		})
	}
	if _, _, got, _, _ := e.Tracking(t, m); got != unpriced {
		t.Fatalf("unpriced %d, want %d", got, unpriced)
	}
	at.Check(t, e.Store)
}

// An estimate without container minutes (the answer was lost) promoted by the real
// usage, which counts them: the receipt takes the minutes and their kind, and the cost
// their price.
func TestContainerMinutesOnPromotion(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 1)
	id := at.ReqID()
	start1(t, e, at.StartItem(id, org, ms[0], e.Clock.Now(), 0))
	if r := settle1(t, e, &internalv1.SettleItem{RequestId: id, Model: "gpt-4.1-nano", InputTokens: 1_000_000, UsageEstimated: true}); r.Outcome !=
		internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED || r.CostMicroUsd != 100_000 {
		t.Fatalf("estimate: %v", r)
	}
	r := settle1(t, e, &internalv1.SettleItem{RequestId: id, Model: "gpt-4.1-nano", InputTokens: 1_000_000, ContainerKind: "openai-4g",
		ContainerMinutes: 5, Complete: true})
	if r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_PROMOTED || r.CostMicroUsd != 100_000+30_000 || r.PriceSource != "catalog" {
		t.Fatalf("promotion: %v", r)
	}
	var kind string
	var minutes int64
	if err := e.Store.Pool.QueryRow(ctx, `SELECT container_kind, container_minutes FROM usage_receipts WHERE request_id = $1`, id).Scan(&kind,
		&minutes); err != nil || kind != "openai-4g" || minutes != 5 {
		t.Fatalf("promoted receipt's containers: %d minutes of %q (%v)", minutes, kind, err)
	}
	at.Check(t, e.Store)
}

// An estimate of a request whose answer was lost (its tokens, no guardrail units)
// promoted by the real usage, which counts its guardrail's units: the receipt takes the
// units, and the cost their price at the catalog's guardrail prices. Then a request its
// guardrail blocked, estimated (the enforcer saw its guardrail's verdict, not its bill):
// charged its units, never complete, counted as estimated.
func TestGuardrailUnitsOnPromotion(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 1)
	m := ms[0]
	id := at.ReqID()
	start1(t, e, at.StartItem(id, org, m, e.Clock.Now(), 0))
	if r := settle1(t, e, &internalv1.SettleItem{RequestId: id, Model: "amazon.nova-lite-v1:0", InputTokens: 1_000_000, UsageEstimated: true}); r.Outcome !=
		internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED || r.CostMicroUsd != 60_000 {
		t.Fatalf("estimate: %v", r)
	}
	r := settle1(t, e, &internalv1.SettleItem{RequestId: id, Model: "amazon.nova-lite-v1:0", InputTokens: 1_000_000,
		GuardrailUnits: &internalv1.GuardrailUnits{ContentText: 3, DeniedTopics: 3, SensitiveInformation: 2, ContentImages: 1}, Complete: true})
	if r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_PROMOTED || r.CostMicroUsd != 60_000+1_850 || r.PriceSource != "catalog" ||
		r.CostBasis != "reported_usage" {
		t.Fatalf("promotion: %v", r)
	}
	guardrails := func(id string) (units [6]int64, complete bool) {
		t.Helper()
		if err := e.Store.Pool.QueryRow(ctx, `SELECT guardrail_content_text_units, guardrail_denied_topic_units,
				guardrail_sensitive_information_units, guardrail_contextual_grounding_units, guardrail_automated_reasoning_units,
				guardrail_content_images, complete
			FROM usage_receipts WHERE request_id = $1`, id).Scan(&units[0], &units[1], &units[2], &units[3], &units[4], &units[5],
			&complete); err != nil {
			t.Fatal(err)
		}
		return units, complete
	}
	if units, complete := guardrails(id); units != [6]int64{3, 3, 2, 0, 0, 1} || !complete {
		t.Fatalf("promoted receipt's guardrail units %v, complete %v", units, complete)
	}
	blocked := at.ReqID()
	start1(t, e, at.StartItem(blocked, org, m, e.Clock.Now(), 0))
	r = settle1(t, e, &internalv1.SettleItem{RequestId: blocked, Model: "amazon.nova-lite-v1:0",
		GuardrailUnits: &internalv1.GuardrailUnits{ContentText: 2, DeniedTopics: 2}, UsageEstimated: true, Complete: true})
	if r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED || r.CostMicroUsd != 600 || r.CostBasis != "estimate" || r.PriceSource != "catalog" {
		t.Fatalf("blocked, estimated: %v", r)
	}
	if units, complete := guardrails(blocked); units != [6]int64{2, 2, 0, 0, 0, 0} || complete {
		t.Fatalf("blocked receipt's guardrail units %v, complete %v", units, complete)
	}
	if used := e.Used(t, org, m, window.Day, e.Clock.Now()); used != 60_000+1_850+600 {
		t.Fatalf("member used %d, want %d", used, 60_000+1_850+600)
	}
	// The promotion resolved the first estimate; the blocked request is one.
	var estimated, incomplete int64
	if err := e.Store.Pool.QueryRow(ctx, `SELECT estimated_requests, incomplete_requests FROM usage_member_tracking WHERE member_id = $1`,
		m).Scan(&estimated, &incomplete); err != nil || estimated != 1 || incomplete != 1 {
		t.Fatalf("member's estimated requests %d, incomplete %d, want 1 and 1 (%v)", estimated, incomplete, err)
	}
	at.Check(t, e.Store)
}

// A call of the detect-only guardrail checks (InvokeGuardrailChecks, no model) whose
// answer was lost, estimated (its request body's text units at every check: 1 each,
// 70 + 80 + 100 = 250 micro-USD), promoted by the real usage (2 content-filter, 2
// prompt-attack and 1 sensitive-information units: 400): the receipt takes the real
// units and the cost their price, from the catalog.
func TestGuardrailChecksOnPromotion(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 1)
	m := ms[0]
	id := at.ReqID()
	start1(t, e, at.StartItem(id, org, m, e.Clock.Now(), 0))
	checks := func() (units [3]int64, complete bool, basis string) {
		t.Helper()
		if err := e.Store.Pool.QueryRow(ctx, `SELECT guardrail_checks_content_filter_units, guardrail_checks_prompt_attack_units,
				guardrail_checks_sensitive_information_units, complete, cost_basis
			FROM usage_receipts WHERE request_id = $1`, id).Scan(&units[0], &units[1], &units[2], &complete, &basis); err != nil {
			t.Fatal(err)
		}
		return units, complete, basis
	}
	if r := settle1(t, e, &internalv1.SettleItem{RequestId: id, GuardrailUnits: &internalv1.GuardrailUnits{ChecksContentFilter: 1,
		ChecksPromptAttack: 1, ChecksSensitiveInformation: 1}, UsageEstimated: true}); r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED ||
		r.CostMicroUsd != 250 || r.PriceSource != "catalog" || r.CostBasis != "estimate" {
		t.Fatalf("estimate: %v", r)
	}
	if units, complete, basis := checks(); units != [3]int64{1, 1, 1} || complete || basis != "estimate" {
		t.Fatalf("estimated receipt's checks' units %v, complete %v, basis %q", units, complete, basis)
	}
	r := settle1(t, e, &internalv1.SettleItem{RequestId: id, GuardrailUnits: &internalv1.GuardrailUnits{ChecksContentFilter: 2,
		ChecksPromptAttack: 2, ChecksSensitiveInformation: 1}, Complete: true})
	if r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_PROMOTED || r.CostMicroUsd != 400 || r.PriceSource != "catalog" ||
		r.CostSource != "catalog_estimate" || r.CostBasis != "reported_usage" {
		t.Fatalf("promotion: %v", r)
	}
	if units, complete, basis := checks(); units != [3]int64{2, 2, 1} || !complete || basis != "reported_usage" {
		t.Fatalf("promoted receipt's checks' units %v, complete %v, basis %q", units, complete, basis)
	}
	if used := e.Used(t, org, m, window.Day, e.Clock.Now()); used != 400 {
		t.Fatalf("member used %d, want 400", used)
	}
	at.Check(t, e.Store)
}

// containerCost is the price of minutes of a container, ceil(minutes * perHour / 60).
func containerCost(c pricecatalog.Container, minutes int64) int64 {
	return (minutes*c.PerHour + 59) / 60
}

// storedCount is an audio or image count as a receipt keeps it: a negative one is
// ignored.
func storedCount(v *int64) *int64 {
	if v == nil || *v < 0 {
		return nil
	}
	return v
}

func sameCount(a, b *int64) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func fmtCount(v *int64) string {
	if v == nil {
		return "NULL"
	}
	return strconv.FormatInt(*v, 10)
}

// An estimate of gpt-realtime (no audio split: the dearer prices) promoted by the real
// usage, which reports the split (its cached audio and its image parts too, and the
// priority tier): the receipt takes the new counts, and retention's pruning clears them
// with the other detail and keeps the tier, which explains the cost it keeps.
func TestAudioSplitOnPromotionAndPruning(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 1)
	m := ms[0]
	now := e.Clock.Now()
	id := at.ReqID()
	start1(t, e, at.StartItem(id, org, m, now, 0))
	r := settle1(t, e, &internalv1.SettleItem{RequestId: id, Model: "gpt-realtime", OutputTokens: 1_000, UsageEstimated: true})
	if r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED || r.CostMicroUsd != 1_000*64 {
		t.Fatalf("estimate: %v", r)
	}
	var priority bool
	var image, cachedImage *int64
	counts := func() (in, out, cachedIn *int64) {
		t.Helper()
		if err := e.Store.Pool.QueryRow(ctx, `SELECT audio_input_tokens, audio_output_tokens, cached_audio_input_tokens, priority_tier,
				image_input_tokens, cached_image_input_tokens
			FROM usage_receipts WHERE request_id = $1`, id).Scan(&in, &out, &cachedIn, &priority, &image, &cachedImage); err != nil {
			t.Fatal(err)
		}
		return
	}
	if in, out, cachedIn := counts(); in != nil || out != nil || cachedIn != nil || image != nil || cachedImage != nil || priority {
		t.Fatalf("an estimate's audio tokens %s %s %s, image %s %s, priority %v, want NULL", fmtCount(in), fmtCount(out), fmtCount(cachedIn),
			fmtCount(image), fmtCount(cachedImage), priority)
	}
	// 3,500 input tokens, 3,000 audio and 500 image: uncached 2,000 audio (2,000*32) and
	// 300 image (300*5); cached 1,200, 200 image (200*0.5) and 1,000 audio, at the
	// cached text price (1,000*0.4). 1,000 output tokens of which 500 audio (32,000 +
	// 8,000), at the priority tier (twice): more than the estimate, so it promotes it.
	const promoted = 2 * (2_000*32 + 300*5 + 200*5/10 + 1_000*4/10 + 500*64 + 500*16) // 212,000
	r = settle1(t, e, &internalv1.SettleItem{RequestId: id, Model: "gpt-realtime", InputTokens: 3_500, CachedInputTokens: 1_200,
		AudioInputTokens: i64p(3_000), CachedAudioInputTokens: i64p(1_000), ImageInputTokens: i64p(500), CachedImageInputTokens: i64p(200),
		OutputTokens: 1_000, AudioOutputTokens: i64p(500), Complete: true, PriorityTier: true})
	if r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_PROMOTED || r.CostMicroUsd != promoted {
		t.Fatalf("promotion: %v, want %d", r, promoted)
	}
	if in, out, cachedIn := counts(); !sameCount(in, i64p(3_000)) || !sameCount(out, i64p(500)) || !sameCount(cachedIn, i64p(1_000)) ||
		!sameCount(image, i64p(500)) || !sameCount(cachedImage, i64p(200)) || !priority {
		t.Fatalf("promoted audio tokens %s %s %s, image %s %s, priority %v; want 3000 500 1000, 500 200, true", fmtCount(in), fmtCount(out),
			fmtCount(cachedIn), fmtCount(image), fmtCount(cachedImage), priority)
	}
	if used := e.Used(t, org, m, window.Day, now); used != promoted {
		t.Fatalf("used %d", used)
	}
	at.Check(t, e.Store)
	if n, err := store.PruneReceiptDetail(ctx, e.Store.Pool, []string{id}, now.Add(24*time.Hour), now.Add(24*time.Hour)); err != nil || n != 1 {
		t.Fatalf("pruned %d %v", n, err)
	}
	if in, out, cachedIn := counts(); in != nil || out != nil || cachedIn != nil || image != nil || cachedImage != nil || !priority {
		t.Fatalf("pruned audio tokens %s %s %s, image %s %s, priority %v; want NULL and the tier kept", fmtCount(in), fmtCount(out),
			fmtCount(cachedIn), fmtCount(image), fmtCount(cachedImage), priority)
	}
}

// An estimated receipt is incomplete and counted estimated until the real usage of the
// same request promotes it.
func TestEstimatedReceiptIsPromotedByReportedUsage(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 1)
	m := ms[0]
	now := e.Clock.Now()
	id := at.ReqID()
	start1(t, e, at.StartItem(id, org, m, now, 0))
	r := settle1(t, e, &internalv1.SettleItem{RequestId: id, Model: "gpt-4o-mini", InputTokens: 1000, OutputTokens: 100_000, UsageEstimated: true, Complete: true})
	if r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED || r.CostBasis != "estimate" || r.CostMicroUsd != 150+60_000 {
		t.Fatalf("estimate: %v", r)
	}
	estimated := func() (n int64, basis string) {
		if err := e.Store.Pool.QueryRow(ctx, `SELECT estimated_requests, last_settlement_cost_basis FROM usage_member_tracking WHERE member_id = $1`, m).
			Scan(&n, &basis); err != nil {
			t.Fatal(err)
		}
		return
	}
	if _, _, _, incomplete, _ := e.Tracking(t, m); incomplete != 1 {
		t.Fatalf("an estimate is incomplete: %d", incomplete)
	}
	if n, basis := estimated(); n != 1 || basis != "estimate" {
		t.Fatalf("estimated %d, last basis %q", n, basis)
	}
	at.Check(t, e.Store)
	r = settle1(t, e, &internalv1.SettleItem{RequestId: id, Model: "gpt-4o-mini", InputTokens: 1000, OutputTokens: 120_000, Complete: true})
	if r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_PROMOTED || r.CostBasis != "reported_usage" || r.CostMicroUsd != 150+72_000 {
		t.Fatalf("promotion: %v", r)
	}
	if n, basis := estimated(); n != 0 || basis != "reported_usage" {
		t.Fatalf("estimated %d, last basis %q", n, basis)
	}
	if used := e.Used(t, org, m, window.Day, now); used != 150+72_000 {
		t.Fatalf("used %d", used)
	}
	at.Check(t, e.Store)
}

// unrecorded is the snapshot of a fail-open admission made without a mirror record.
func unrecorded(org, member string, admitted time.Time) *internalv1.Snapshot {
	s := at.Snapshot(org, member, admitted, 0)
	for _, b := range s.Buckets {
		b.PolicyId = "unknown"
	}
	return s
}

// A fail-open admission made without a mirror record is charged on the windows of its
// admission time when it was admitted in the member's current capture epoch (or before
// the member had a tracking row), and quarantined when capture is suspended or it was
// admitted before the epoch began. Before, it was NO_SNAPSHOT (no snapshot) or, with a
// snapshot at tracking version 0, EPOCH_CHANGED whenever the member's row was past
// version 1.
func TestFailOpenWithoutRecordIsCharged(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 3)
	fresh, moved, suspended := ms[0], ms[1], ms[2]
	begin := e.Clock.Now()
	setCapture := func(member string, version int64, enabled bool) {
		t.Helper()
		if err := e.Store.InTx(ctx, func(tx pgx.Tx) error {
			_, err := store.SetCapture(ctx, tx, org, member, 0, version, enabled, e.Clock.Now())
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	// moved: its epoch began at begin+1h (a suspend and a resume); suspended: capture off.
	e.Clock.Set(begin.Add(time.Hour))
	setCapture(moved, 3, true)
	setCapture(suspended, 2, false)
	epoch := e.Clock.Now()
	e.Clock.Set(epoch.Add(time.Hour))
	item := func(member string, admitted time.Time) *internalv1.SettleItem {
		return &internalv1.SettleItem{RequestId: at.ReqID(), OrganizationId: org, MemberId: member, AdmittedWithoutRecord: true,
			Snapshot: unrecorded(org, member, admitted), Model: "gpt-4o-mini", OutputTokens: 1_000_000, Complete: true}
	}
	cases := []struct {
		name   string
		item   *internalv1.SettleItem
		want   internalv1.SettleOutcome
		reason string // quarantine reason
	}{
		{"no tracking row yet", item(fresh, begin.Add(30*time.Minute)), internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED, ""},
		{"admitted in the current epoch", item(moved, epoch.Add(time.Minute)), internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED, ""},
		{"admitted at the epoch's first millisecond", item(moved, epoch), internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED, ""},
		{"admitted before the epoch began", item(moved, epoch.Add(-time.Minute)), internalv1.SettleOutcome_SETTLE_OUTCOME_EPOCH_CHANGED, "epoch_changed"},
		{"capture suspended", item(suspended, epoch.Add(time.Minute)), internalv1.SettleOutcome_SETTLE_OUTCOME_EPOCH_CHANGED, "capture_suspended"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := settle1(t, e, c.item)
			if r.Outcome != c.want {
				t.Fatalf("%v", r)
			}
			admitted := time.UnixMilli(c.item.Snapshot.AdmittedAtUnixMs)
			var quarantined int64
			if err := e.Store.Pool.QueryRow(ctx, `SELECT count(*) FROM usage_quarantined_settlements WHERE request_id = $1 AND reason = $2`,
				c.item.RequestId, c.reason).Scan(&quarantined); err != nil {
				t.Fatal(err)
			}
			if c.reason == "" {
				if r.CostMicroUsd != 600_000 || quarantined != 0 {
					t.Fatalf("charged %d, quarantined %d", r.CostMicroUsd, quarantined)
				}
				// Charged on the windows of the admission time.
				var charged []string
				if err := e.Store.Pool.QueryRow(ctx, `SELECT charge_bucket_ids FROM usage_receipts WHERE request_id = $1`, c.item.RequestId).Scan(&charged); err != nil ||
					len(charged) != 3 || charged[0] != window.BucketID(org, c.item.MemberId, window.Day, window.Of(window.Day, admitted).Start) {
					t.Fatalf("charges %v %v", charged, err)
				}
				return
			}
			if quarantined != 1 || r.CostMicroUsd != 0 {
				t.Fatalf("quarantined %d, charged %d", quarantined, r.CostMicroUsd)
			}
		})
	}
	if used := e.Used(t, org, moved, window.Day, epoch); used != 1_200_000 {
		t.Fatalf("moved member used %d", used)
	}
	// The marker is accepted only with the flag, and the flag only with the marker.
	plain := item(moved, epoch.Add(time.Minute))
	plain.AdmittedWithoutRecord = false
	if r := settle1(t, e, plain); r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_INVALID || !strings.Contains(r.Message, "unknown") {
		t.Fatalf("marker without the flag: %v", r)
	}
	flagged := item(moved, epoch.Add(time.Minute))
	flagged.Snapshot = at.Snapshot(org, moved, epoch.Add(time.Minute), 0)
	if r := settle1(t, e, flagged); r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_INVALID {
		t.Fatalf("flag without the marker: %v", r)
	}
	// A start may never carry the marker.
	st := at.StartItem(at.ReqID(), org, moved, epoch.Add(time.Minute), 3)
	st.Snapshot = unrecorded(org, moved, epoch.Add(time.Minute))
	if r := start1(t, e, st); r.Outcome != internalv1.StartOutcome_START_OUTCOME_INVALID {
		t.Fatalf("start with the marker: %v", r)
	}
	// Without any snapshot there is still nothing to charge: NO_SNAPSHOT, as before.
	bare := item(fresh, begin)
	bare.Snapshot = nil
	if r := settle1(t, e, bare); r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_NO_SNAPSHOT {
		t.Fatalf("no snapshot: %v", r)
	}
	at.Check(t, e.Store)
}

// Fail-open admissions without a mirror record, made before the member had a tracking
// row, are all charged: the first to settle creates the row by first use (version 1,
// tracking_started_at = that settlement's instant), which is the same capture epoch as
// no row at all (accounting.Epoch), so the others, admitted before that instant, are
// not stale. Only a real fence move (a suspend and a resume) ends that epoch: a request
// admitted before the resume is then refused. Before 2026-12-02 every later settlement
// of a request admitted before the row was written was quarantined epoch_changed and
// not charged, though no operator had moved the fence.
func TestFailOpenWithoutRecordBeforeFirstUseRowIsCharged(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 1)
	m := ms[0]
	t0 := e.Clock.Now()
	item := func(admitted time.Time) *internalv1.SettleItem {
		return &internalv1.SettleItem{RequestId: at.ReqID(), OrganizationId: org, MemberId: m, AdmittedWithoutRecord: true,
			Snapshot: unrecorded(org, m, admitted), Model: "gpt-4o-mini", OutputTokens: 1_000_000, Complete: true}
	}
	setCapture := func(from, version int64, enabled bool) {
		t.Helper()
		if err := e.Store.InTx(ctx, func(tx pgx.Tx) error {
			moved, err := store.SetCapture(ctx, tx, org, m, from, version, enabled, e.Clock.Now())
			if err == nil && !moved {
				err = fmt.Errorf("the tracking row is not at version %d", from)
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	quarantined := func(id, reason string) int64 {
		t.Helper()
		var n int64
		if err := e.Store.Pool.QueryRow(ctx, `SELECT count(*) FROM usage_quarantined_settlements WHERE request_id = $1 AND reason = $2`,
			id, reason).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// Three requests while Redis is down; the first one's settlement creates the row.
	first, second, stale := item(t0), item(t0.Add(5*time.Second)), item(t0.Add(10*time.Second))
	steps := []struct {
		name   string
		at     time.Duration // since t0, when the step happens
		fence  func()        // an operator's move, instead of a settlement
		item   *internalv1.SettleItem
		want   internalv1.SettleOutcome
		reason string // quarantine reason
	}{
		{name: "the first settlement creates the row", at: 30 * time.Second, item: first, want: internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED},
		{name: "admitted before the row was written", at: 40 * time.Second, item: second, want: internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED},
		{name: "suspend", at: 50 * time.Second, fence: func() { setCapture(1, 2, false) }},
		{name: "admitted before the row was written, capture suspended", at: 55 * time.Second, item: item(t0.Add(20 * time.Second)),
			want: internalv1.SettleOutcome_SETTLE_OUTCOME_EPOCH_CHANGED, reason: "capture_suspended"},
		{name: "resume", at: 60 * time.Second, fence: func() { setCapture(2, 3, true) }},
		{name: "admitted before the resume", at: 70 * time.Second, item: stale,
			want: internalv1.SettleOutcome_SETTLE_OUTCOME_EPOCH_CHANGED, reason: "epoch_changed"},
		{name: "admitted after the resume", at: 80 * time.Second, item: item(t0.Add(65 * time.Second)), want: internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED},
	}
	for _, s := range steps {
		e.Clock.Set(t0.Add(s.at))
		if s.fence != nil {
			s.fence()
			continue
		}
		r := settle1(t, e, s.item)
		if r.Outcome != s.want {
			t.Fatalf("%s (admitted %s, settled %s): outcome %v, charged %d: %s", s.name,
				time.UnixMilli(s.item.Snapshot.AdmittedAtUnixMs).UTC().Format(time.RFC3339), e.Clock.Now().Format(time.RFC3339),
				r.Outcome, r.CostMicroUsd, r.Message)
		}
		if s.reason == "" {
			if r.CostMicroUsd != 600_000 {
				t.Fatalf("%s: charged %d", s.name, r.CostMicroUsd)
			}
			continue
		}
		if n := quarantined(s.item.RequestId, s.reason); n != 1 || r.CostMicroUsd != 0 {
			t.Fatalf("%s: quarantined %d (%s), charged %d", s.name, n, s.reason, r.CostMicroUsd)
		}
	}
	if used := e.Used(t, org, m, window.Day, t0); used != 1_800_000 {
		t.Fatalf("the member's day counter holds %d micro-USD; the three charged requests cost 1,800,000", used)
	}
	at.Check(t, e.Store)
}

// A fail-open admission (no durable start; its snapshot only in the admitting
// enforcer's memory) reported first without its snapshot (another replica's POST
// /settle, or a fresh report that overtook the admitting enforcer's settlement sitting
// in its retry backoff) is quarantined NO_SNAPSHOT with its real cost. When the
// admitting enforcer's own settlement then creates the event from the snapshot, the
// quarantined report is applied to it as a later report, in the same transaction, by
// the usual rules (a known or more complete cost promotes once; a lower one changes
// nothing), and its record is marked resolved. Before, the event was charged the
// snapshot settlement's cost alone (0 here), and reconciliation refused the record as
// already recorded: the real cost was charged by no path.
func TestQuarantinedReportIsAppliedWhenTheSnapshotCreatesTheEvent(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 2)
	m, other := ms[0], ms[1]
	admitted := e.Clock.Now()
	cases := []struct {
		name       string
		quarantine *internalv1.SettleItem // by request id only: NO_SNAPSHOT
		settle     *internalv1.SettleItem // with the snapshot: creates the event
		want       int64                  // charged in the end
		outcome    internalv1.SettleOutcome
		resolved   bool // the quarantine record is marked
	}{
		{"the real cost promotes an incomplete settlement",
			&internalv1.SettleItem{OrganizationId: org, MemberId: m, UpstreamCostMicroUsd: at.Cost(5000), Complete: true, Model: "m"},
			&internalv1.SettleItem{}, 5000, internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED, true},
		{"the real cost promotes an input estimate",
			&internalv1.SettleItem{OrganizationId: org, MemberId: m, UpstreamCostMicroUsd: at.Cost(5000), Complete: true, Model: "m"},
			&internalv1.SettleItem{Model: "gpt-4o-mini", InputTokens: 1000, UsageEstimated: true}, 5000,
			internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED, true},
		{"the same cost twice is charged once",
			&internalv1.SettleItem{OrganizationId: org, MemberId: m, UpstreamCostMicroUsd: at.Cost(700), Complete: true, Model: "m"},
			&internalv1.SettleItem{UpstreamCostMicroUsd: at.Cost(700), Complete: true, Model: "m"}, 700,
			internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED, true},
		{"a lower quarantined cost changes nothing",
			&internalv1.SettleItem{OrganizationId: org, MemberId: m, UpstreamCostMicroUsd: at.Cost(300), Model: "m"},
			&internalv1.SettleItem{UpstreamCostMicroUsd: at.Cost(800), Complete: true, Model: "m"}, 800,
			internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED, true},
		{"a record naming another member stays for review",
			&internalv1.SettleItem{OrganizationId: org, MemberId: other, UpstreamCostMicroUsd: at.Cost(5000), Complete: true, Model: "m"},
			&internalv1.SettleItem{}, 0, internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := e.Used(t, org, m, window.Day, admitted)
			id := at.ReqID()
			c.quarantine.RequestId = id
			if r := settle1(t, e, c.quarantine); r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_NO_SNAPSHOT {
				t.Fatalf("the report without a snapshot: %v", r)
			}
			c.settle.RequestId, c.settle.OrganizationId, c.settle.MemberId = id, org, m
			c.settle.Snapshot = at.Snapshot(org, m, admitted, 0)
			applied := testutil.ToFloat64(e.Metrics.QuarantineApplied)
			r := settle1(t, e, c.settle)
			if r.Outcome != c.outcome {
				t.Fatalf("the settlement with the snapshot: %v", r)
			}
			if got, want := testutil.ToFloat64(e.Metrics.QuarantineApplied)-applied, map[bool]float64{true: 1}[c.resolved]; got != want {
				t.Errorf("tollgate_controlplane_accounting_quarantine_applied_total rose by %v, want %v", got, want)
			}
			var charged int64
			var resolved bool
			if err := e.Store.Pool.QueryRow(ctx, `SELECT r.cost_micro_usd, q.reconciled_at IS NOT NULL FROM usage_receipts r
				JOIN usage_quarantined_settlements q USING (request_id) WHERE r.request_id = $1`, id).Scan(&charged, &resolved); err != nil {
				t.Fatal(err)
			}
			if charged != c.want || resolved != c.resolved {
				t.Fatalf("receipt charged %d, record resolved %v; want %d, %v (answer %v)", charged, resolved, c.want, c.resolved, r)
			}
			if c.resolved && !strings.Contains(r.Message, "quarantined") {
				t.Errorf("the answer does not say the quarantined report was applied: %v", r)
			}
			if used := e.Used(t, org, m, window.Day, admitted); used != before+c.want {
				t.Fatalf("day used %d, want %d", used, before+c.want)
			}
			// Either report sent again charges nothing more.
			for _, again := range []*internalv1.SettleItem{c.quarantine, c.settle} {
				if r := settle1(t, e, again); r.Outcome == internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED ||
					r.Outcome == internalv1.SettleOutcome_SETTLE_OUTCOME_NO_SNAPSHOT {
					t.Fatalf("sent again: %v", r)
				}
			}
			if used := e.Used(t, org, m, window.Day, admitted); used != before+c.want {
				t.Fatalf("after the repeats: day used %d, want %d", used, before+c.want)
			}
		})
	}
	at.Check(t, e.Store)
}

// receiptTier is the service_tier a receipt of it should say: its service_tier's, a tier
// unknown here as "ultrafast" (the dearest), else "fast" for an older enforcer's
// priority_tier.
func receiptTier(it *internalv1.SettleItem) string {
	switch it.GetServiceTier() {
	case internalv1.ServiceTier_SERVICE_TIER_UNSPECIFIED:
		if it.GetPriorityTier() {
			return "fast"
		}
		if it.GetDiscountTier() == internalv1.DiscountTier_DISCOUNT_TIER_FLEX {
			return "flex"
		}
		return ""
	case internalv1.ServiceTier_SERVICE_TIER_FAST:
		return "fast"
	case internalv1.ServiceTier_SERVICE_TIER_LATENCY_OPTIMIZED:
		return "latency_optimized"
	}
	return "ultrafast"
}

// TestAnnouncedPriceChange: a price change the catalog announces applies to the requests
// finished from its day on, whenever they are settled; a request that says not when it
// finished is priced when it is settled.
func TestAnnouncedPriceChange(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	e := at.New(t, at.Options{})
	newYear := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	e.Clock.Set(newYear.Add(-time.Hour))
	org, ms := e.Org(t, 1)
	m := ms[0]
	// Gemini 3.8 Flash doubles on 2027-01-01 (the embedded catalog's change).
	before, okBefore := pricecatalog.At(newYear.Add(-time.Nanosecond)).Lookup("gemini-3.8-flash")
	after, okAfter := pricecatalog.At(newYear).Lookup("gemini-3.8-flash")
	if !okBefore || !okAfter || after.InputPerMillion <= before.InputPerMillion || after.OutputPerMillion <= before.OutputPerMillion {
		t.Fatalf("the catalog announces no rise of gemini-3.8-flash: %+v, then %+v", before.Price, after.Price)
	}
	// 1,000,000 input and 100,000 output tokens.
	costAt := func(p pricecatalog.Price) int64 {
		return (1_000_000*p.InputPerMillion + 100_000*p.OutputPerMillion + 999_999) / 1_000_000
	}
	for _, tc := range []struct {
		name     string
		clock    time.Time
		finished time.Time // zero: not said
		want     int64
	}{
		{"finished and settled the day before", newYear.Add(-time.Hour), newYear.Add(-time.Millisecond), costAt(before.Price)},
		{"settled the day before, its end not said", newYear.Add(-time.Hour), time.Time{}, costAt(before.Price)},
		{"finished the day before, settled after midnight", newYear.Add(30 * time.Minute), newYear.Add(-time.Second), costAt(before.Price)},
		{"finished at midnight", newYear.Add(30 * time.Minute), newYear, costAt(after.Price)},
		{"settled after midnight, its end not said", newYear.Add(30 * time.Minute), time.Time{}, costAt(after.Price)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.Clock.Set(tc.clock)
			id := at.ReqID()
			start1(t, e, at.StartItem(id, org, m, tc.clock, 0))
			it := &internalv1.SettleItem{RequestId: id, Model: "gemini-3.8-flash", InputTokens: 1_000_000, OutputTokens: 100_000, Complete: true}
			if !tc.finished.IsZero() {
				it.FinishedAtUnixMs = tc.finished.UnixMilli()
			}
			r := settle1(t, e, it)
			if r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED || r.CostMicroUsd != tc.want || r.PriceSource != "catalog" {
				t.Fatalf("%v; want %d micro-USD at the catalog's price", r, tc.want)
			}
		})
	}
}

// TestUpstreamHostPrices: a name several hosts serve at different prices is charged the
// host's own catalog price where the item names that host (in any case, with a port),
// else the name's price, the dearest; a host that is no host name is dropped and noted.
func TestUpstreamHostPrices(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 1)
	m := ms[0]
	now := e.Clock.Now()
	groq, okGroq := pricecatalog.Default().LookupFor("api.groq.com", "gpt-oss-120b")
	anyHost, okAny := pricecatalog.Lookup("gpt-oss-120b")
	if !okGroq || !okAny || len(groq.Hosts) == 0 || groq.InputPerMillion >= anyHost.InputPerMillion {
		t.Fatalf("the catalog has no cheaper price of gpt-oss-120b for Groq: %+v, %+v", groq, anyHost)
	}
	// 1,000,000 input tokens (200,000 of them cached) and 100,000 output.
	costAt := func(p pricecatalog.Price) int64 {
		return (800_000*p.InputPerMillion + 200_000*p.CachedInputPerMillion + 100_000*p.OutputPerMillion + 999_999) / 1_000_000
	}
	for _, tc := range []struct {
		name, host string
		want       int64
		note       bool
	}{
		{"Groq's own price", "api.groq.com", costAt(groq.Price), false},
		{"its host as a request's authority", "API.Groq.com:443", costAt(groq.Price), false},
		{"another host: the name's price", "api.cerebras.ai", costAt(anyHost.Price), false},
		{"no host: the name's price", "", costAt(anyHost.Price), false},
		{"no host name: dropped", "api.groq.com/v1", costAt(anyHost.Price), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := at.ReqID()
			start1(t, e, at.StartItem(id, org, m, now, 0))
			r := settle1(t, e, &internalv1.SettleItem{RequestId: id, Model: "openai/gpt-oss-120b", InputTokens: 1_000_000,
				CachedInputTokens: 200_000, OutputTokens: 100_000, Complete: true, UpstreamHost: tc.host})
			if r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED || r.CostMicroUsd != tc.want || r.PriceSource != "catalog" ||
				strings.Contains(r.Message, "upstream_host dropped") != tc.note {
				t.Fatalf("%v; want %d micro-USD at the catalog's price (host noted as dropped: %v)", r, tc.want, tc.note)
			}
			// The receipt keeps the host it was priced for (NULL when none).
			var host *string
			if err := e.Store.Pool.QueryRow(ctx, `SELECT upstream_host FROM usage_receipts WHERE request_id = $1`, id).Scan(&host); err != nil {
				t.Fatal(err)
			}
			if want := strings.ToLower(strings.TrimSuffix(tc.host, ":443")); (host == nil) != (want == "" || tc.note) || (host != nil && *host != want) {
				t.Fatalf("receipt's upstream_host %v, want %q", host, want)
			}
		})
	}
}

// TestOrganizationPriceEditAppliesByFinishTime: an organization's own price, and its
// fallback price, are those in effect when the request finished, as the catalog's
// announced changes are: a request finished before an edit and settled after it (a spool
// replayed, a report sent again) pays the price it ran at; one finished before the
// organization priced a model at all pays the catalog's; one whose end is not said, the
// price when it is settled.
func TestOrganizationPriceEditAppliesByFinishTime(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 1)
	m := ms[0]
	t0 := e.Clock.Now()
	edit := func(at time.Time, ps ...store.ModelPrice) {
		t.Helper()
		if err := e.Store.InTx(ctx, func(tx pgx.Tx) error { return store.ReplaceModelPrices(ctx, tx, org, ps, at) }); err != nil {
			t.Fatal(err)
		}
	}
	fallback := func(at time.Time, input int64) {
		t.Helper()
		var err error
		if input < 0 {
			_, err = store.DeleteFallbackPrice(ctx, e.Store.Pool, org, at)
		} else {
			err = store.SetFallbackPrice(ctx, e.Store.Pool, org, store.FallbackPrice{InputPerMillion: input, OutputPerMillion: input}, at)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	catalog, ok := pricecatalog.Lookup("gpt-4o")
	if !ok {
		t.Fatal("the catalog lacks gpt-4o")
	}
	// 1,000,000 input and 1,000,000 output tokens: input + output price.
	// gpt-4o: the organization's 2 + 3 from t0+1h, 20 + 30 from t0+2h, none from t0+3h
	// (the catalog's again). The fallback price: 5 + 5 from t0+1h, 50 + 50 from t0+2h,
	// none from t0+3h (the catalog's highest).
	edit(t0.Add(time.Hour), store.ModelPrice{Model: "gpt-4o", InputPerMillion: 2_000_000, OutputPerMillion: 3_000_000})
	fallback(t0.Add(time.Hour), 5_000_000)
	edit(t0.Add(2*time.Hour), store.ModelPrice{Model: "GPT-4o", InputPerMillion: 20_000_000, OutputPerMillion: 30_000_000},
		store.ModelPrice{Model: "gpt-4o", InputPerMillion: 20_000_000, OutputPerMillion: 30_000_000})
	fallback(t0.Add(2*time.Hour), 50_000_000)
	edit(t0.Add(3 * time.Hour))
	fallback(t0.Add(3*time.Hour), -1)
	high := pricecatalog.Highest()
	for _, tc := range []struct {
		name, model string
		finished    time.Duration // after t0; -1: not said
		want        int64
		source      string
	}{
		{"finished before the organization priced it", "gpt-4o", 30 * time.Minute, catalog.InputPerMillion + catalog.OutputPerMillion, "catalog"},
		{"finished at the first price", "gpt-4o", 90 * time.Minute, 5_000_000, "organization"},
		{"finished at the instant of the second", "gpt-4o", 2 * time.Hour, 50_000_000, "organization"},
		{"finished at the second, by key", "openai/gpt-4o-2024-08-06", 150 * time.Minute, 50_000_000, "organization"},
		{"finished after the prices were removed", "gpt-4o", 4 * time.Hour, catalog.InputPerMillion + catalog.OutputPerMillion, "catalog"},
		{"its end not said: the price when settled", "gpt-4o", -1, catalog.InputPerMillion + catalog.OutputPerMillion, "catalog"},
		{"unpriced, before any fallback price", "no-such-model", 30 * time.Minute, high.InputPerMillion + high.OutputPerMillion, "fallback"},
		{"unpriced, at the first fallback price", "no-such-model", 90 * time.Minute, 10_000_000, "fallback"},
		{"unpriced, at the second", "no-such-model", 150 * time.Minute, 100_000_000, "fallback"},
		{"unpriced, after the fallback price was reset", "no-such-model", 4 * time.Hour, high.InputPerMillion + high.OutputPerMillion, "fallback"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.Clock.Set(t0.Add(5 * time.Hour)) // every edit made before the settlement
			id := at.ReqID()
			start1(t, e, at.StartItem(id, org, m, t0, 0))
			it := &internalv1.SettleItem{RequestId: id, Model: tc.model, InputTokens: 1_000_000, OutputTokens: 1_000_000, Complete: true}
			if tc.finished >= 0 {
				it.FinishedAtUnixMs = t0.Add(tc.finished).UnixMilli()
			}
			r := settle1(t, e, it)
			if r.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED || r.CostMicroUsd != tc.want || r.PriceSource != tc.source {
				t.Fatalf("%v; want %d micro-USD at the %s price", r, tc.want, tc.source)
			}
			// The same report again is the same settlement, whatever edits came since.
			if again := settle1(t, e, it); again.Outcome != internalv1.SettleOutcome_SETTLE_OUTCOME_DUPLICATE {
				t.Fatalf("the same report again: %v", again)
			}
		})
	}
}
