package pricecatalog

import (
	"math"
	"math/bits"
)

// Tier is the speed (service) tier a request ran at, where the provider charges more (or
// less) than the standard prices the catalog holds (and an organization's own prices,
// which are standard ones too).
//
// Each provider names its tiers differently, and the catalog keeps one scale:
//
//   - Fast: OpenAI's "priority" processing, named "fast" since 2026-07-30 (GPT-5.6 and
//     older answer "priority" whichever name was asked, GPT-6 answers "fast"), 1.67 to
//     2.5 times the standard price by model; Anthropic's fast mode ("speed": "fast",
//     usage.speed in the answer), 2 or 6 times by model; Gemini's priority inference,
//     75% to 100% more; Amazon Bedrock's priority tier, a premium AWS does not state.
//   - Ultrafast: OpenAI's "ultrafast" (the Responses API, gpt-6-astra), 6 times.
//   - LatencyOptimized: Amazon Bedrock's latency-optimized inference
//     ("performanceConfig": {"latency": "optimized"}, a preview), a quarter more for every
//     model AWS sells it for (Nova Pro, Llama 3.1 70B, before them Claude 3.5 Haiku).
//     Cheaper than Fast: of two reports, Fast wins.
//
// One tier costs less than standard:
//
//   - Flex: OpenAI's "flex" processing (chat and Responses; "priced at Batch API rates",
//     half the standard price of every model that has it), Google's Flex PayGo on
//     Vertex AI (usageMetadata.trafficType ON_DEMAND_FLEX) and the Gemini API's flex
//     inference (usageMetadata.serviceTier "flex"), both "a 50% discount". Charged only
//     where the answer says it ran at flex (the request asking it reserves the standard
//     price). Amazon Bedrock's flex tier is Standard: AWS publishes "a discounted
//     standard rate" without its ratio.
//
// Other tiers below standard (batch) are charged as standard: never below the real
// price. A tier whose answer does not say it (Anthropic's Priority Tier, a capacity
// commitment with no per-token surcharge) is Standard.
type Tier int8

// The tiers, cheapest first: of two reports of one request, the larger wins (Flex,
// below Standard, the zero value, only where no report says more than flex).
const (
	Flex Tier = iota - 1
	Standard
	LatencyOptimized
	Fast
	Ultrafast
)

// String is the tier's name on the wire (the settle API's serviceTier, a receipt's
// service_tier): "" for Standard.
func (t Tier) String() string {
	switch t {
	case Flex:
		return "flex"
	case Fast:
		return "fast"
	case Ultrafast:
		return "ultrafast"
	case LatencyOptimized:
		return "latency_optimized"
	}
	return ""
}

// TierName is a name a provider gives a tier.
type TierName struct {
	Name string
	Tier Tier
}

// TierNames maps every name a provider gives a dear tier in its service_tier (OpenAI's,
// Gemini's, Bedrock's), in a request (the enforcer's worst case) or an answer
// (settlement), to its Tier. Names are matched exactly, as the providers send them.
// Anthropic's usage.service_tier "priority" is not looked up here: its Priority Tier has
// no per-token surcharge (its fast mode is its speed, SpeedNames).
var TierNames = [...]TierName{{"priority", Fast}, {"fast", Fast}, {"ultrafast", Ultrafast}}

// FlexNames are the names OpenAI (service_tier), the Gemini API (usageMetadata.serviceTier)
// and Vertex AI (usageMetadata.trafficType) give, in an answer, the tier that costs less
// than standard. A request's asking for it is not looked up: its worst case is the
// standard price, and only the answer's say is charged. Not Amazon Bedrock's "flex"
// (its discount is not published).
var FlexNames = [...]TierName{{"flex", Flex}, {"ON_DEMAND_FLEX", Flex}}

// SpeedNames are the names of Anthropic's speed ("speed": "fast", usage.speed) that
// cost more than the standard prices.
var SpeedNames = [...]TierName{{"fast", Fast}}

