package accounting

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/money"
	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

func i64(v int64) *int64 { return &v }

func TestCostOf(t *testing.T) {
	write := int64(3_750_000)
	p := Price{InputPerMillion: 3_000_000, OutputPerMillion: 15_000_000, CachedInputPerMillion: 300_000, CacheWritePerMillion: &write}
	org := PricedAt{Price: p, Source: PriceOrganization}
	whisper := PricedAt{Price: Price{InputPerMillion: 30_000_000, OutputPerMillion: 30_000_000, CachedInputPerMillion: 30_000_000, AudioPerMinute: 6_000}, Source: PriceCatalog}
	gptImage1 := PricedAt{Price: Price{ImageOutputPerMillion: 40_000_000, ImageTokensPerCall: 6_240}, Source: PriceCatalog} // images at gpt-image-1's output price
	// Anthropic's advisor tool: claude-haiku-4-5 executing (input 1 USD per million,
	// output 5, cache reads 0.10, writes 1.25), claude-opus-4-7 advising (5, 25, 0.50,
	// 6.25).
	opusWrite, haikuWrite := int64(6_250_000), int64(1_250_000)
	opus := &Price{InputPerMillion: 5_000_000, OutputPerMillion: 25_000_000, CachedInputPerMillion: 500_000, CacheWritePerMillion: &opusWrite}
	haikuPrice := Price{InputPerMillion: 1_000_000, OutputPerMillion: 5_000_000, CachedInputPerMillion: 100_000, CacheWritePerMillion: &haikuWrite,
		RegionalPremiumPercent: 10, Advisor: opus}
	haiku := PricedAt{Price: haikuPrice, Source: PriceCatalog}
	// The advisor's 30,000 input tokens (12,000 read from the cache, 8,000 written to it,
	// 10,000 uncached) and 1,500 output tokens: 50,000 + 6,000 + 50,000 + 37,500.
	advisor := Usage{AdvisorInputTokens: 30_000, AdvisorCachedInputTokens: 12_000, AdvisorCacheWriteTokens: 8_000, AdvisorOutputTokens: 1_500}
	const advisorCost = 143_500
	withAdvisor := func(u Usage) Usage {
		u.AdvisorInputTokens, u.AdvisorCachedInputTokens, u.AdvisorCacheWriteTokens, u.AdvisorOutputTokens =
			advisor.AdvisorInputTokens, advisor.AdvisorCachedInputTokens, advisor.AdvisorCacheWriteTokens, advisor.AdvisorOutputTokens
		return u
	}
	// gemini-2.5-flash (input 0.30 USD per million, output 2.50; a grounded prompt of
	// Google Search 35 USD per 1,000, of Google Maps 25).
	gemini25Flash := PricedAt{Price: Price{InputPerMillion: 300_000, OutputPerMillion: 2_500_000, WebSearch: 35_000, WebSearchOnce: true, MapsGrounding: 25_000},
		Source: PriceCatalog}
	// Containers: OpenAI's 1 GB at 0.09 USD an hour, Anthropic's at 0.05.
	openai1g := PricedAt{Price: Price{Container: pricecatalog.Container{Kind: "openai-1g", Provider: "openai", PerHour: 90_000}}, Source: PriceCatalog}
	anthropicContainer := pricecatalog.Container{Kind: "anthropic", Provider: "anthropic", PerHour: 50_000}
	// Amazon Bedrock's guardrails: content filters and denied topics 0.15 USD per 1,000
	// text units, sensitive-information filters and contextual grounding 0.10, automated
	// reasoning 0.17, an image 0.00075. 3 content-text units, 3 denied-topic units, 2
	// sensitive-information units and an image: (3*150,000 + 3*150,000 + 2*100,000) / 1,000
	// + 750 = 1,100 + 750 = 1,850 micro-USD. The detect-only guardrail checks
	// (InvokeGuardrailChecks): content filter 0.07 USD per 1,000 text units, prompt attack
	// 0.08, sensitive information 0.10. 2 content-filter units, 2 prompt-attack units and
	// 1 sensitive-information unit: (2*70,000 + 2*80,000 + 1*100,000) / 1,000 = 400.
	bedrockGuardrails := pricecatalog.GuardrailPrices{ContentText: 150_000, DeniedTopics: 150_000, SensitiveInformation: 100_000,
		ContextualGrounding: 100_000, AutomatedReasoning: 170_000, ContentImage: 750, ChecksContentFilter: 70_000, ChecksPromptAttack: 80_000,
		ChecksSensitiveInformation: 100_000}
	checked := pricecatalog.GuardrailUnits{ChecksContentFilter: 2, ChecksPromptAttack: 2, ChecksSensitiveInformation: 1}
	const checksCost = 400
	guarded := PricedAt{Price: Price{Guardrails: bedrockGuardrails}, Source: PriceCatalog}
	guardrailed := pricecatalog.GuardrailUnits{ContentText: 3, DeniedTopics: 3, SensitiveInformation: 2, ContentImages: 1}
	const guardrailCost = 1_850
	everyPolicy := pricecatalog.GuardrailUnits{ContentText: 1, DeniedTopics: 2, SensitiveInformation: 3, ContextualGrounding: 4, AutomatedReasoning: 5,
		ContentImages: 6}
	maxUnits := pricecatalog.GuardrailUnits{ContentText: math.MaxInt64, DeniedTopics: math.MaxInt64, SensitiveInformation: math.MaxInt64,
		ContextualGrounding: math.MaxInt64, AutomatedReasoning: math.MaxInt64, ContentImages: math.MaxInt64, ChecksContentFilter: math.MaxInt64,
		ChecksPromptAttack: math.MaxInt64, ChecksSensitiveInformation: math.MaxInt64}
	cases := []struct {
		name   string
		u      Usage
		p      PricedAt
		cost   int64
		source string
		basis  string
		capped bool
		err    error
	}{
		{"upstream cost wins over the catalog", Usage{InputTokens: 1000, UpstreamCost: i64(42)}, org, 42, SourceUpstream, BasisUpstreamCost, false, nil},
		{"upstream zero is a known cost", Usage{UpstreamCost: i64(0)}, PricedAt{}, 0, SourceUpstream, BasisUpstreamCost, false, nil},
		{"price: (in-cached-written)*in + cached*cached + written*write + out*out", Usage{InputTokens: 1000, CachedInputTokens: 400, CacheWriteTokens: 100, OutputTokens: 100}, org,
			(500*3_000_000 + 400*300_000 + 100*3_750_000 + 100*15_000_000) / 1_000_000, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"no cache-write price: writes priced as input", Usage{InputTokens: 1000, CacheWriteTokens: 1000},
			PricedAt{Price: Price{InputPerMillion: 2_000_000}, Source: PriceCatalog}, 2000, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"rounds a fraction up", Usage{InputTokens: 1}, PricedAt{Price: Price{InputPerMillion: 1}, Source: PriceCatalog}, 1, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"nothing counted is unknown", Usage{}, org, 0, SourceUnknown, BasisNone, false, nil},
		{"nothing counted, even estimated, is unknown", Usage{Estimated: true}, org, 0, SourceUnknown, BasisNone, false, nil},
		{"estimated tokens are priced", Usage{OutputTokens: 1_000_000, Estimated: true}, org, 15_000_000, SourceCatalogEstimate, BasisEstimate, false, nil},
		{"cached above input: the cached count is charged", Usage{InputTokens: 10, CachedInputTokens: 50}, PricedAt{Price: Price{InputPerMillion: 1_000_000, CachedInputPerMillion: 100_000}, Source: PriceCatalog}, 5, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"writes and reads above input: both charged, no uncached input", Usage{InputTokens: 10, CachedInputTokens: 10, CacheWriteTokens: 8}, org, (8*3_750_000 + 10*300_000) / 1_000_000, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"cache writes with no input count are charged", Usage{CacheWriteTokens: 5}, org, 19, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"the fallback price", Usage{InputTokens: 1_000_000}, PricedAt{Price: Price{InputPerMillion: 7}, Source: PriceFallback}, 7, SourceFallback, BasisReportedUsage, false, nil},
		{"the fallback price of nothing is unknown", Usage{}, PricedAt{Price: Price{InputPerMillion: 7}, Source: PriceFallback}, 0, SourceUnknown, BasisNone, false, nil},
		{"tokens without a price source", Usage{InputTokens: 5}, PricedAt{}, 0, "", "", false, errAny},
		{"negative tokens", Usage{InputTokens: -1}, org, 0, "", "", false, ErrBadUsage},
		{"negative upstream cost", Usage{UpstreamCost: i64(-1)}, org, 0, "", "", false, ErrBadUsage},
		{"upstream cost beyond the bound", Usage{UpstreamCost: i64(4503599627370496)}, org, 0, "", "", false, ErrBadUsage},
		{"huge products are capped", Usage{InputTokens: math.MaxInt64, OutputTokens: math.MaxInt64}, PricedAt{Price: Price{InputPerMillion: math.MaxInt64, OutputPerMillion: math.MaxInt64}, Source: PriceCatalog},
			money.MaxAllowanceMicroUSD, SourceCatalogEstimate, BasisReportedUsage, true, nil},
		{"above the allowance bound is capped", Usage{OutputTokens: 1 << 40}, PricedAt{Price: Price{OutputPerMillion: 1 << 40}, Source: PriceCatalog},
			money.MaxAllowanceMicroUSD, SourceCatalogEstimate, BasisReportedUsage, true, nil},
		{"large but representable", Usage{OutputTokens: 1 << 40}, PricedAt{Price: Price{OutputPerMillion: 1 << 20}, Source: PriceCatalog}, (1<<60)/1_000_000 + 1, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		// Anthropic's one-hour cache writes cost twice the input price (the five-minute
		// ones the cache-write price); never more of them than the writes.
		{"one-hour cache writes at twice the input price", Usage{InputTokens: 1000, CacheWriteTokens: 600, CacheWrite1hTokens: 400, OutputTokens: 10}, org,
			(400*3_000_000 + 200*3_750_000 + 400*6_000_000 + 10*15_000_000) / 1_000_000, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"one-hour writes above the writes count as the writes", Usage{InputTokens: 100, CacheWriteTokens: 100, CacheWrite1hTokens: 900}, org,
			100 * 6, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"one-hour writes with a cache-write price above twice the input", Usage{CacheWriteTokens: 10, CacheWrite1hTokens: 10},
			PricedAt{Price: Price{InputPerMillion: 1_000_000, CacheWritePerMillion: i64(5_000_000)}, Source: PriceOrganization}, 50, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"negative one-hour writes", Usage{InputTokens: 1, CacheWrite1hTokens: -1}, org, 0, "", "", false, ErrBadUsage},
		// A priority tier doubles the priced tokens (rounded up first), never an upstream cost.
		{"priority tier: twice the price", Usage{InputTokens: 1000, CachedInputTokens: 400, CacheWriteTokens: 100, OutputTokens: 100, Tier: pricecatalog.Fast}, org,
			2 * ((500*3_000_000 + 400*300_000 + 100*3_750_000 + 100*15_000_000) / 1_000_000), SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"priority tier, fraction rounded up before doubling", Usage{InputTokens: 1, Tier: pricecatalog.Fast}, PricedAt{Price: Price{InputPerMillion: 1}, Source: PriceCatalog}, 2, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		// A model's own tier percent (gpt-5.5's fast tier: 2.5 times; gpt-4.1's: 1.75
		// times, rounded up), the ultrafast default (6 times) and a model's own.
		{"fast tier at the price's own percent", Usage{InputTokens: 1_000_000, OutputTokens: 1_000_000, Tier: pricecatalog.Fast},
			PricedAt{Price: Price{InputPerMillion: 5_000_000, OutputPerMillion: 30_000_000, TierPercents: pricecatalog.TierPercents{FastPercent: 250, UltrafastPercent: 900}}, Source: PriceCatalog},
			87_500_000, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"fast tier at 175%, rounded up", Usage{InputTokens: 3, Tier: pricecatalog.Fast}, PricedAt{Price: Price{InputPerMillion: 1_000_000, TierPercents: pricecatalog.TierPercents{FastPercent: 175}}, Source: PriceCatalog},
			6, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"ultrafast tier: six times by default", Usage{InputTokens: 1000, OutputTokens: 100, Tier: pricecatalog.Ultrafast}, org,
			6 * ((1000*3_000_000 + 100*15_000_000) / 1_000_000), SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"ultrafast tier at the price's own percent", Usage{InputTokens: 1000, Tier: pricecatalog.Ultrafast},
			PricedAt{Price: Price{InputPerMillion: 1_000_000, TierPercents: pricecatalog.TierPercents{FastPercent: 250, UltrafastPercent: 900}}, Source: PriceCatalog},
			9000, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"priority tier, the upstream's cost as it is", Usage{InputTokens: 1000, UpstreamCost: i64(42), Tier: pricecatalog.Fast}, org, 42, SourceUpstream, BasisUpstreamCost, false, nil},
		{"priority tier: within the bound at the standard price", Usage{OutputTokens: 1 << 40}, PricedAt{Price: Price{OutputPerMillion: 1 << 31}, Source: PriceCatalog},
			(1<<71)/1_000_000 + 1, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"priority tier: twice that is past the bound, capped", Usage{OutputTokens: 1 << 40, Tier: pricecatalog.Fast}, PricedAt{Price: Price{OutputPerMillion: 1 << 31}, Source: PriceCatalog},
			money.MaxAllowanceMicroUSD, SourceCatalogEstimate, BasisReportedUsage, true, nil},
		{"priority tier: twice that is past int64, capped", Usage{OutputTokens: 1 << 40, Tier: pricecatalog.Fast}, PricedAt{Price: Price{OutputPerMillion: 1 << 42}, Source: PriceCatalog},
			money.MaxAllowanceMicroUSD, SourceCatalogEstimate, BasisReportedUsage, true, nil},
		// A regional endpoint's premium (10%: Claude Sonnet 4.5 on Bedrock or Vertex AI in a
		// region) on the tokens, rounded up, after the tier; none without a premium.
		{"regional endpoint: 10% more", Usage{InputTokens: 1000, OutputTokens: 100, Regional: true},
			PricedAt{Price: Price{InputPerMillion: 3_000_000, OutputPerMillion: 15_000_000, RegionalPremiumPercent: 10}, Source: PriceCatalog},
			(3_000 + 1_500) * 110 / 100, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"regional endpoint: the premium rounded up", Usage{InputTokens: 1, Regional: true},
			PricedAt{Price: Price{InputPerMillion: 1_000_000, RegionalPremiumPercent: 10}, Source: PriceCatalog}, 2, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"global endpoint: no premium", Usage{InputTokens: 1000, OutputTokens: 100},
			PricedAt{Price: Price{InputPerMillion: 3_000_000, OutputPerMillion: 15_000_000, RegionalPremiumPercent: 10}, Source: PriceCatalog},
			3_000 + 1_500, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"regional endpoint of a price without a premium", Usage{InputTokens: 1000, Regional: true}, org, 3_000, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"regional endpoint and priority tier", Usage{InputTokens: 1000, Regional: true, Tier: pricecatalog.Fast},
			PricedAt{Price: Price{InputPerMillion: 3_000_000, RegionalPremiumPercent: 10}, Source: PriceCatalog}, 6_600, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"web searches are not raised by the regional premium", Usage{InputTokens: 1000, WebSearchRequests: 1, Regional: true},
			PricedAt{Price: Price{InputPerMillion: 3_000_000, WebSearch: 10_000, RegionalPremiumPercent: 10}, Source: PriceCatalog}, 3_300 + 10_000, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"regional endpoint, the upstream's cost as it is", Usage{InputTokens: 1000, UpstreamCost: i64(42), Regional: true}, org, 42, SourceUpstream, BasisUpstreamCost, false, nil},
		{"regional premium past int64, capped", Usage{OutputTokens: 1 << 40, Regional: true},
			PricedAt{Price: Price{OutputPerMillion: 1 << 42, RegionalPremiumPercent: 10}, Source: PriceCatalog}, money.MaxAllowanceMicroUSD, SourceCatalogEstimate, BasisReportedUsage, true, nil},
		// Audio billed by duration (whisper-1: 6,000 micro-USD a minute), per minute on top
		// of any tokens, each rounded up.
		{"audio seconds at the minute's price", Usage{AudioInputMillis: 9_000}, whisper, 900, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"a fraction of a micro-USD of audio is rounded up", Usage{AudioInputMillis: 1}, whisper, 1, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"audio and tokens, each rounded up", Usage{AudioInputMillis: 9_001, OutputTokens: 1}, whisper, 901 + 30, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"audio at the fallback's price", Usage{AudioInputMillis: 60_000}, PricedAt{Price: Price{AudioPerMinute: 7}, Source: PriceFallback}, 7, SourceFallback, BasisReportedUsage, false, nil},
		{"audio with no minute price is free only at a price of 0", Usage{AudioInputMillis: 60_000}, org, 0, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"negative audio", Usage{AudioInputMillis: -1}, whisper, 0, "", "", false, ErrBadUsage},
		// Web searches apiece (Anthropic: 10,000 micro-USD each), on top of the tokens.
		{"web searches apiece", Usage{InputTokens: 1000, OutputTokens: 100, WebSearchRequests: 3}, PricedAt{Price: Price{InputPerMillion: 3_000_000, OutputPerMillion: 15_000_000, WebSearch: 10_000}, Source: PriceCatalog},
			3_000 + 1_500 + 30_000, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"web searches alone are charged", Usage{WebSearchRequests: 2}, PricedAt{Price: Price{WebSearch: 10_000}, Source: PriceCatalog}, 20_000, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"a grounded prompt is charged once, however many searches", Usage{WebSearchRequests: 4}, PricedAt{Price: Price{WebSearch: 35_000, WebSearchOnce: true}, Source: PriceCatalog}, 35_000, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"web searches are not doubled by a tier", Usage{InputTokens: 1_000_000, WebSearchRequests: 1, Tier: pricecatalog.Fast}, PricedAt{Price: Price{InputPerMillion: 1, WebSearch: 10_000}, Source: PriceCatalog},
			2 + 10_000, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"negative web searches", Usage{WebSearchRequests: -1}, whisper, 0, "", "", false, ErrBadUsage},
		{"web searches beyond int64 are capped", Usage{WebSearchRequests: math.MaxInt64}, PricedAt{Price: Price{WebSearch: 2}, Source: PriceCatalog},
			money.MaxAllowanceMicroUSD, SourceCatalogEstimate, BasisReportedUsage, true, nil},
		// File search calls apiece (OpenAI: 2,500 micro-USD each), on top of the tokens.
		{"file search calls apiece", Usage{InputTokens: 1000, OutputTokens: 100, FileSearchCalls: 3}, PricedAt{Price: Price{InputPerMillion: 3_000_000, OutputPerMillion: 15_000_000, FileSearch: 2_500}, Source: PriceCatalog},
			3_000 + 1_500 + 7_500, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"file search calls alone are charged", Usage{FileSearchCalls: 2}, PricedAt{Price: Price{FileSearch: 2_500}, Source: PriceCatalog}, 5_000, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"file search calls are not doubled by a tier", Usage{InputTokens: 1_000_000, FileSearchCalls: 1, Tier: pricecatalog.Fast}, PricedAt{Price: Price{InputPerMillion: 1, FileSearch: 2_500}, Source: PriceCatalog},
			2 + 2_500, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"web searches and file search calls, each apiece", Usage{WebSearchRequests: 2, FileSearchCalls: 3}, PricedAt{Price: Price{WebSearch: 10_000, WebSearchOnce: true, FileSearch: 2_500}, Source: PriceCatalog},
			10_000 + 7_500, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"negative file search calls", Usage{FileSearchCalls: -1}, whisper, 0, "", "", false, ErrBadUsage},
		{"file search calls beyond int64 are capped", Usage{FileSearchCalls: math.MaxInt64}, PricedAt{Price: Price{FileSearch: 2}, Source: PriceCatalog},
			money.MaxAllowanceMicroUSD, SourceCatalogEstimate, BasisReportedUsage, true, nil},
		{"file search calls on top of a cost near int64 are capped", Usage{InputTokens: 1, FileSearchCalls: 1}, PricedAt{Price: Price{InputPerMillion: math.MaxInt64, FileSearch: math.MaxInt64}, Source: PriceCatalog},
			money.MaxAllowanceMicroUSD, SourceCatalogEstimate, BasisReportedUsage, true, nil},
		// Gemini's grounding with Google Maps: a grounded prompt at the provider's price
		// (Google: 25,000 micro-USD), on top of the tokens and of any web searches, after
		// the tier and the regional premium; gemini-2.5-flash's 1,000 input and 200 output
		// tokens cost 300 + 500.
		{"a maps-grounded prompt on top of the tokens", Usage{InputTokens: 1000, OutputTokens: 200, MapsGroundedPrompts: 1}, gemini25Flash,
			300 + 500 + 25_000, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"a maps-grounded prompt alone is charged", Usage{MapsGroundedPrompts: 1}, gemini25Flash, 25_000, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"maps-grounded prompts apiece", Usage{MapsGroundedPrompts: 2}, gemini25Flash, 50_000, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"grounded with Google Search and Google Maps: both charged", Usage{InputTokens: 1000, OutputTokens: 200, WebSearchRequests: 3, MapsGroundedPrompts: 1},
			gemini25Flash, 300 + 500 + 35_000 + 25_000, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"maps grounding, web searches and file search calls, each at its price", Usage{WebSearchRequests: 1, FileSearchCalls: 2, MapsGroundedPrompts: 1},
			PricedAt{Price: Price{WebSearch: 10_000, FileSearch: 2_500, MapsGrounding: 25_000}, Source: PriceCatalog},
			10_000 + 5_000 + 25_000, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"maps grounding is not doubled by the fast tier", Usage{InputTokens: 1000, OutputTokens: 200, MapsGroundedPrompts: 1, Tier: pricecatalog.Fast}, gemini25Flash,
			2*(300+500) + 25_000, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"maps grounding is not raised by the regional premium", Usage{InputTokens: 1000, OutputTokens: 200, MapsGroundedPrompts: 1, Regional: true},
			PricedAt{Price: func() Price { p := gemini25Flash.Price; p.RegionalPremiumPercent = 10; return p }(), Source: PriceCatalog},
			(300+500)*110/100 + 25_000, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"maps grounding at the fallback's source", Usage{MapsGroundedPrompts: 1}, PricedAt{Price: Price{MapsGrounding: 25_000}, Source: PriceFallback},
			25_000, SourceFallback, BasisReportedUsage, false, nil},
		{"a maps-grounded prompt, estimated", Usage{MapsGroundedPrompts: 1, Estimated: true}, gemini25Flash, 25_000, SourceCatalogEstimate, BasisEstimate, false, nil},
		{"a maps-grounded prompt, the upstream's cost as it is", Usage{InputTokens: 1000, MapsGroundedPrompts: 1, UpstreamCost: i64(42)}, gemini25Flash,
			42, SourceUpstream, BasisUpstreamCost, false, nil},
		{"negative maps-grounded prompts", Usage{MapsGroundedPrompts: -1}, gemini25Flash, 0, "", "", false, ErrBadUsage},
		{"maps-grounded prompts beyond int64 are capped", Usage{MapsGroundedPrompts: math.MaxInt64}, PricedAt{Price: Price{MapsGrounding: 2}, Source: PriceCatalog},
			money.MaxAllowanceMicroUSD, SourceCatalogEstimate, BasisReportedUsage, true, nil},
		{"a maps-grounded prompt on top of a cost near int64 is capped", Usage{InputTokens: 1, MapsGroundedPrompts: 1},
			PricedAt{Price: Price{InputPerMillion: math.MaxInt64, MapsGrounding: math.MaxInt64}, Source: PriceCatalog},
			money.MaxAllowanceMicroUSD, SourceCatalogEstimate, BasisReportedUsage, true, nil},
		// Containers, billed by the minute they live: OpenAI's 1 GB one at 0.09 USD an hour
		// (25 minutes: 37,500 micro-USD), Anthropic's at 0.05 (5 minutes: 4,166.67, rounded
		// up), on top of the tokens, after the tier and the regional premium.
		{"container minutes at the container's price per hour", Usage{ContainerMinutes: 25}, openai1g,
			37_500, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"container minutes are rounded up", Usage{ContainerMinutes: 5}, PricedAt{Price: Price{Container: anthropicContainer}, Source: PriceCatalog},
			4_167, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"container minutes on top of the tokens", Usage{InputTokens: 1000, OutputTokens: 200, ContainerMinutes: 25},
			PricedAt{Price: Price{InputPerMillion: 300_000, OutputPerMillion: 2_500_000, Container: openai1g.Price.Container}, Source: PriceOrganization},
			300 + 500 + 37_500, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"container minutes are not doubled by the fast tier", Usage{InputTokens: 1000, OutputTokens: 200, ContainerMinutes: 25, Tier: pricecatalog.Fast},
			PricedAt{Price: Price{InputPerMillion: 300_000, OutputPerMillion: 2_500_000, Container: openai1g.Price.Container}, Source: PriceCatalog},
			2*(300+500) + 37_500, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"container minutes are not raised by the regional premium", Usage{InputTokens: 1000, OutputTokens: 200, ContainerMinutes: 5, Regional: true},
			PricedAt{Price: Price{InputPerMillion: 3_000_000, OutputPerMillion: 15_000_000, RegionalPremiumPercent: 10, Container: anthropicContainer},
				Source: PriceCatalog}, (3_000+3_000)*110/100 + 4_167, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"container minutes with searches and pages, each at its price", Usage{WebSearchRequests: 1, OCRPages: 2, ContainerMinutes: 25},
			PricedAt{Price: Price{WebSearch: 10_000, PerPage: 4_000, Container: openai1g.Price.Container}, Source: PriceCatalog},
			10_000 + 8_000 + 37_500, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"container minutes at the fallback's source", Usage{ContainerMinutes: 25}, PricedAt{Price: openai1g.Price, Source: PriceFallback},
			37_500, SourceFallback, BasisReportedUsage, false, nil},
		{"container minutes, estimated", Usage{ContainerMinutes: 25, Estimated: true}, openai1g, 37_500, SourceCatalogEstimate, BasisEstimate, false, nil},
		{"container minutes, the upstream's cost as it is", Usage{InputTokens: 1000, ContainerMinutes: 25, UpstreamCost: i64(42)}, openai1g,
			42, SourceUpstream, BasisUpstreamCost, false, nil},
		{"negative container minutes", Usage{ContainerMinutes: -1}, openai1g, 0, "", "", false, ErrBadUsage},
		{"a negative container price", Usage{ContainerMinutes: 1}, PricedAt{Price: Price{Container: pricecatalog.Container{PerHour: -60}}, Source: PriceCatalog},
			0, "", "", false, ErrBadUsage},
		{"container minutes beyond the allowance bound are capped", Usage{ContainerMinutes: math.MaxInt64},
			PricedAt{Price: Price{Container: pricecatalog.Container{PerHour: math.MaxInt64}}, Source: PriceCatalog},
			money.MaxAllowanceMicroUSD, SourceCatalogEstimate, BasisReportedUsage, true, nil},
		{"container minutes on top of a cost near int64 are capped", Usage{InputTokens: 1_000_000, ContainerMinutes: 60},
			PricedAt{Price: Price{InputPerMillion: math.MaxInt64, Container: pricecatalog.Container{PerHour: 1_000_000}}, Source: PriceCatalog},
			money.MaxAllowanceMicroUSD, SourceCatalogEstimate, BasisReportedUsage, true, nil},
		// Amazon Bedrock's guardrails: each policy's text units at its price per 1,000,
		// images apiece, rounded up once for all of them, on top of the tokens whatever
		// priced them, after the tier and the regional premium.
		{"guardrail units at their policies' prices", Usage{GuardrailUnits: guardrailed}, guarded,
			guardrailCost, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"every policy's units at its price", Usage{GuardrailUnits: everyPolicy}, guarded,
			150 + 300 + 300 + 400 + 850 + 4_500, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"guardrail units are rounded up once, for all of them", Usage{GuardrailUnits: pricecatalog.GuardrailUnits{ContentText: 1, DeniedTopics: 1,
			SensitiveInformation: 1}}, PricedAt{Price: Price{Guardrails: pricecatalog.GuardrailPrices{ContentText: 1, DeniedTopics: 1,
			SensitiveInformation: 1}}, Source: PriceCatalog}, 1, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"a fraction of a text unit's price is rounded up", Usage{GuardrailUnits: pricecatalog.GuardrailUnits{ContentText: 1_001}}, guarded,
			150_150, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"guardrail units on top of the tokens at the organization's price", Usage{InputTokens: 1000, OutputTokens: 200, GuardrailUnits: guardrailed},
			PricedAt{Price: Price{InputPerMillion: 300_000, OutputPerMillion: 2_500_000, Guardrails: bedrockGuardrails}, Source: PriceOrganization},
			300 + 500 + guardrailCost, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"guardrail units are not doubled by the fast tier", Usage{InputTokens: 1000, OutputTokens: 200, GuardrailUnits: guardrailed, Tier: pricecatalog.Fast},
			PricedAt{Price: Price{InputPerMillion: 300_000, OutputPerMillion: 2_500_000, Guardrails: bedrockGuardrails}, Source: PriceCatalog},
			2*(300+500) + guardrailCost, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"guardrail units are not raised by the regional premium", Usage{InputTokens: 1000, OutputTokens: 200, GuardrailUnits: guardrailed, Regional: true},
			PricedAt{Price: Price{InputPerMillion: 3_000_000, OutputPerMillion: 15_000_000, RegionalPremiumPercent: 10, Guardrails: bedrockGuardrails},
				Source: PriceCatalog}, (3_000+3_000)*110/100 + guardrailCost, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"guardrail units with searches and container minutes, each at its price", Usage{WebSearchRequests: 1, ContainerMinutes: 25, GuardrailUnits: guardrailed},
			PricedAt{Price: Price{WebSearch: 10_000, Container: openai1g.Price.Container, Guardrails: bedrockGuardrails}, Source: PriceCatalog},
			10_000 + 37_500 + guardrailCost, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"a request its guardrail blocked, estimated: its units alone", Usage{GuardrailUnits: guardrailed, Estimated: true}, guarded,
			guardrailCost, SourceCatalogEstimate, BasisEstimate, false, nil},
		{"guardrail units at the fallback's source", Usage{GuardrailUnits: guardrailed}, PricedAt{Price: Price{Guardrails: bedrockGuardrails}, Source: PriceFallback},
			guardrailCost, SourceFallback, BasisReportedUsage, false, nil},
		{"guardrail units without prices are free", Usage{InputTokens: 1000, GuardrailUnits: guardrailed},
			PricedAt{Price: Price{InputPerMillion: 1_000_000}, Source: PriceCatalog}, 1_000, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"guardrail units, the upstream's cost as it is", Usage{InputTokens: 1000, GuardrailUnits: guardrailed, UpstreamCost: i64(42)}, guarded,
			42, SourceUpstream, BasisUpstreamCost, false, nil},
		{"negative guardrail units", Usage{GuardrailUnits: pricecatalog.GuardrailUnits{ContentText: 3, DeniedTopics: -1}}, guarded, 0, "", "", false, ErrBadUsage},
		{"negative guardrail images with an upstream cost", Usage{GuardrailUnits: pricecatalog.GuardrailUnits{ContentImages: -1}, UpstreamCost: i64(42)},
			guarded, 0, "", "", false, ErrBadUsage},
		{"a negative guardrail price", Usage{GuardrailUnits: guardrailed},
			PricedAt{Price: Price{Guardrails: pricecatalog.GuardrailPrices{ContentText: 150_000, ContentImage: -750}}, Source: PriceCatalog},
			0, "", "", false, ErrBadUsage},
		{"guardrail units beyond the allowance bound are capped", Usage{GuardrailUnits: maxUnits},
			PricedAt{Price: Price{Guardrails: pricecatalog.GuardrailPrices{ContentText: math.MaxInt64, DeniedTopics: math.MaxInt64,
				SensitiveInformation: math.MaxInt64, ContextualGrounding: math.MaxInt64, AutomatedReasoning: math.MaxInt64, ContentImage: math.MaxInt64,
				ChecksContentFilter: math.MaxInt64, ChecksPromptAttack: math.MaxInt64, ChecksSensitiveInformation: math.MaxInt64}},
				Source: PriceCatalog}, money.MaxAllowanceMicroUSD, SourceCatalogEstimate, BasisReportedUsage, true, nil},
		{"every guardrail count at the bound, exactly", Usage{GuardrailUnits: pricecatalog.GuardrailUnits{ContentText: MaxTokens, DeniedTopics: MaxTokens,
			SensitiveInformation: MaxTokens, ContextualGrounding: MaxTokens, AutomatedReasoning: MaxTokens, ContentImages: MaxTokens,
			ChecksContentFilter: MaxTokens, ChecksPromptAttack: MaxTokens, ChecksSensitiveInformation: MaxTokens}}, guarded,
			MaxTokens * (150 + 150 + 100 + 100 + 170 + 750 + 70 + 80 + 100), SourceCatalogEstimate, BasisReportedUsage, false, nil},
		// The detect-only guardrail checks (InvokeGuardrailChecks): each check's text units at
		// its own price per 1,000, rounded up once with the guardrails' policies' units.
		{"the guardrail checks' units at their own prices", Usage{GuardrailUnits: checked}, guarded,
			checksCost, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"each check at its own price, not a policy's", Usage{GuardrailUnits: pricecatalog.GuardrailUnits{ChecksPromptAttack: 1_000}}, guarded,
			80_000, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"the checks' units beside a guardrail's", Usage{GuardrailUnits: guardrailed.Add(checked)}, guarded,
			guardrailCost + checksCost, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		// 8 text units at 300 per 1,000 each: 2,400 / 1,000 = 2.4, rounded up once to 3,
		// and the image's 7: 10 (each rounded up apart: 8 + 7 = 15; rounded down: 9).
		{"the checks' units and the six others are rounded up once", Usage{GuardrailUnits: pricecatalog.GuardrailUnits{ContentText: 1, DeniedTopics: 1,
			SensitiveInformation: 1, ContextualGrounding: 1, AutomatedReasoning: 1, ContentImages: 1, ChecksContentFilter: 1, ChecksPromptAttack: 1,
			ChecksSensitiveInformation: 1}}, PricedAt{Price: Price{Guardrails: pricecatalog.GuardrailPrices{ContentText: 300, DeniedTopics: 300,
			SensitiveInformation: 300, ContextualGrounding: 300, AutomatedReasoning: 300, ContentImage: 7, ChecksContentFilter: 300,
			ChecksPromptAttack: 300, ChecksSensitiveInformation: 300}}, Source: PriceCatalog}, 3 + 7, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"the checks' units, estimated", Usage{GuardrailUnits: checked, Estimated: true}, guarded,
			checksCost, SourceCatalogEstimate, BasisEstimate, false, nil},
		{"the checks' units are not doubled by the fast tier", Usage{InputTokens: 1000, GuardrailUnits: checked, Tier: pricecatalog.Fast},
			PricedAt{Price: Price{InputPerMillion: 300_000, Guardrails: bedrockGuardrails}, Source: PriceCatalog},
			2*300 + checksCost, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"the checks' units, the upstream's cost as it is", Usage{GuardrailUnits: checked, UpstreamCost: i64(42)}, guarded,
			42, SourceUpstream, BasisUpstreamCost, false, nil},
		{"negative content-filter checks' units", Usage{GuardrailUnits: pricecatalog.GuardrailUnits{ContentText: 3, ChecksContentFilter: -1}}, guarded,
			0, "", "", false, ErrBadUsage},
		{"negative prompt-attack checks' units", Usage{GuardrailUnits: pricecatalog.GuardrailUnits{ChecksPromptAttack: -1}}, guarded,
			0, "", "", false, ErrBadUsage},
		{"negative sensitive-information checks' units with an upstream cost", Usage{GuardrailUnits: pricecatalog.GuardrailUnits{
			ChecksSensitiveInformation: -1}, UpstreamCost: i64(42)}, guarded, 0, "", "", false, ErrBadUsage},
		{"a negative check's price", Usage{GuardrailUnits: checked},
			PricedAt{Price: Price{Guardrails: pricecatalog.GuardrailPrices{ChecksContentFilter: 70_000, ChecksPromptAttack: -80_000}}, Source: PriceCatalog},
			0, "", "", false, ErrBadUsage},
		{"a check's units beyond the allowance bound are capped", Usage{GuardrailUnits: pricecatalog.GuardrailUnits{ChecksSensitiveInformation: math.MaxInt64}},
			guarded, money.MaxAllowanceMicroUSD, SourceCatalogEstimate, BasisReportedUsage, true, nil},
		{"an image at a price near int64 is capped, not free", Usage{GuardrailUnits: pricecatalog.GuardrailUnits{ContentImages: 1}},
			PricedAt{Price: Price{Guardrails: pricecatalog.GuardrailPrices{ContentImage: math.MaxInt64}}, Source: PriceCatalog},
			money.MaxAllowanceMicroUSD, SourceCatalogEstimate, BasisReportedUsage, true, nil},
		{"an image above the catalog's price bound, exactly", Usage{GuardrailUnits: pricecatalog.GuardrailUnits{ContentImages: 1}},
			PricedAt{Price: Price{Guardrails: pricecatalog.GuardrailPrices{ContentImage: money.MaxAllowanceMicroUSD/1000 + 1}}, Source: PriceCatalog},
			money.MaxAllowanceMicroUSD/1000 + 1, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"guardrail units on top of a cost near int64 are capped", Usage{InputTokens: 1_000_000, GuardrailUnits: guardrailed},
			PricedAt{Price: Price{InputPerMillion: math.MaxInt64, Guardrails: bedrockGuardrails}, Source: PriceCatalog},
			money.MaxAllowanceMicroUSD, SourceCatalogEstimate, BasisReportedUsage, true, nil},
		// OpenAI's image generation tool: the images' output tokens at the image model's
		// output price (gpt-image-1: 40 USD per million), on top of the tokens, rounded up
		// on their own.
		{"image generation calls at the image model's output price", Usage{InputTokens: 1_000_000, OutputTokens: 100, ImageGenerationCalls: 2, ImageOutputTokens: 12_480},
			PricedAt{Price: Price{InputPerMillion: 150_000, OutputPerMillion: 600_000, ImageOutputPerMillion: 40_000_000}, Source: PriceCatalog},
			150_000 + 60 + 499_200, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"the image tokens as reported, whatever the calls", Usage{ImageGenerationCalls: 1, ImageOutputTokens: 272}, gptImage1, 10_880, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"image tokens are rounded up on their own", Usage{InputTokens: 1, ImageGenerationCalls: 1, ImageOutputTokens: 1},
			PricedAt{Price: Price{InputPerMillion: 1, ImageOutputPerMillion: 1}, Source: PriceCatalog}, 1 + 1, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"image calls without tokens: the dearest image each", Usage{ImageGenerationCalls: 2}, gptImage1, 2 * 249_600, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"image calls without tokens at gpt-image-1-mini's price", Usage{ImageGenerationCalls: 1}, PricedAt{Price: Price{ImageOutputPerMillion: 8_000_000, ImageTokensPerCall: 6_240}, Source: PriceCatalog},
			49_920, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"image tokens without calls are charged", Usage{ImageOutputTokens: 4_160}, gptImage1, 166_400, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"image tokens at the fallback's source", Usage{ImageGenerationCalls: 1, ImageOutputTokens: 6_240}, PricedAt{Price: Price{ImageOutputPerMillion: 40_000_000}, Source: PriceFallback},
			249_600, SourceFallback, BasisReportedUsage, false, nil},
		{"image tokens are not doubled by a tier", Usage{InputTokens: 1_000_000, ImageGenerationCalls: 1, ImageOutputTokens: 6_240, Tier: pricecatalog.Fast},
			PricedAt{Price: Price{InputPerMillion: 1, ImageOutputPerMillion: 40_000_000}, Source: PriceCatalog}, 2 + 249_600, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"image tokens are not raised by the ultrafast tier", Usage{InputTokens: 1_000_000, ImageGenerationCalls: 1, Tier: pricecatalog.Ultrafast},
			PricedAt{Price: Price{InputPerMillion: 1, ImageOutputPerMillion: 40_000_000, ImageTokensPerCall: 6_240}, Source: PriceCatalog}, 6 + 249_600, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"image tokens are not raised by the regional premium", Usage{InputTokens: 1000, ImageGenerationCalls: 1, ImageOutputTokens: 6_240, Regional: true},
			PricedAt{Price: Price{InputPerMillion: 3_000_000, ImageOutputPerMillion: 40_000_000, RegionalPremiumPercent: 10}, Source: PriceCatalog},
			3_300 + 249_600, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"image calls with file search calls and web searches, each at its price", Usage{WebSearchRequests: 1, FileSearchCalls: 2, ImageGenerationCalls: 1, ImageOutputTokens: 1_056},
			PricedAt{Price: Price{WebSearch: 10_000, FileSearch: 2_500, ImageOutputPerMillion: 40_000_000}, Source: PriceCatalog},
			10_000 + 5_000 + 42_240, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"image calls, estimated", Usage{ImageGenerationCalls: 1, ImageOutputTokens: 6_240, Estimated: true}, gptImage1, 249_600, SourceCatalogEstimate, BasisEstimate, false, nil},
		{"image calls, the upstream's cost as it is", Usage{ImageGenerationCalls: 3, UpstreamCost: i64(42)}, gptImage1, 42, SourceUpstream, BasisUpstreamCost, false, nil},
		{"negative image generation calls", Usage{ImageGenerationCalls: -1}, gptImage1, 0, "", "", false, ErrBadUsage},
		{"negative image output tokens", Usage{ImageGenerationCalls: 1, ImageOutputTokens: -1}, gptImage1, 0, "", "", false, ErrBadUsage},
		// The image model's input (tool_usage.image_gen): at its input and cached input
		// prices (gpt-image-1's catalog entry: 10 and 2.5 USD per million), as a response
		// of its own, rounded up on its own, after the tier and the regional premium.
		{"the image model's input at its input prices", Usage{InputTokens: 1_000, ImageGenerationCalls: 1, ImageOutputTokens: 6_240,
			ImageToolInputTokens: 1_100, ImageToolCachedInputTokens: 100},
			PricedAt{Price: Price{InputPerMillion: 150_000, ImageOutputPerMillion: 40_000_000, ImageToolInputPerMillion: 10_000_000,
				ImageToolCachedInputPerMillion: 2_500_000}, Source: PriceCatalog},
			150 + 249_600 + 10_000 + 250, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"the image model's input is rounded up on its own", Usage{InputTokens: 1, ImageToolInputTokens: 1},
			PricedAt{Price: Price{InputPerMillion: 1, ImageToolInputPerMillion: 1}, Source: PriceCatalog}, 1 + 1, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"the image model's input alone is charged", Usage{ImageToolInputTokens: 2_000},
			PricedAt{Price: Price{ImageToolInputPerMillion: 10_000_000}, Source: PriceCatalog}, 20_000, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"the image model's input is not doubled by a tier", Usage{InputTokens: 1_000_000, ImageToolInputTokens: 1_000, Tier: pricecatalog.Fast},
			PricedAt{Price: Price{InputPerMillion: 1, ImageToolInputPerMillion: 10_000_000}, Source: PriceCatalog}, 2 + 10_000, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"the image model's input is not raised by the regional premium", Usage{InputTokens: 1000, ImageToolInputTokens: 1_000, Regional: true},
			PricedAt{Price: Price{InputPerMillion: 3_000_000, ImageToolInputPerMillion: 10_000_000, RegionalPremiumPercent: 10}, Source: PriceCatalog},
			3_300 + 10_000, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"the image model's cache reads beyond its input are charged as reported", Usage{ImageToolInputTokens: 100, ImageToolCachedInputTokens: 400},
			PricedAt{Price: Price{ImageToolInputPerMillion: 10_000_000, ImageToolCachedInputPerMillion: 2_500_000}, Source: PriceCatalog},
			1_000, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"the image model's input near int64 is capped, not free", Usage{ImageToolInputTokens: 1_000_000},
			PricedAt{Price: Price{ImageToolInputPerMillion: math.MaxInt64}, Source: PriceCatalog}, money.MaxAllowanceMicroUSD, SourceCatalogEstimate, BasisReportedUsage, true, nil},
		{"negative image tool input tokens", Usage{ImageToolInputTokens: -1}, gptImage1, 0, "", "", false, ErrBadUsage},
		{"negative image tool cached input tokens", Usage{ImageToolInputTokens: 1, ImageToolCachedInputTokens: -1}, gptImage1, 0, "", "", false, ErrBadUsage},
		{"image calls beyond int64 are capped", Usage{ImageGenerationCalls: math.MaxInt64}, gptImage1,
			money.MaxAllowanceMicroUSD, SourceCatalogEstimate, BasisReportedUsage, true, nil},
		{"image tokens beyond int64 are capped", Usage{ImageGenerationCalls: 1, ImageOutputTokens: math.MaxInt64}, PricedAt{Price: Price{ImageOutputPerMillion: math.MaxInt64}, Source: PriceCatalog},
			money.MaxAllowanceMicroUSD, SourceCatalogEstimate, BasisReportedUsage, true, nil},
		{"image tokens on top of a cost near int64 are capped", Usage{InputTokens: 1, ImageGenerationCalls: 1, ImageOutputTokens: 1_000_000},
			PricedAt{Price: Price{InputPerMillion: math.MaxInt64, ImageOutputPerMillion: math.MaxInt64}, Source: PriceCatalog},
			money.MaxAllowanceMicroUSD, SourceCatalogEstimate, BasisReportedUsage, true, nil},
		{"audio beyond int64 is capped", Usage{AudioInputMillis: math.MaxInt64}, PricedAt{Price: Price{AudioPerMinute: math.MaxInt64}, Source: PriceCatalog},
			money.MaxAllowanceMicroUSD, SourceCatalogEstimate, BasisReportedUsage, true, nil},
		// Anthropic's advisor tool: the advisor's sub-inferences priced as a response of
		// the advisor model, on top of the executor's tokens, rounded up on their own.
		{"the advisor at its model's prices, the executor at its own", withAdvisor(Usage{InputTokens: 10_000, OutputTokens: 2_000}), haiku,
			10_000 + 10_000 + advisorCost, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"the advisor alone is usage", advisor, haiku, advisorCost, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"the advisor, estimated", withAdvisor(Usage{Estimated: true}), haiku, advisorCost, SourceCatalogEstimate, BasisEstimate, false, nil},
		{"the advisor at the executor's price when its own is not known", withAdvisor(Usage{InputTokens: 10_000, OutputTokens: 2_000}),
			PricedAt{Price: Price{InputPerMillion: 1_000_000, OutputPerMillion: 5_000_000, CachedInputPerMillion: 100_000, CacheWritePerMillion: &haikuWrite}, Source: PriceCatalog},
			20_000 + 10_000 + 1_200 + 10_000 + 7_500, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		// An advisor tool whose caching's ttl is "1h" writes for an hour: 5,000 of the 8,000
		// writes at twice Opus's input (10 USD per million), 50,000 where they were 31,250.
		{"the advisor's one-hour cache writes at its one-hour price", func() Usage { u := advisor; u.AdvisorCacheWrite1hTokens = 5_000; return u }(), haiku,
			advisorCost - 5_000*6_250_000/1_000_000 + 5_000*10_000_000/1_000_000, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"the advisor's cache writes without a cache-write price: at its input price", Usage{AdvisorInputTokens: 1_000, AdvisorCacheWriteTokens: 1_000},
			PricedAt{Price: Price{Advisor: &Price{InputPerMillion: 2_000_000}}, Source: PriceCatalog}, 2_000, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"the advisor's cache reads and writes above its input: both charged, no uncached input",
			Usage{AdvisorInputTokens: 10, AdvisorCachedInputTokens: 10, AdvisorCacheWriteTokens: 8}, haiku,
			(10*500_000 + 8*6_250_000) / 1_000_000, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"the advisor is rounded up on its own", Usage{InputTokens: 1, AdvisorOutputTokens: 1},
			PricedAt{Price: Price{InputPerMillion: 1, Advisor: &Price{OutputPerMillion: 1}}, Source: PriceCatalog}, 1 + 1, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"the advisor is not raised by the fast tier", withAdvisor(Usage{InputTokens: 10_000, OutputTokens: 2_000, Tier: pricecatalog.Fast}), haiku,
			2*20_000 + advisorCost, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"the advisor is not raised by the executor's tier percent", withAdvisor(Usage{InputTokens: 10_000, OutputTokens: 2_000, Tier: pricecatalog.Fast}),
			PricedAt{Price: func() Price { p := haikuPrice; p.FastPercent = 600; return p }(), Source: PriceCatalog},
			6*20_000 + advisorCost, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"the advisor is not raised by the regional premium", withAdvisor(Usage{InputTokens: 10_000, OutputTokens: 2_000, Regional: true}), haiku,
			22_000 + advisorCost, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"the advisor at the fallback's source", advisor, PricedAt{Price: Price{Advisor: opus}, Source: PriceFallback},
			advisorCost, SourceFallback, BasisReportedUsage, false, nil},
		{"the advisor with images and file search calls, each at its price", withAdvisor(Usage{FileSearchCalls: 2, ImageGenerationCalls: 1, ImageOutputTokens: 1_056}),
			PricedAt{Price: Price{FileSearch: 2_500, ImageOutputPerMillion: 40_000_000, Advisor: opus}, Source: PriceCatalog},
			5_000 + 42_240 + advisorCost, SourceCatalogEstimate, BasisReportedUsage, false, nil},
		{"the advisor, the upstream's cost as it is", withAdvisor(Usage{UpstreamCost: i64(42)}), haiku, 42, SourceUpstream, BasisUpstreamCost, false, nil},
		{"negative advisor input", Usage{AdvisorInputTokens: -1}, haiku, 0, "", "", false, ErrBadUsage},
		{"negative advisor output", Usage{InputTokens: 1, AdvisorOutputTokens: -1}, haiku, 0, "", "", false, ErrBadUsage},
		{"negative advisor cache reads", Usage{AdvisorInputTokens: 1, AdvisorCachedInputTokens: -1}, haiku, 0, "", "", false, ErrBadUsage},
		{"negative advisor cache writes", Usage{AdvisorInputTokens: 1, AdvisorCacheWriteTokens: -1}, haiku, 0, "", "", false, ErrBadUsage},
		{"negative advisor counts with an upstream cost", Usage{AdvisorOutputTokens: -1, UpstreamCost: i64(42)}, haiku, 0, "", "", false, ErrBadUsage},
		{"advisor tokens beyond int64 are capped", Usage{AdvisorInputTokens: math.MaxInt64, AdvisorOutputTokens: math.MaxInt64},
			PricedAt{Price: Price{Advisor: &Price{InputPerMillion: math.MaxInt64, OutputPerMillion: math.MaxInt64}}, Source: PriceCatalog},
			money.MaxAllowanceMicroUSD, SourceCatalogEstimate, BasisReportedUsage, true, nil},
		{"advisor tokens on top of a cost near int64 are capped", Usage{InputTokens: 1, AdvisorOutputTokens: 1_000_000},
			PricedAt{Price: Price{InputPerMillion: math.MaxInt64, Advisor: &Price{OutputPerMillion: math.MaxInt64}}, Source: PriceCatalog},
			money.MaxAllowanceMicroUSD, SourceCatalogEstimate, BasisReportedUsage, true, nil},
		{"advisor tokens above the allowance bound are capped", Usage{AdvisorOutputTokens: MaxTokens},
			PricedAt{Price: Price{Advisor: &Price{OutputPerMillion: 1 << 40}}, Source: PriceCatalog},
			money.MaxAllowanceMicroUSD, SourceCatalogEstimate, BasisReportedUsage, true, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := CostOf(c.u, c.p)
			if c.err == errAny {
				if err == nil {
					t.Fatalf("CostOf = %+v, want an error", got)
				}
				return
			}
			if !errors.Is(err, c.err) || got.MicroUSD != c.cost || got.Source != c.source || got.Basis != c.basis || got.Capped != c.capped {
				t.Fatalf("CostOf = %+v %v; want %d %q %q capped %v, %v", got, err, c.cost, c.source, c.basis, c.capped, c.err)
			}
			if wantPrice := c.source == SourceCatalogEstimate || c.source == SourceFallback; wantPrice != (got.PriceSource == c.p.Source && got.PriceSource != "") {
				t.Fatalf("price source %q", got.PriceSource)
			}
		})
	}
}

var errAny = errors.New("any error")

// The issue's contract: with no organization prices, gpt-4o-mini with 1,000,000 input and
// 1,000,000 output tokens costs exactly 750000 micro-USD.
func TestCatalogContract(t *testing.T) {
	e, ok := pricecatalog.Lookup("gpt-4o-mini-2024-07-18")
	if !ok {
		t.Fatal("gpt-4o-mini is not in the catalog")
	}
	c, err := CostOf(Usage{InputTokens: 1_000_000, OutputTokens: 1_000_000},
		PricedAt{Price: Price{InputPerMillion: e.InputPerMillion, OutputPerMillion: e.OutputPerMillion, CachedInputPerMillion: e.CachedInputPerMillion}, Source: PriceCatalog})
	if err != nil || c.MicroUSD != 750_000 {
		t.Fatalf("%+v %v", c, err)
	}
}

// The image generation tool's tokens: as reported, else the image model's dearest image a
// call (pricecatalog.DearestImageTokensOf; without a model, pricecatalog.DearestImageTokens),
// saturating, never a negative or overflowing product; ImageCost rounds up in 128 bits.
func TestImageTokens(t *testing.T) {
	if pricecatalog.DearestImageTokens != 23_719 {
		t.Fatalf("DearestImageTokens %d, want gpt-image-2's high-quality 2880x2880 image, 23,719", pricecatalog.DearestImageTokens)
	}
	for model, want := range map[string]int64{"gpt-image-1": 6_240, "gpt-image-1-mini": 6_240, "gpt-image-1.5-2025-12-16": 6_240,
		"gpt-image-2": 23_719, "gpt-image-9": 23_719, "": 23_719} {
		if got := pricecatalog.DearestImageTokensOf(model); got != want {
			t.Errorf("DearestImageTokensOf(%q) = %d, want %d", model, got, want)
		}
	}
	for _, c := range []struct {
		u       Usage
		perCall int64
		want    int64
	}{
		{Usage{}, 6_240, 0},
		{Usage{ImageGenerationCalls: 3}, 6_240, 3 * 6_240},
		{Usage{ImageGenerationCalls: 3}, 0, 3 * 23_719},
		{Usage{ImageGenerationCalls: 3, ImageOutputTokens: 1_056}, 6_240, 1_056},
		{Usage{ImageOutputTokens: 272}, 23_719, 272},
		{Usage{ImageGenerationCalls: MaxTokens}, 6_240, MaxTokens * 6_240},
		{Usage{ImageGenerationCalls: math.MaxInt64}, 6_240, math.MaxInt64},
	} {
		if got := c.u.ImageTokensAt(c.perCall); got != c.want {
			t.Errorf("%+v at %d a call: %d image tokens, want %d", c.u, c.perCall, got, c.want)
		}
	}
	for _, c := range []struct {
		tokens, price, want int64
		err                 error
	}{
		{6_240, 40_000_000, 249_600, nil},
		{6_240, 8_000_000, 49_920, nil},
		{1, 1, 1, nil},
		{0, 40_000_000, 0, nil},
		{MaxTokens * 6_240, money.MaxAllowanceMicroUSD, 0, ErrCostOverflow},
		{math.MaxInt64, math.MaxInt64, 0, ErrCostOverflow},
		{-1, 1, 0, ErrBadUsage},
		{1, -1, 0, ErrBadUsage},
	} {
		if got, err := ImageCost(c.tokens, c.price); got != c.want || !errors.Is(err, c.err) {
			t.Errorf("ImageCost(%d, %d) = %d, %v; want %d, %v", c.tokens, c.price, got, err, c.want, c.err)
		}
	}
	// Settlement's bounds keep the dearest reading of the calls within int64.
	if u, _ := Bound(Usage{ImageGenerationCalls: math.MaxInt64}); u.ImageTokensAt(0) != MaxTokens*pricecatalog.DearestImageTokens {
		t.Fatalf("bounded calls: %d tokens", u.ImageTokensAt(0))
	}
}

// Audio tokens priced apart (gpt-realtime's prices: text input 4 USD per million, audio
// input 32, cached input 0.40, text output 16, audio output 64): a reported split is
// charged each part at its price, an unknown one all of its class at the dearer price;
// the audio input falls on the uncached input first, cached input keeps its one price,
// and a price without audio prices ignores the counts.
func TestAudioTokenPrices(t *testing.T) {
	realtime := PricedAt{Price: Price{InputPerMillion: 4_000_000, AudioInputPerMillion: 32_000_000, CachedInputPerMillion: 400_000,
		OutputPerMillion: 16_000_000, AudioOutputPerMillion: 64_000_000}, Source: PriceCatalog}
	text := PricedAt{Price: Price{InputPerMillion: 3_000_000, OutputPerMillion: 15_000_000}, Source: PriceOrganization}
	cases := []struct {
		name   string
		u      Usage
		p      PricedAt
		cost   int64
		capped bool
		err    error
	}{
		{"known split: each part at its price", Usage{InputTokens: 1000, AudioInputTokens: i64(600), OutputTokens: 500, AudioOutputTokens: i64(300)}, realtime,
			600*32 + 400*4 + 300*64 + 200*16, false, nil}, // 44,200
		{"unknown split: the dearer price for all", Usage{InputTokens: 1000, OutputTokens: 500}, realtime, 1000*32 + 500*64, false, nil},
		{"an estimate without a split: the dearer price", Usage{OutputTokens: 1000, Estimated: true}, realtime, 1000 * 64, false, nil},
		{"input split known, output unknown", Usage{InputTokens: 1000, AudioInputTokens: i64(600), OutputTokens: 500}, realtime,
			600*32 + 400*4 + 500*64, false, nil},
		{"no audio reported: the text prices", Usage{InputTokens: 1000, AudioInputTokens: i64(0), OutputTokens: 500, AudioOutputTokens: i64(0)}, realtime,
			1000*4 + 500*16, false, nil},
		{"all audio", Usage{InputTokens: 1000, AudioInputTokens: i64(1000), OutputTokens: 500, AudioOutputTokens: i64(500)}, realtime,
			1000*32 + 500*64, false, nil},
		{"an audio count above its class counts as the class", Usage{InputTokens: 100, AudioInputTokens: i64(500), OutputTokens: 10, AudioOutputTokens: i64(50)}, realtime,
			100*32 + 10*64, false, nil},
		{"audio tokens without the class's tokens cost nothing", Usage{OutputTokens: 10, AudioInputTokens: i64(500)}, realtime, 10 * 64, false, nil},
		// 1,000 input tokens, 600 of them cached: the 500 audio tokens cover the 400
		// uncached ones first (at 32), the cached ones stay at 0.40 whatever they are.
		{"cached input with audio: the audio on the uncached input first", Usage{InputTokens: 1000, CachedInputTokens: 600, AudioInputTokens: i64(500)}, realtime,
			400*32 + 600*4/10, false, nil}, // 13,040
		{"cached input with less audio than the uncached input", Usage{InputTokens: 1000, CachedInputTokens: 600, AudioInputTokens: i64(100)}, realtime,
			100*32 + 300*4 + 600*4/10, false, nil},
		{"cached input without a split: uncached at the dearer, cached at its price", Usage{InputTokens: 1000, CachedInputTokens: 600}, realtime,
			400*32 + 600*4/10, false, nil},
		{"cache writes are not audio input", Usage{InputTokens: 1000, CacheWriteTokens: 400, AudioInputTokens: i64(1000)}, realtime,
			600*32 + 400*4, false, nil},
		{"a price without audio prices ignores the counts", Usage{InputTokens: 1000, AudioInputTokens: i64(1000), OutputTokens: 100, AudioOutputTokens: i64(100)}, text,
			3_000 + 1_500, false, nil},
		{"a price without audio prices, split unknown: its prices", Usage{InputTokens: 1000, OutputTokens: 100}, text, 3_000 + 1_500, false, nil},
		{"an audio price below the text price: the dearer when unknown", Usage{InputTokens: 1_000_000}, PricedAt{Price: Price{InputPerMillion: 5, AudioInputPerMillion: 2}, Source: PriceCatalog},
			5, false, nil},
		{"an audio price below the text price, split known", Usage{InputTokens: 1_000_000, AudioInputTokens: i64(1_000_000)}, PricedAt{Price: Price{InputPerMillion: 5, AudioInputPerMillion: 2}, Source: PriceCatalog},
			2, false, nil},
		// Parts of 0.3 + 0.2 + 0.3 + 0.2 micro-USD: 1 rounded once, 4 rounded each.
		{"rounded once, the parts together", Usage{InputTokens: 300_000, AudioInputTokens: i64(100_000), OutputTokens: 300_000, AudioOutputTokens: i64(100_000)},
			PricedAt{Price: Price{InputPerMillion: 1, AudioInputPerMillion: 3, OutputPerMillion: 1, AudioOutputPerMillion: 3}, Source: PriceCatalog}, 1, false, nil},
		{"priority tier: twice the split", Usage{InputTokens: 1000, AudioInputTokens: i64(600), OutputTokens: 500, AudioOutputTokens: i64(300), Tier: pricecatalog.Fast}, realtime,
			2 * (600*32 + 400*4 + 300*64 + 200*16), false, nil},
		{"negative audio input", Usage{InputTokens: 10, AudioInputTokens: i64(-1)}, realtime, 0, false, ErrBadUsage},
		{"negative audio output", Usage{OutputTokens: 10, AudioOutputTokens: i64(-1)}, realtime, 0, false, ErrBadUsage},
		{"negative audio input without audio prices", Usage{InputTokens: 10, AudioInputTokens: i64(-1)}, text, 0, false, ErrBadUsage},
		{"huge audio products are capped", Usage{InputTokens: math.MaxInt64, AudioInputTokens: i64(math.MaxInt64 / 2), OutputTokens: math.MaxInt64, AudioOutputTokens: i64(1)},
			PricedAt{Price: Price{InputPerMillion: math.MaxInt64, AudioInputPerMillion: math.MaxInt64, OutputPerMillion: math.MaxInt64, AudioOutputPerMillion: math.MaxInt64,
				CachedInputPerMillion: math.MaxInt64}, Source: PriceCatalog}, money.MaxAllowanceMicroUSD, true, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := CostOf(c.u, c.p)
			if !errors.Is(err, c.err) || got.MicroUSD != c.cost || got.Capped != c.capped {
				t.Fatalf("CostOf = %+v %v; want %d capped %v, %v", got, err, c.cost, c.capped, c.err)
			}
			if c.err == nil && got.Basis != c.u.Basis() {
				t.Fatalf("basis %q", got.Basis)
			}
		})
	}
	// CatalogCost refuses a negative audio count, and a negative audio price, itself.
	if _, err := CatalogCost(Usage{AudioOutputTokens: i64(-1)}, realtime.Price); !errors.Is(err, ErrBadUsage) {
		t.Fatalf("negative audio output: %v", err)
	}
	if _, err := CatalogCost(Usage{CachedInputTokens: 1, CachedAudioInputTokens: i64(-1)}, realtime.Price); !errors.Is(err, ErrBadUsage) {
		t.Fatalf("negative cached audio input: %v", err)
	}
	if _, err := CatalogCost(Usage{CachedInputTokens: 1}, Price{CachedAudioInputPerMillion: -1}); !errors.Is(err, ErrBadUsage) {
		t.Fatalf("negative cached audio price: %v", err)
	}
	if _, err := CatalogCost(Usage{InputTokens: 1}, Price{AudioInputPerMillion: -1}); !errors.Is(err, ErrBadUsage) {
		t.Fatalf("negative audio price: %v", err)
	}
}

func TestDecide(t *testing.T) {
	unknown := &Receipt{Cost: 0, Source: SourceUnknown, Complete: false, Basis: BasisNone}
	known := &Receipt{Cost: 100, Source: SourceUpstream, Complete: true, Basis: BasisUpstreamCost}
	partial := &Receipt{Cost: 60, Source: SourceCatalogEstimate, Complete: false, Basis: BasisReportedUsage}
	estimated := &Receipt{Cost: 60, Source: SourceCatalogEstimate, Complete: false, Basis: BasisEstimate}
	promoted := &Receipt{Cost: 100, Source: SourceUpstream, Complete: true, Promoted: true, Basis: BasisUpstreamCost}
	fallback := &Receipt{Cost: 500, Source: SourceFallback, Complete: false, Basis: BasisReportedUsage, PriceSource: PriceFallback}
	fallbackDone := &Receipt{Cost: 500, Source: SourceFallback, Complete: true, Basis: BasisReportedUsage, PriceSource: PriceFallback}
	up := func(cost int64, complete bool) Report {
		return Report{Cost: cost, Source: SourceUpstream, Complete: complete, Basis: BasisUpstreamCost}
	}
	priced := func(cost int64, complete bool) Report {
		return Report{Cost: cost, Source: SourceCatalogEstimate, Complete: complete, Basis: BasisReportedUsage, PriceSource: PriceOrganization}
	}
	fb := func(cost int64, complete bool) Report {
		return Report{Cost: cost, Source: SourceFallback, Complete: complete, Basis: BasisReportedUsage, PriceSource: PriceFallback}
	}
	nothing := Report{Source: SourceUnknown, Basis: BasisNone}
	// A front door's refusal (SettleItem.refused): a known 0, complete; and its receipt.
	refusal := Report{Source: SourceUpstream, Complete: true, Basis: BasisUpstreamCost, Refused: true}
	refused := &Receipt{Source: SourceUpstream, Complete: true, Basis: BasisUpstreamCost, Refused: true}
	refusedUnpriced := &Receipt{Source: SourceFallback, Complete: true, Basis: BasisReportedUsage, PriceSource: PriceFallback, Refused: true}
	cases := []struct {
		name                                 string
		prev                                 *Receipt
		r                                    Report
		out                                  Outcome
		delta, unpriced, incomplt, estimates int64
	}{
		{"first known", nil, up(100, true), Settled, 100, 0, 0, 0},
		{"first unknown and incomplete", nil, nothing, Settled, 0, 1, 1, 0},
		{"first fallback: unpriced and charged", nil, fb(500, true), Settled, 500, 1, 0, 0},
		{"first estimate", nil, Report{Cost: 60, Source: SourceCatalogEstimate, Basis: BasisEstimate, PriceSource: PriceCatalog}, Settled, 60, 0, 1, 1},
		{"repeat", known, up(100, true), Duplicate, 0, 0, 0, 0},
		{"lower", known, up(90, true), CostConflict, 0, 0, 0, 0},
		{"higher on a final receipt", known, up(110, true), CostConflict, 0, 0, 0, 0},
		{"unknown after known says nothing", known, Report{Source: SourceUnknown, Complete: true}, Duplicate, 0, 0, 0, 0},
		{"known promotes unknown", unknown, up(100, true), Promoted, 100, -1, -1, 0},
		{"known zero still promotes unknown", unknown, up(0, false), Promoted, 0, -1, 0, 0},
		{"fallback promotes unknown and stays unpriced", unknown, fb(500, true), Promoted, 500, 0, -1, 0},
		{"complete promotes incomplete", partial, priced(80, true), Promoted, 20, 0, -1, 0},
		{"reported usage promotes an estimate", estimated, priced(80, true), Promoted, 20, 0, -1, -1},
		{"lower than a partial charge", partial, up(50, true), CostConflict, 0, 0, 0, 0},
		{"only once", promoted, up(150, true), CostConflict, 0, 0, 0, 0},
		{"repeat after promotion", promoted, up(100, true), Duplicate, 0, 0, 0, 0},
		{"repeat fallback settlement: duplicate", fallback, fb(500, false), Duplicate, 0, 0, 0, 0},
		{"repeat complete fallback settlement: duplicate", fallbackDone, fb(500, true), Duplicate, 0, 0, 0, 0},
		{"a real price promotes a fallback one", fallbackDone, priced(500, true), Promoted, 0, -1, 0, 0},
		{"an upstream cost promotes a fallback one", fallback, up(700, true), Promoted, 200, -1, -1, 0},
		{"a higher fallback cost on a complete fallback receipt", fallbackDone, fb(600, true), CostConflict, 0, 0, 0, 0},
		{"a complete fallback report on an incomplete one", fallback, fb(600, true), Promoted, 100, 0, -1, 0},
		{"a lower real price than the fallback charge", fallbackDone, priced(100, true), CostConflict, 0, 0, 0, 0},
		{"a fallback report after a known cost knows less", known, fb(0, false), Duplicate, 0, 0, 0, 0},
		{"a higher fallback report after a known cost knows less", partial, fb(900, true), Duplicate, 0, 0, 0, 0},
		// A refusal a proxy did not apply: the answer's settlement promotes it, once.
		{"first refusal", nil, refusal, Settled, 0, 0, 0, 0},
		{"repeat refusal", refused, refusal, Duplicate, 0, 0, 0, 0},
		{"an answer promotes a refusal", refused, priced(6000, true), Promoted, 6000, 0, 0, 0},
		{"an estimated answer promotes a refusal, incomplete", refused,
			Report{Cost: 60, Source: SourceCatalogEstimate, Basis: BasisEstimate, PriceSource: PriceCatalog}, Promoted, 60, 0, 1, 1},
		{"a fallback-priced answer promotes a refusal, unpriced", refused, fb(500, true), Promoted, 500, 1, 0, 0},
		{"an upstream cost promotes a refusal", refused, up(70, true), Promoted, 70, 0, 0, 0},
		{"an answer of 0 promotes a refusal", refused, priced(0, true), Promoted, 0, 0, 0, 0},
		{"a real price promotes an unpriced model's refusal", refusedUnpriced, priced(80, true), Promoted, 80, -1, 0, 0},
		{"an unknown cost leaves a refusal", refused, nothing, Duplicate, 0, 0, 0, 0},
		{"a refusal after an answer says nothing", known, refusal, Duplicate, 0, 0, 0, 0},
		{"a refusal after an estimate says nothing", partial, refusal, Duplicate, 0, 0, 0, 0},
		{"a refusal resolves an unknown receipt", unknown, refusal, Promoted, 0, -1, -1, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := Decide(c.prev, c.r)
			if d.Outcome != c.out || d.Delta != c.delta || d.UnpricedDelta != c.unpriced || d.IncompleteDelta != c.incomplt || d.EstimatedDelta != c.estimates {
				t.Fatalf("Decide = %+v", d)
			}
			if (d.Outcome == Settled || d.Outcome == Promoted) && (d.Receipt.Basis != c.r.Basis || d.Receipt.PriceSource != c.r.PriceSource) {
				t.Fatalf("receipt %+v does not carry the report's basis", d.Receipt)
			}
			if (d.Outcome == Settled || d.Outcome == Promoted) && d.Receipt.Refused != c.r.Refused {
				t.Fatalf("receipt %+v: refused %v, want the report's %v", d.Receipt, d.Receipt.Refused, c.r.Refused)
			}
			if c.r.Refused && d.Outcome == Promoted {
				// A refusal is no answer: the answer that may follow still promotes it.
				if again := Decide(&d.Receipt, priced(700, true)); again.Outcome != Promoted || again.Delta != 700 {
					t.Fatalf("the answer after a refusal that resolved %+v: %+v, want promoted by 700", c.prev, again)
				}
			}
			if c.prev != nil && c.prev.Refused && d.Outcome == Promoted {
				if again := Decide(&d.Receipt, priced(d.Receipt.Cost+1, true)); again.Outcome != CostConflict {
					t.Fatalf("a promoted refusal promoted again: %+v", again)
				}
			}
		})
	}
}

// An incomplete cost resolving an unknown receipt (abandonment recovery's) leaves its
// one promotion to the complete answer, as an incomplete first settlement does.
func TestDecideIncompleteCostLeavesAnUnknownReceiptsPromotion(t *testing.T) {
	unknown := &Receipt{Source: SourceUnknown, Basis: BasisNone}
	d := Decide(unknown, Report{Cost: 100, Source: SourceUpstream, Basis: BasisUpstreamCost})
	if d.Outcome != Promoted || d.Delta != 100 || d.Receipt.Promoted {
		t.Fatalf("incomplete cost on an unknown receipt: %+v", d)
	}
	again := Decide(&d.Receipt, Report{Cost: 500, Source: SourceUpstream, Complete: true, Basis: BasisUpstreamCost})
	if again.Outcome != Promoted || again.Delta != 400 || again.IncompleteDelta != -1 || !again.Receipt.Promoted {
		t.Fatalf("the complete answer after it: %+v", again)
	}
	if last := Decide(&again.Receipt, Report{Cost: 600, Source: SourceUpstream, Complete: true, Basis: BasisUpstreamCost}); last.Outcome != CostConflict {
		t.Fatalf("a third cost: %+v", last)
	}
}

func TestCleanModel(t *testing.T) {
	long := strings.Repeat("é", 150) // 300 bytes
	cases := []struct {
		name, in, want string
		changed        bool
	}{
		{"clean", "gpt-4o-mini", "gpt-4o-mini", false},
		{"NUL", "gpt-4o\x00-mini", "gpt-4o-mini", true},
		{"control characters", "gpt\t-4o\r\n\x7f", "gpt-4o", true},
		{"invalid UTF-8", "gpt-\xff4o", "gpt-\uFFFD4o", true},
		{"300 bytes cut on a rune boundary", long, strings.Repeat("é", 100), true},
		{"201 ASCII bytes", strings.Repeat("a", 201), strings.Repeat("a", 200), true},
		{"spaces", "  m  ", "m", true},
		{"only NULs", "\x00\x00", "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, changed := CleanModel(c.in)
			if got != c.want || changed != c.changed {
				t.Fatalf("CleanModel(%q) = %q %v; want %q %v", c.in, got, changed, c.want, c.changed)
			}
		})
	}
}

func TestBound(t *testing.T) {
	u, notes := Bound(Usage{InputTokens: math.MaxInt64, OutputTokens: -5, CachedInputTokens: 3, UpstreamCost: i64(math.MaxInt64)})
	if u.InputTokens != MaxTokens || u.OutputTokens != 0 || u.CachedInputTokens != 3 || *u.UpstreamCost != money.MaxAllowanceMicroUSD || len(notes) != 3 {
		t.Fatalf("%+v %v", u, notes)
	}
	u, notes = Bound(Usage{InputTokens: 10, UpstreamCost: i64(-1)})
	if u.UpstreamCost != nil || u.InputTokens != 10 || len(notes) != 1 {
		t.Fatalf("a negative upstream cost: %+v %v", u, notes)
	}
	u, notes = Bound(Usage{AudioInputMillis: math.MaxInt64})
	if u.AudioInputMillis != MaxAudioMillis || len(notes) != 1 {
		t.Fatalf("absurd audio: %+v %v", u, notes)
	}
	if u, notes = Bound(Usage{AudioInputMillis: -3}); u.AudioInputMillis != 0 || len(notes) != 1 {
		t.Fatalf("negative audio: %+v %v", u, notes)
	}
	if u, notes = Bound(Usage{FileSearchCalls: math.MaxInt64}); u.FileSearchCalls != MaxTokens || len(notes) != 1 || !strings.Contains(notes[0], "file_search_calls") {
		t.Fatalf("absurd file search calls: %+v %v", u, notes)
	}
	if u, notes = Bound(Usage{FileSearchCalls: -2}); u.FileSearchCalls != 0 || len(notes) != 1 {
		t.Fatalf("negative file search calls: %+v %v", u, notes)
	}
	if u, notes = Bound(Usage{MapsGroundedPrompts: math.MaxInt64}); u.MapsGroundedPrompts != MaxTokens || len(notes) != 1 ||
		!strings.Contains(notes[0], "maps_grounded_prompts") {
		t.Fatalf("absurd maps-grounded prompts: %+v %v", u, notes)
	}
	if u, notes = Bound(Usage{MapsGroundedPrompts: -2}); u.MapsGroundedPrompts != 0 || len(notes) != 1 {
		t.Fatalf("negative maps-grounded prompts: %+v %v", u, notes)
	}
	if u, notes = Bound(Usage{ContainerMinutes: math.MaxInt64}); u.ContainerMinutes != MaxContainerMinutes || len(notes) != 1 ||
		!strings.Contains(notes[0], "container_minutes") {
		t.Fatalf("absurd container minutes: %+v %v", u, notes)
	}
	if u, notes = Bound(Usage{ContainerMinutes: -2}); u.ContainerMinutes != 0 || len(notes) != 1 {
		t.Fatalf("negative container minutes: %+v %v", u, notes)
	}
	if u, notes = Bound(Usage{ContainerMinutes: MaxContainerMinutes}); u.ContainerMinutes != MaxContainerMinutes || len(notes) != 0 {
		t.Fatalf("container minutes at the bound: %+v %v", u, notes)
	}
	// Each of the guardrails' counts like the calls billed apart: capped at MaxTokens, a
	// negative one read as 0, each noted by its settlement field.
	u, notes = Bound(Usage{GuardrailUnits: pricecatalog.GuardrailUnits{ContentText: math.MaxInt64, DeniedTopics: MaxTokens + 1,
		SensitiveInformation: math.MaxInt64, ContextualGrounding: math.MaxInt64, AutomatedReasoning: math.MaxInt64, ContentImages: math.MaxInt64,
		ChecksContentFilter: math.MaxInt64, ChecksPromptAttack: MaxTokens + 2, ChecksSensitiveInformation: math.MaxInt64}})
	if want := (pricecatalog.GuardrailUnits{ContentText: MaxTokens, DeniedTopics: MaxTokens, SensitiveInformation: MaxTokens, ContextualGrounding: MaxTokens,
		AutomatedReasoning: MaxTokens, ContentImages: MaxTokens, ChecksContentFilter: MaxTokens, ChecksPromptAttack: MaxTokens,
		ChecksSensitiveInformation: MaxTokens}); u.GuardrailUnits != want || len(notes) != 9 ||
		notes[0] != "guardrail_units.content_text 9223372036854775807 capped at 1000000000000" ||
		notes[1] != "guardrail_units.denied_topics 1000000000001 capped at 1000000000000" ||
		!strings.HasPrefix(notes[2], "guardrail_units.sensitive_information ") || !strings.HasPrefix(notes[3], "guardrail_units.contextual_grounding ") ||
		!strings.HasPrefix(notes[4], "guardrail_units.automated_reasoning ") || !strings.HasPrefix(notes[5], "guardrail_units.content_images ") ||
		notes[6] != "guardrail_units.checks_content_filter 9223372036854775807 capped at 1000000000000" ||
		notes[7] != "guardrail_units.checks_prompt_attack 1000000000002 capped at 1000000000000" ||
		notes[8] != "guardrail_units.checks_sensitive_information 9223372036854775807 capped at 1000000000000" {
		t.Fatalf("absurd guardrail units: %+v %q", u, notes)
	}
	u, notes = Bound(Usage{InputTokens: 10, GuardrailUnits: pricecatalog.GuardrailUnits{ContentText: 3, DeniedTopics: -1, ContentImages: -2,
		ChecksContentFilter: -3, ChecksPromptAttack: 4, ChecksSensitiveInformation: -5}})
	if want := (pricecatalog.GuardrailUnits{ContentText: 3, ChecksPromptAttack: 4}); u.GuardrailUnits != want || u.InputTokens != 10 || len(notes) != 4 ||
		notes[0] != "guardrail_units.denied_topics -1 read as 0" || notes[1] != "guardrail_units.content_images -2 read as 0" ||
		notes[2] != "guardrail_units.checks_content_filter -3 read as 0" || notes[3] != "guardrail_units.checks_sensitive_information -5 read as 0" {
		t.Fatalf("negative guardrail units: %+v %q", u, notes)
	}
	if u, notes = Bound(Usage{GuardrailUnits: pricecatalog.GuardrailUnits{ChecksPromptAttack: -1}}); !u.GuardrailUnits.IsZero() || len(notes) != 1 ||
		notes[0] != "guardrail_units.checks_prompt_attack -1 read as 0" {
		t.Fatalf("negative prompt-attack checks' units: %+v %q", u, notes)
	}
	atBound := pricecatalog.GuardrailUnits{ContentText: MaxTokens, DeniedTopics: MaxTokens, SensitiveInformation: MaxTokens, ContextualGrounding: MaxTokens,
		AutomatedReasoning: MaxTokens, ContentImages: MaxTokens, ChecksContentFilter: MaxTokens, ChecksPromptAttack: MaxTokens,
		ChecksSensitiveInformation: MaxTokens}
	if u, notes = Bound(Usage{GuardrailUnits: atBound}); u.GuardrailUnits != atBound || len(notes) != 0 {
		t.Fatalf("guardrail units at the bound: %+v %v", u, notes)
	}
	if u, notes = Bound(Usage{ImageGenerationCalls: math.MaxInt64, ImageOutputTokens: math.MaxInt64}); u.ImageGenerationCalls != MaxTokens ||
		u.ImageOutputTokens != MaxTokens || len(notes) != 2 || !strings.Contains(notes[0], "image_generation_calls") || !strings.Contains(notes[1], "image_output_tokens") {
		t.Fatalf("absurd image generation calls: %+v %v", u, notes)
	}
	if u, notes = Bound(Usage{ImageGenerationCalls: -2, ImageOutputTokens: -3}); u.ImageGenerationCalls != 0 || u.ImageOutputTokens != 0 || len(notes) != 2 {
		t.Fatalf("negative image generation calls: %+v %v", u, notes)
	}
	if u, notes = Bound(Usage{AdvisorInputTokens: math.MaxInt64, AdvisorOutputTokens: -1, AdvisorCachedInputTokens: MaxTokens + 1, AdvisorCacheWriteTokens: -2}); u.AdvisorInputTokens != MaxTokens ||
		u.AdvisorOutputTokens != 0 || u.AdvisorCachedInputTokens != MaxTokens || u.AdvisorCacheWriteTokens != 0 || len(notes) != 4 ||
		!strings.Contains(notes[0], "advisor_input_tokens") || !strings.Contains(notes[1], "advisor_output_tokens") ||
		!strings.Contains(notes[2], "advisor_cached_input_tokens") || !strings.Contains(notes[3], "advisor_cache_creation_input_tokens") {
		t.Fatalf("absurd and negative advisor counts: %+v %v", u, notes)
	}
	if _, notes := Bound(Usage{InputTokens: MaxTokens, AudioInputMillis: MaxAudioMillis, UpstreamCost: i64(money.MaxAllowanceMicroUSD)}); len(notes) != 0 {
		t.Fatalf("values at the bounds changed: %v", notes)
	}
	// The audio token counts: capped like the token counts, a negative one ignored (the
	// split unknown, priced at the dearer price, not read as no audio), absent ones kept
	// absent, the caller's values never written through.
	absurd, below := int64(math.MaxInt64), int64(-4)
	u, notes = Bound(Usage{InputTokens: 10, AudioInputTokens: &absurd, AudioOutputTokens: &below})
	if u.AudioInputTokens == nil || *u.AudioInputTokens != MaxTokens || u.AudioOutputTokens != nil || len(notes) != 2 ||
		!strings.Contains(notes[0], "audio_input_tokens") || !strings.Contains(notes[1], "audio_output_tokens") {
		t.Fatalf("absurd and negative audio tokens: %+v %v", u, notes)
	}
	if absurd != math.MaxInt64 || below != -4 {
		t.Fatalf("Bound wrote through the caller's counts: %d %d", absurd, below)
	}
	if u, notes = Bound(Usage{InputTokens: 10}); u.AudioInputTokens != nil || u.AudioOutputTokens != nil || len(notes) != 0 {
		t.Fatalf("absent audio tokens: %+v %v", u, notes)
	}
	if u, notes = Bound(Usage{AudioInputTokens: i64(0), AudioOutputTokens: i64(MaxTokens)}); u.AudioInputTokens == nil || *u.AudioInputTokens != 0 ||
		u.AudioOutputTokens == nil || *u.AudioOutputTokens != MaxTokens || len(notes) != 0 {
		t.Fatalf("audio tokens within the bounds: %+v %v", u, notes)
	}
}