// LatencyNames are the names of Amazon Bedrock's performanceConfig.latency (a request's,
// a Converse answer's, InvokeModel's X-Amzn-Bedrock-PerformanceConfig-Latency header)
// that cost more than the standard prices. The answer's is the one charged: Bedrock
// serves a request at standard latency, and its price, once the model's quota of
// optimized requests is spent.
var LatencyNames = [...]TierName{{"optimized", LatencyOptimized}}

// TierNamed is the tier names gives name (TierNames, SpeedNames, LatencyNames),
// Standard for any other name.
func TierNamed(names []TierName, name string) Tier {
	for _, n := range names {
		if name == n.Name {
			return n.Tier
		}
	}
	return Standard
}

// ParseTier reads a tier's wire name (Tier.String): ok is false for an unknown one.
func ParseTier(name string) (Tier, bool) {
	for _, t := range [...]Tier{Standard, Flex, LatencyOptimized, Fast, Ultrafast} {
		if t.String() == name {
			return t, true
		}
	}
	return Standard, false
}

// maxTierPercent bounds a catalog entry's tier percent: ten times the standard price,
// above any tier sold.
const maxTierPercent = 1000

// DefaultTierPercent is what a tier costs, in percent of the standard price, for a
// model whose entry does not say (or that no entry prices): what it costs nearly every
// model that has it. Fast: 200 (OpenAI's fast tier of every model since GPT-5 but
// GPT-5.5, Anthropic's fast mode from Opus 5 on, Google's priority inference at most);
// the models that cost more (Anthropic's Opus 4.6 to 4.8, six times; GPT-5.5, 2.5 times)
// have their own percent in their entries. Ultrafast: 600 (OpenAI's). LatencyOptimized:
// 125, what it costs every model sold at it (AWS's price list on 2026-11-29: Nova Pro
// 1.00 / 4.00 USD per million against 0.80 / 3.20, Llama 3.1 70B alike; Claude 3.5
// Haiku's, retired, was 1.00 / 5.00 against 0.80 / 4.00); an entry field can come with
// the first model that differs. Flex: 50, what OpenAI ("Batch API rates") and Google
// (Vertex AI's Flex PayGo, the Gemini API's flex inference: "a 50% discount") charge
// every model they sell it for.
func DefaultTierPercent(t Tier) int64 {
	switch t {
	case Flex:
		return 50
	case LatencyOptimized:
		return 125
	case Fast:
		return 200
	case Ultrafast:
		return 600
	}
	return 100
}

// TierPercents are what a model's tokens cost at the dearer speed tiers, in percent of
// its standard price; 0 where the catalog does not say, and the tier's default applies
// (DefaultTierPercent). A catalog entry has them (Entry), and so does the price
// settlement charges (an organization's own price of a model takes its entry's).
type TierPercents struct {
	FastPercent, UltrafastPercent int64
}

// TierPercent is what a request run at t costs, in percent of the standard price: the
// model's own where the catalog gives it, else the tier's default.
func (p TierPercents) TierPercent(t Tier) int64 {
	switch {
	case t == Fast && p.FastPercent > 0:
		return p.FastPercent
	case t == Ultrafast && p.UltrafastPercent > 0:
		return p.UltrafastPercent
	}
	return DefaultTierPercent(t)
}

// AtPercent is cost times percent / 100, rounded up to the micro-USD (a cost above 0 stays
// above 0: Flex's 50 of 1 micro-USD is 1); ok is false when it does not fit in int64. A speed tier's price (Entry.TierPercent) and a regional
// endpoint's premium (RegionalPremium) are both applied so.
func AtPercent(cost, percent int64) (int64, bool) {
	if percent == 100 || cost <= 0 || percent <= 0 {
		return cost, true
	}
	hi, lo := bits.Mul64(uint64(cost), uint64(percent))
	lo, carry := bits.Add64(lo, 99, 0) // rounded up
	hi += carry
	if hi >= 100 { // the quotient needs more than 64 bits
		return 0, false
	}
	q, _ := bits.Div64(hi, lo, 100)
	if q > math.MaxInt64 {
		return 0, false
	}
	return int64(q), true
}