// Cached audio priced apart (gemini-2.5-flash's prices: text input 0.30 USD per
// million, audio input 1.00, cached text 0.075, cached audio 0.25, output 2.50): a
// reported cached split is charged each part at its price, an unknown one all the
// cached tokens at the dearer; the cached audio is taken out of the audio count, which
// covers the whole prompt, before the uncached audio is priced.
// A settlement of nothing but guardrail units (ApplyGuardrail, a refused prompt, or the
// detect-only guardrail checks, which name no model) is the catalog's to price: its
// units are usage, and nothing else needs a price.
func TestGuardrailOnly(t *testing.T) {
	checks := pricecatalog.GuardrailUnits{ChecksContentFilter: 2, ChecksPromptAttack: 2, ChecksSensitiveInformation: 1}
	for _, c := range []struct {
		name  string
		u     Usage
		only  bool
		basis string
	}{
		{"the checks' units alone", Usage{GuardrailUnits: checks}, true, BasisReportedUsage},
		{"one check's units alone", Usage{GuardrailUnits: pricecatalog.GuardrailUnits{ChecksSensitiveInformation: 1}}, true, BasisReportedUsage},
		{"the checks' units, estimated", Usage{GuardrailUnits: checks, Estimated: true}, true, BasisEstimate},
		{"a guardrail's units alone", Usage{GuardrailUnits: pricecatalog.GuardrailUnits{ContentText: 3}}, true, BasisReportedUsage},
		{"the checks' units beside tokens", Usage{InputTokens: 1, GuardrailUnits: checks}, false, BasisReportedUsage},
		{"the checks' units beside a web search", Usage{WebSearchRequests: 1, GuardrailUnits: checks}, false, BasisReportedUsage},
		{"the checks' units with an upstream cost", Usage{GuardrailUnits: checks, UpstreamCost: i64(42)}, false, BasisUpstreamCost},
		{"nothing", Usage{}, false, BasisNone},
	} {
		if only, basis := c.u.GuardrailOnly(), c.u.Basis(); only != c.only || basis != c.basis {
			t.Errorf("%s: GuardrailOnly %v, Basis %q; want %v, %q", c.name, only, basis, c.only, c.basis)
		}
	}
}

func TestCachedAudioPrices(t *testing.T) {
	flash := PricedAt{Price: Price{InputPerMillion: 300_000, AudioInputPerMillion: 1_000_000, CachedInputPerMillion: 75_000,
		CachedAudioInputPerMillion: 250_000, OutputPerMillion: 2_500_000}, Source: PriceCatalog}
	// gpt-realtime: one cached price for both (0.40), so only the uncached split moves.
	realtime := PricedAt{Price: Price{InputPerMillion: 4_000_000, AudioInputPerMillion: 32_000_000, CachedInputPerMillion: 400_000,
		OutputPerMillion: 16_000_000, AudioOutputPerMillion: 64_000_000}, Source: PriceCatalog}
	// 100,000 input tokens, 80,000 of them cached; 50,000 audio, 40,000 of those cached.
	in, cached := int64(100_000), int64(80_000)
	cases := []costCase{
		{"both splits known", Usage{InputTokens: in, CachedInputTokens: cached, AudioInputTokens: i64(50_000), CachedAudioInputTokens: i64(40_000)}, flash,
			// uncached: 10,000 audio at 1.00 and 10,000 text at 0.30; cached: 40,000
			// audio at 0.25 and 40,000 text at 0.075.
			(10_000*1_000_000 + 10_000*300_000 + 40_000*250_000 + 40_000*75_000) / 1_000_000}, // 26,000
		{"cached split unknown: the cached at the dearer, the audio on the uncached first", Usage{InputTokens: in, CachedInputTokens: cached,
			AudioInputTokens: i64(50_000)}, flash, (20_000*1_000_000 + 80_000*250_000) / 1_000_000}, // 40,000
		{"no split at all: the dearer prices", Usage{InputTokens: in, CachedInputTokens: cached}, flash,
			(20_000*1_000_000 + 80_000*250_000) / 1_000_000},
		{"cached split known, audio count unknown: uncached at the dearer", Usage{InputTokens: in, CachedInputTokens: cached,
			CachedAudioInputTokens: i64(40_000)}, flash, (20_000*1_000_000 + 40_000*250_000 + 40_000*75_000) / 1_000_000}, // 33,000
		{"no cached audio reported: the cached text price", Usage{InputTokens: in, CachedInputTokens: cached, AudioInputTokens: i64(0),
			CachedAudioInputTokens: i64(0)}, flash, (20_000*300_000 + 80_000*75_000) / 1_000_000}, // 12,000
		// Counts that disagree are read the dearer way: 80,000 cached audio tokens at most,
		// so 20,000 of the 100,000 audio tokens are uncached.
		{"a cached audio count above the cached count counts as it", Usage{InputTokens: in, CachedInputTokens: cached, AudioInputTokens: i64(100_000),
			CachedAudioInputTokens: i64(90_000)}, flash, (20_000*1_000_000 + 80_000*250_000) / 1_000_000},
		{"more cached audio than audio: no uncached audio", Usage{InputTokens: in, CachedInputTokens: cached, AudioInputTokens: i64(10_000),
			CachedAudioInputTokens: i64(40_000)}, flash, (20_000*300_000 + 40_000*250_000 + 40_000*75_000) / 1_000_000},
		// One cached price: the cached audio still tells the uncached audio apart (the
		// old reading put 20,000 of the 50,000 audio tokens on the uncached input).
		{"one cached price: the uncached audio is the audio less the cached", Usage{InputTokens: in, CachedInputTokens: cached,
			AudioInputTokens: i64(50_000), CachedAudioInputTokens: i64(40_000)}, realtime, (10_000*32_000_000 + 10_000*4_000_000 + 80_000*400_000) / 1_000_000},
		{"one cached price, cached split unknown", Usage{InputTokens: in, CachedInputTokens: cached, AudioInputTokens: i64(50_000)}, realtime,
			(20_000*32_000_000 + 80_000*400_000) / 1_000_000},
	}
	runCostCases(t, cases)
	// Bound caps a cached audio count like the other parts and ignores a negative one.
	u, notes := Bound(Usage{CachedInputTokens: 10, CachedAudioInputTokens: i64(-3)})
	if u.CachedAudioInputTokens != nil || len(notes) != 1 || !strings.Contains(notes[0], "cached_audio_input_tokens") {
		t.Fatalf("negative cached audio: %+v %v", u, notes)
	}
	if u, _ = Bound(Usage{CachedAudioInputTokens: i64(math.MaxInt64)}); u.CachedAudioInputTokens == nil || *u.CachedAudioInputTokens != MaxTokens {
		t.Fatalf("absurd cached audio: %+v", u)
	}
}

// Image input priced apart (gpt-realtime's prices: text input 4 USD per million, cached
// 0.40, image input 5, cached image 0.50, audio input 32 with no cached audio price of
// its own; gpt-realtime-mini's: text 0.60, cached 0.06, image 0.80, cached image 0.08,
// audio 10, cached audio 0.30): each input class splits three ways, audio first, then
// image, the rest text; a priced modality's count unknown prices the class at its
// dearest; the cached image is taken out of the image count, which covers the whole
// prompt, as for audio.
func TestImageInputPrices(t *testing.T) {
	realtimePrice := Price{InputPerMillion: 4_000_000, CachedInputPerMillion: 400_000, ImageInputPerMillion: 5_000_000,
		CachedImageInputPerMillion: 500_000, AudioInputPerMillion: 32_000_000, OutputPerMillion: 16_000_000, AudioOutputPerMillion: 64_000_000}
	realtime := PricedAt{Price: realtimePrice, Source: PriceCatalog}
	mini := PricedAt{Price: Price{InputPerMillion: 600_000, CachedInputPerMillion: 60_000, ImageInputPerMillion: 800_000, CachedImageInputPerMillion: 80_000,
		AudioInputPerMillion: 10_000_000, CachedAudioInputPerMillion: 300_000, OutputPerMillion: 2_400_000, AudioOutputPerMillion: 20_000_000}, Source: PriceCatalog}
	// gpt-realtime's prices without its image prices: images priced as text.
	noImagePrice := realtime
	noImagePrice.Price.ImageInputPerMillion, noImagePrice.Price.CachedImageInputPerMillion = 0, 0
	// Image prices and no audio price: images are the dearest input.
	imagesOnly := PricedAt{Price: Price{InputPerMillion: 4_000_000, CachedInputPerMillion: 400_000, ImageInputPerMillion: 5_000_000,
		CachedImageInputPerMillion: 500_000}, Source: PriceCatalog}
	// 1,000,000 text and 200,000 image tokens uncached, 100,000 cached of which 40,000
	// image: 1,300,000 input tokens, 240,000 of them image, no audio.
	in, cached := int64(1_300_000), int64(100_000)
	cases := []costCase{
		// Uncached: 1,000,000 text at 4 (4,000,000) and 200,000 image at 5 (1,000,000);
		// cached: 60,000 text at 0.40 (24,000) and 40,000 image at 0.50 (20,000).
		{"every split known: each part at its price", Usage{InputTokens: in, CachedInputTokens: cached, AudioInputTokens: i64(0),
			CachedAudioInputTokens: i64(0), ImageInputTokens: i64(240_000), CachedImageInputTokens: i64(40_000)}, realtime,
			4_000_000 + 1_000_000 + 24_000 + 20_000}, // 5,044,000
		// gpt-realtime has no cached audio price: its cached audio count changes nothing.
		{"no cached audio price: its count unknown changes nothing", Usage{InputTokens: in, CachedInputTokens: cached, AudioInputTokens: i64(0),
			ImageInputTokens: i64(240_000), CachedImageInputTokens: i64(40_000)}, realtime, 5_044_000},
		// The image count unknown, the audio count 0: the 1,200,000 uncached tokens may be
		// image, all at the image price (6,000,000), not the audio price; the cached split
		// is known (44,000).
		{"image count unknown: the rest of the uncached input at the image price", Usage{InputTokens: in, CachedInputTokens: cached,
			AudioInputTokens: i64(0), CachedImageInputTokens: i64(40_000)}, realtime, 1_200_000*5 + 44_000}, // 6,044,000
		{"image count unknown without an audio price: the image price for all", Usage{InputTokens: in, CachedInputTokens: cached},
			imagesOnly, 1_200_000*5 + 100_000*5/10}, // 6,050,000
		// The audio count alone reported (a reporter older than the image prices): the
		// audio at its price, and the rest, where the images may be, at the dearer of
		// text and image, rather than 600*32 + 400*4, or every token at the audio price.
		{"audio known, image unknown: the audio at its price, the rest at the image price", Usage{InputTokens: 1_000, AudioInputTokens: i64(600)},
			realtime, 600*32 + 400*5}, // 21,200
		// The cached image count unknown: the image count on the uncached input first
		// (240,000 at 5, 960,000 text at 4), all the cached at the dearer, 0.50.
		{"cached image count unknown: the cached input at the dearer", Usage{InputTokens: in, CachedInputTokens: cached, AudioInputTokens: i64(0),
			ImageInputTokens: i64(240_000)}, realtime, 240_000*5 + 960_000*4 + 100_000*5/10}, // 5,090,000
		// 2,000,000 image tokens, 40,000 cached: 1,960,000 uncached, at most the 1,200,000.
		{"an image count above its class counts as the class", Usage{InputTokens: in, CachedInputTokens: cached, AudioInputTokens: i64(0),
			ImageInputTokens: i64(2_000_000), CachedImageInputTokens: i64(40_000)}, realtime, 1_200_000*5 + 44_000}, // 6,044,000
		// 150,000 cached image tokens of 100,000 cached: all the cached at 0.50, and only
		// 100,000 taken off the image count (140,000 uncached image at 5, 1,060,000 text).
		{"a cached image count above the cached count counts as it", Usage{InputTokens: in, CachedInputTokens: cached, AudioInputTokens: i64(0),
			ImageInputTokens: i64(240_000), CachedImageInputTokens: i64(150_000)}, realtime, 140_000*5 + 1_060_000*4 + 100_000*5/10}, // 4,990,000
		{"more cached image than image: no uncached image", Usage{InputTokens: in, CachedInputTokens: cached, AudioInputTokens: i64(0),
			ImageInputTokens: i64(20_000), CachedImageInputTokens: i64(40_000)}, realtime, 1_200_000*4 + 44_000}, // 4,844,000
		{"no image reported: the text prices", Usage{InputTokens: in, CachedInputTokens: cached, AudioInputTokens: i64(0),
			ImageInputTokens: i64(0), CachedImageInputTokens: i64(0)}, realtime, 1_200_000*4 + 100_000*4/10}, // 4,840,000
		{"image prices of 0: image tokens at the text prices", Usage{InputTokens: in, CachedInputTokens: cached, AudioInputTokens: i64(0),
			ImageInputTokens: i64(240_000), CachedImageInputTokens: i64(40_000)}, noImagePrice, 1_200_000*4 + 100_000*4/10},
		{"image prices of 0, image counts unknown: the text prices", Usage{InputTokens: in, CachedInputTokens: cached, AudioInputTokens: i64(0)},
			noImagePrice, 1_200_000*4 + 100_000*4/10},
		// 300,000 audio tokens (20,000 cached) and 240,000 image (40,000 cached) in one
		// prompt: uncached 280,000 audio at 32 (8,960,000), 200,000 image at 5 (1,000,000),
		// 720,000 text at 4 (2,880,000); cached 40,000 image at 0.50 (20,000), the other
		// 60,000, audio or text, at 0.40 (24,000).
		{"audio and image in one class: each at its price", Usage{InputTokens: in, CachedInputTokens: cached, AudioInputTokens: i64(300_000),
			CachedAudioInputTokens: i64(20_000), ImageInputTokens: i64(240_000), CachedImageInputTokens: i64(40_000)}, realtime,
			8_960_000 + 1_000_000 + 2_880_000 + 20_000 + 24_000}, // 12,884,000
		// gpt-realtime-mini prices cached audio too: uncached 280,000 audio at 10
		// (2,800,000), 200,000 image at 0.80 (160,000), 720,000 text at 0.60 (432,000);
		// cached 20,000 audio at 0.30 (6,000), 40,000 image at 0.08 (3,200), 40,000 text
		// at 0.06 (2,400).
		{"audio and image in each class, cached audio priced apart", Usage{InputTokens: in, CachedInputTokens: cached, AudioInputTokens: i64(300_000),
			CachedAudioInputTokens: i64(20_000), ImageInputTokens: i64(240_000), CachedImageInputTokens: i64(40_000)}, mini,
			2_800_000 + 160_000 + 432_000 + 6_000 + 3_200 + 2_400}, // 3,403,600
		// The cached audio unknown: the 40,000 cached image at its price, the other 60,000
		// cached at the cached audio price, the dearer.
		{"cached audio unknown: the rest of the cached input at cached audio's", Usage{InputTokens: in, CachedInputTokens: cached,
			AudioInputTokens: i64(0), ImageInputTokens: i64(240_000), CachedImageInputTokens: i64(40_000)}, mini,
			200_000*8/10 + 1_000_000*6/10 + 40_000*8/100 + 60_000*3/10}, // 781,200
		// 800 audio and 500 image tokens of 1,000: the audio first, the image what is left.
		{"audio and image above their class: the audio first", Usage{InputTokens: 1_000, AudioInputTokens: i64(800), ImageInputTokens: i64(500)}, realtime,
			800*32 + 200*5}, // 26,600
		// Cached 100 tokens, 70 cached audio at 0.30 and 50 cached image, of which 30 fit,
		// at 0.08: 21 + 2.4 micro-USD, rounded up once.
		{"cached audio and image above the cached count: the audio first", Usage{InputTokens: 100, CachedInputTokens: 100, AudioInputTokens: i64(70),
			CachedAudioInputTokens: i64(70), ImageInputTokens: i64(50), CachedImageInputTokens: i64(50)}, mini, 24},
		// Parts of 0.3 + 0.2 + 0.3 + 0.2 micro-USD: 1 rounded once, 4 rounded each.
		{"rounded once, the parts together", Usage{InputTokens: 600_000, CachedInputTokens: 300_000, ImageInputTokens: i64(200_000),
			CachedImageInputTokens: i64(100_000)}, PricedAt{Price: Price{InputPerMillion: 1, ImageInputPerMillion: 3, CachedInputPerMillion: 1,
			CachedImageInputPerMillion: 3}, Source: PriceCatalog}, 1},
		{"priority tier: twice the split", Usage{InputTokens: in, CachedInputTokens: cached, AudioInputTokens: i64(0), ImageInputTokens: i64(240_000),
			CachedImageInputTokens: i64(40_000), Tier: pricecatalog.Fast}, realtime, 2 * 5_044_000},
		// An organization's price has no image prices: all its tokens at its prices.
		{"a price without image prices ignores the counts", Usage{InputTokens: in, CachedInputTokens: cached, ImageInputTokens: i64(240_000),
			CachedImageInputTokens: i64(40_000)}, PricedAt{Price: Price{InputPerMillion: 1_000_000, CachedInputPerMillion: 100_000}, Source: PriceOrganization},
			1_200_000 + 10_000},
	}
	runCostCases(t, cases)
	// Negative image counts or prices are refused, like the audio ones.
	for name, c := range map[string]struct {
		u Usage
		p Price
	}{
		"negative image input":                      {Usage{InputTokens: 1, ImageInputTokens: i64(-1)}, realtimePrice},
		"negative cached image input":               {Usage{CachedInputTokens: 1, CachedImageInputTokens: i64(-1)}, realtimePrice},
		"negative image price":                      {Usage{InputTokens: 1}, Price{ImageInputPerMillion: -1}},
		"negative cached image price":               {Usage{CachedInputTokens: 1}, Price{CachedImageInputPerMillion: -1}},
		"negative image input without image prices": {Usage{InputTokens: 1, ImageInputTokens: i64(-1)}, Price{InputPerMillion: 1}},
	} {
		if _, err := CatalogCost(c.u, c.p); !errors.Is(err, ErrBadUsage) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Every class at its most, split three ways: four terms below 2^126 each, so the sum
	// does not wrap and the cost overflows (CostOf caps it) rather than reading small.
	huge := Price{InputPerMillion: math.MaxInt64, CachedInputPerMillion: math.MaxInt64, CacheWritePerMillion: i64(math.MaxInt64),
		AudioInputPerMillion: math.MaxInt64, CachedAudioInputPerMillion: math.MaxInt64, ImageInputPerMillion: math.MaxInt64,
		CachedImageInputPerMillion: math.MaxInt64, OutputPerMillion: math.MaxInt64, AudioOutputPerMillion: math.MaxInt64}
	hugeUsage := Usage{InputTokens: math.MaxInt64, CachedInputTokens: math.MaxInt64, CacheWriteTokens: math.MaxInt64, OutputTokens: math.MaxInt64,
		AudioInputTokens: i64(math.MaxInt64 / 3), CachedAudioInputTokens: i64(math.MaxInt64 / 3), ImageInputTokens: i64(math.MaxInt64 / 3),
		CachedImageInputTokens: i64(math.MaxInt64 / 3), AudioOutputTokens: i64(math.MaxInt64 / 2)}
	if _, err := CatalogCost(hugeUsage, huge); !errors.Is(err, ErrCostOverflow) {
		t.Fatalf("huge parts: %v", err)
	}
	if c, err := CostOf(hugeUsage, PricedAt{Price: huge, Source: PriceCatalog}); err != nil || !c.Capped || c.MicroUSD != money.MaxAllowanceMicroUSD {
		t.Fatalf("huge parts: %+v %v", c, err)
	}
	// Bound caps the image counts like the audio ones and ignores a negative one.
	u, notes := Bound(Usage{InputTokens: 10, ImageInputTokens: i64(-3), CachedImageInputTokens: i64(-1)})
	if u.ImageInputTokens != nil || u.CachedImageInputTokens != nil || len(notes) != 2 || !strings.Contains(notes[0], "image_input_tokens") ||
		!strings.Contains(notes[1], "cached_image_input_tokens") {
		t.Fatalf("negative image counts: %+v %v", u, notes)
	}
	u, _ = Bound(Usage{ImageInputTokens: i64(math.MaxInt64), CachedImageInputTokens: i64(MaxTokens + 1)})
	if u.ImageInputTokens == nil || *u.ImageInputTokens != MaxTokens || u.CachedImageInputTokens == nil || *u.CachedImageInputTokens != MaxTokens {
		t.Fatalf("absurd image counts: %+v", u)
	}
	// Parts: a usage of image counts alone has no basis.
	if b := (Usage{ImageInputTokens: i64(5), CachedImageInputTokens: i64(5)}).Basis(); b != BasisNone {
		t.Fatalf("basis %q", b)
	}
}

// FuzzPricing is the pure half of the settlement path, from a SettleItem's values to
// its receipt's cost: the model name comes out storable, the usage bounded, and pricing
// never fails; with tokens and a price above zero the cost is above zero.
func FuzzPricing(f *testing.F) {
	f.Add("gpt-4o\x00mini", int64(10), int64(20), int64(0), int64(0), int64(-1), false, int64(150_000))
	f.Add("\xff\xfe", int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MaxInt64), int64(math.MaxInt64), true, int64(math.MaxInt64))
	f.Add(strings.Repeat("m", 300), int64(-5), int64(1), int64(7), int64(9), int64(-1), true, int64(1))
	f.Fuzz(func(t *testing.T, model string, in, out, cached, written, upstream int64, estimated bool, price int64) {
		m, _ := CleanModel(model)
		if len(m) > MaxModelLen || !utf8.ValidString(m) || strings.ContainsFunc(m, unicode.IsControl) || strings.ContainsRune(m, 0) {
			t.Fatalf("CleanModel(%q) = %q", model, m)
		}
		u := Usage{InputTokens: in, OutputTokens: out, CachedInputTokens: cached, CacheWriteTokens: written, AudioInputMillis: written ^ in, Estimated: estimated}
		if upstream >= 0 {
			u.UpstreamCost = &upstream
		}
		if !estimated { // audio token counts, hostile ones included
			audioIn, audioOut, cachedAudio := cached^out, written-in, cached-out
			u.AudioInputTokens, u.AudioOutputTokens, u.CachedAudioInputTokens = &audioIn, &audioOut, &cachedAudio
			imageIn, cachedImage := in-out, written^cached
			u.ImageInputTokens, u.CachedImageInputTokens = &imageIn, &cachedImage
		}
		u, _ = Bound(u)
		price = max(price, 1) % (money.MaxAllowanceMicroUSD + 1)
		c, err := CostOf(u, PricedAt{Price: Price{InputPerMillion: price, OutputPerMillion: price, CachedInputPerMillion: price, AudioPerMinute: price,
			AudioInputPerMillion: price/2 + 1, AudioOutputPerMillion: price / 3, CachedAudioInputPerMillion: price / 5,
			ImageInputPerMillion: price/4 + 1, CachedImageInputPerMillion: price / 7}, Source: PriceFallback})
		if err != nil {
			t.Fatalf("CostOf(%+v): %v", u, err)
		}
		if c.MicroUSD < 0 || c.MicroUSD > money.MaxAllowanceMicroUSD {
			t.Fatalf("cost %d", c.MicroUSD)
		}
		if u.UpstreamCost == nil && (u.InputTokens > 0 || u.OutputTokens > 0 || u.AudioInputMillis > 0) && price > 0 && c.MicroUSD == 0 {
			t.Fatalf("tokens %+v charged 0", u)
		}
	})
}

func TestAdmit(t *testing.T) {
	cases := []struct {
		name          string
		capture       bool
		row, snapshot int64
		want          Admission
	}{
		{"no row yet, snapshot 0", true, 0, 0, Admitted},
		{"row created by first use, snapshot 0: same epoch", true, 1, 0, Admitted},
		{"current", true, 3, 3, Admitted},
		{"suspended", false, 2, 2, CaptureSuspended},
		{"older epoch", true, 3, 2, EpochChanged},
		{"before tracking, after a fence", true, 2, 0, EpochChanged},
	}
	for _, c := range cases {
		if got := Admit(c.capture, c.row, c.snapshot); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	if NextFenceVersion(0) != 2 || NextFenceVersion(1) != 2 || NextFenceVersion(2) != 3 {
		t.Fatal("fence versions")
	}
}

// A fail-open admission without a mirror record has no version to compare: it is
// admitted whatever its instant in the member's first capture epoch (no row, or a row
// created by first use: its tracking_started_at is only when it was written), and
// compared with the start of the current epoch once an operator moved the fence.
func TestAdmitUnrecorded(t *testing.T) {
	began := time.Date(2026, 9, 14, 12, 0, 0, 0, time.UTC)
	before, after := began.Add(-time.Minute), began.Add(time.Minute)
	cases := []struct {
		name     string
		hasRow   bool
		capture  bool
		row      int64
		admitted time.Time
		want     Admission
	}{
		{"no row yet", false, true, 0, before, Admitted},
		{"row created by first use, admitted before it was written", true, true, FirstTrackingVersion, before, Admitted},
		{"row created by first use, admitted after", true, true, FirstTrackingVersion, after, Admitted},
		{"suspended", true, false, 2, after, CaptureSuspended},
		{"suspended, admitted before", true, false, 2, before, CaptureSuspended},
		{"resumed, admitted before the epoch began", true, true, 3, before, EpochChanged},
		{"resumed, admitted at the epoch's first instant", true, true, 3, began, Admitted},
		{"resumed, admitted in the epoch", true, true, 3, after, Admitted},
		{"fenced from no row, admitted before", true, true, NextFenceVersion(0), before, EpochChanged},
	}
	for _, c := range cases {
		if got := AdmitUnrecorded(c.hasRow, c.capture, c.row, began, c.admitted); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestParseSnapshot(t *testing.T) {
	now := time.Date(2026, 9, 15, 4, 59, 59, 999_000_000, time.UTC)
	good := func() *internalv1.Snapshot {
		s := &internalv1.Snapshot{Version: 2, AdmittedAtUnixMs: now.UnixMilli(), TrackingVersion: 1}
		for _, w := range window.Current(now) {
			s.Buckets = append(s.Buckets, &internalv1.SnapshotBucket{Timeframe: string(w.Timeframe), WindowStartUnixMs: w.Start.UnixMilli(),
				WindowEndUnixMs: w.End.UnixMilli(), BucketId: window.BucketID("org_a", "om_a", w.Timeframe, w.Start), PolicyId: "unlimited"})
		}
		return s
	}
	if s, err := ParseSnapshot(good(), "org_a", "om_a", now); err != nil || s.Buckets[0].WindowStart() != window.Of(window.Day, now).Start {
		t.Fatalf("good snapshot: %v", err)
	}
	for name, mutate := range map[string]func(*internalv1.Snapshot){
		"version 1":          func(s *internalv1.Snapshot) { s.Version = 1 },
		"two buckets":        func(s *internalv1.Snapshot) { s.Buckets = s.Buckets[:2] },
		"repeated timeframe": func(s *internalv1.Snapshot) { s.Buckets[1].Timeframe = "day" },
		"window after the admission": func(s *internalv1.Snapshot) {
			s.Buckets[0].WindowStartUnixMs += 86_400_000
			s.Buckets[0].WindowEndUnixMs += 86_400_000
		},
		"bucket id of another member": func(s *internalv1.Snapshot) {
			s.Buckets[2].BucketId = window.BucketID("org_a", "om_b", window.Month, time.UnixMilli(s.Buckets[2].WindowStartUnixMs))
		},
		"unlimited with a base":     func(s *internalv1.Snapshot) { s.Buckets[0].BaseMicroUsd = 5 },
		"admitted in the future":    func(s *internalv1.Snapshot) { s.AdmittedAtUnixMs = now.Add(time.Hour).UnixMilli() },
		"negative tracking version": func(s *internalv1.Snapshot) { s.TrackingVersion = -1 },
		"the unknown marker":        func(s *internalv1.Snapshot) { s.Buckets[1].PolicyId = UnknownPolicyID },
		"a NUL in a policy id":      func(s *internalv1.Snapshot) { s.Buckets[1].PolicyId = "ulp_\x00" },
	} {
		s := good()
		mutate(s)
		if _, err := ParseSnapshot(s, "org_a", "om_a", now); !errors.Is(err, ErrInvalidSnapshot) {
			t.Errorf("%s: accepted (%v)", name, err)
		}
	}
	if _, err := ParseSnapshot(nil, "org_a", "om_a", now); err == nil {
		t.Fatal("nil snapshot accepted")
	}

	// A fail-open admission without a mirror record: every bucket carries the marker,
	// tracking version 0; accepted only by ParseUnrecordedSnapshot.
	unrecorded := func() *internalv1.Snapshot {
		s := good()
		s.TrackingVersion = 0
		for _, b := range s.Buckets {
			b.PolicyId = UnknownPolicyID
		}
		return s
	}
	if _, err := ParseUnrecordedSnapshot(unrecorded(), "org_a", "om_a", now); err != nil {
		t.Fatalf("unrecorded snapshot: %v", err)
	}
	if _, err := ParseSnapshot(unrecorded(), "org_a", "om_a", now); !errors.Is(err, ErrInvalidSnapshot) {
		t.Fatalf("ParseSnapshot accepted the unknown marker: %v", err)
	}
	for name, mutate := range map[string]func(*internalv1.Snapshot){
		"an ordinary snapshot":   func(s *internalv1.Snapshot) { *s = *good(); s.TrackingVersion = 0 },
		"a tracking version":     func(s *internalv1.Snapshot) { s.TrackingVersion = 1 },
		"one bucket with a base": func(s *internalv1.Snapshot) { s.Buckets[0].BaseMicroUsd = 1 },
		"a revision":             func(s *internalv1.Snapshot) { s.Buckets[2].PolicyRevision = 1 },
		"a hard limit":           func(s *internalv1.Snapshot) { s.Buckets[1].HardLimit = true },
		"one unlimited bucket":   func(s *internalv1.Snapshot) { s.Buckets[1].PolicyId = UnlimitedPolicyID },
	} {
		s := unrecorded()
		mutate(s)
		if _, err := ParseUnrecordedSnapshot(s, "org_a", "om_a", now); !errors.Is(err, ErrInvalidSnapshot) {
			t.Errorf("unrecorded, %s: accepted (%v)", name, err)
		}
	}
}

// Settlement charges AdmissionBuckets instead of the stored snapshot's buckets, so every
// snapshot ParseSnapshot accepts must have exactly those windows and ids, in that
// order, whatever order the enforcer sent them in. Instants around the 05:00 UTC
// boundaries of days, weeks and months, and a spread of others.
func TestAdmissionBucketsAreTheAcceptedSnapshotsBuckets(t *testing.T) {
	instants := []time.Time{
		time.Date(2026, 9, 15, 4, 59, 59, 999_000_000, time.UTC),
		time.Date(2026, 9, 15, 5, 0, 0, 0, time.UTC),
		time.Date(2026, 11, 30, 23, 59, 59, 0, time.UTC),
		time.Date(2026, 12, 1, 4, 59, 59, 999_000_000, time.UTC),
		time.Date(2027, 1, 1, 5, 0, 0, 1_000_000, time.UTC),
		time.Date(2028, 2, 29, 12, 0, 0, 0, time.UTC),
	}
	for i := range 200 {
		instants = append(instants, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i)*(47*time.Hour+13*time.Minute+7*time.Millisecond)))
	}
	for _, at := range instants {
		p := &internalv1.Snapshot{Version: 2, AdmittedAtUnixMs: at.UnixMilli()}
		ws := window.Current(at)
		for _, k := range []int{2, 0, 1} { // not in timeframe order
			w := ws[k]
			p.Buckets = append(p.Buckets, &internalv1.SnapshotBucket{Timeframe: string(w.Timeframe), WindowStartUnixMs: w.Start.UnixMilli(),
				WindowEndUnixMs: w.End.UnixMilli(), BucketId: window.BucketID("org_a", "om_a", w.Timeframe, w.Start), PolicyId: "pol_x",
				PolicyRevision: 3, BaseMicroUsd: 1_000_000, HardLimit: true})
		}
		s, err := ParseSnapshot(p, "org_a", "om_a", at)
		if err != nil {
			t.Fatalf("%s: %v", at, err)
		}
		derived := AdmissionBuckets("org_a", "om_a", s.AdmittedAt())
		for i, b := range s.Buckets {
			d := derived[i]
			if d.Timeframe != b.Timeframe || d.BucketID != b.BucketID || d.WindowStartUnixMs != b.WindowStartUnixMs || d.WindowEndUnixMs != b.WindowEndUnixMs {
				t.Fatalf("%s bucket %d: derived %+v, snapshot %+v", at, i, d, b)
			}
		}
	}
}

// costCase is a usage, a price and the micro-USD CostOf must charge for them.
type costCase struct {
	name string
	u    Usage
	p    PricedAt
	cost int64
}

// runCostCases runs each case as a subtest: CostOf must succeed and charge its cost.
func runCostCases(t *testing.T, cases []costCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := CostOf(c.u, c.p)
			if err != nil || got.MicroUSD != c.cost {
				t.Fatalf("CostOf = %+v %v; want %d", got, err, c.cost)
			}
		})
	}
}
