package accounting

import (
	"errors"
	"math"
	"math/bits"

	"github.com/tollgate-dev/tollgate/pkg/money"
	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
	"github.com/tollgate-dev/tollgate/pkg/saturate"
)

// Cost sources, as receipts store them.
const (
	// SourceUpstream: the upstream reported the cost.
	SourceUpstream = "upstream"
	// SourceCatalogEstimate: tokens priced at the organization's or the shipped
	// catalog's price of the model.
	SourceCatalogEstimate = "catalog_estimate"
	// SourceFallback: tokens priced at the organization's fallback price because nobody
	// priced the model. Such a receipt is unpriced (counted in unpricedRequests) and
	// still charged.
	SourceFallback = "fallback"
	// SourceUnknown: nothing to price (no cost, no tokens): cost 0.
	SourceUnknown = "unknown"
	// SourceReconciled: an operator's reviewed reconciliation proved the charge of a
	// quarantined settlement (package reconcile). Such a receipt is final and priced.
	SourceReconciled = "reconciled"
)

// Cost bases: how a receipt's cost was known.
const (
	BasisUpstreamCost  = "upstream_cost"
	BasisReportedUsage = "reported_usage"
	BasisEstimate      = "estimate"
	BasisNone          = "none"
	// BasisReviewed: the cost is the charge an operator proved in a reviewed
	// reconciliation.
	BasisReviewed = "reviewed"
)

// Price sources: which price the tokens were priced at ("" when none was used).
const (
	PriceOrganization = "organization"
	PriceCatalog      = "catalog"
	PriceFallback     = "fallback"
	PriceNone         = ""
)

// Price is the price of one model, in micro-USD per million tokens.
type Price struct {
	InputPerMillion       int64
	OutputPerMillion      int64
	CachedInputPerMillion int64
	// CacheWritePerMillion prices input tokens written to a prompt cache; nil: they are
	// priced as input.
	CacheWritePerMillion *int64
	// AudioPerMinute prices a minute of input audio billed by duration, in micro-USD
	// (pricecatalog.AudioDuration); the ledger fills it from the catalog whatever priced
	// the tokens, since organizations price tokens only.
	AudioPerMinute int64
	// PerPage prices one page an OCR model read, in micro-USD (pricecatalog.OCR); filled
	// by the ledger from the catalog like AudioPerMinute.
	PerPage int64
	// Container prices the minutes of the containers a request's code tools ran in
	// (Usage.ContainerMinutes), per hour (pricecatalog.Container.Cost): the catalog's
	// price of the container kind the settlement names, else its dearest, filled by the
	// ledger like AudioPerMinute whatever priced the tokens. Only its PerHour is read.
	Container pricecatalog.Container
	// Guardrails price what Amazon Bedrock's guardrails assessed (Usage.GuardrailUnits):
	// the catalog's prices (pricecatalog.Catalog.Guardrails), filled by the ledger like
	// Container whatever priced the tokens, since a guardrail is billed apart from the
	// model it guards.
	Guardrails pricecatalog.GuardrailPrices
	// WebSearch prices one web search a provider's server tool made, in micro-USD: the
	// catalog's price for the model's provider, filled by the ledger like
	// AudioPerMinute.
	WebSearch int64
	// WebSearchOnce: WebSearch is the price of all of a request's searches, charged
	// once when it made any (a model billed per grounded prompt:
	// pricecatalog.Entry.WebSearchPerPrompt).
	WebSearchOnce bool
	// FileSearch prices one call of a provider's file search tool, in micro-USD: the
	// catalog's price for the model's provider, filled by the ledger like WebSearch.
	FileSearch int64
	// MapsGrounding prices one prompt grounded with a provider's maps (Google's grounding
	// with Google Maps), in micro-USD: the catalog's price for the model's provider,
	// filled by the ledger like WebSearch.
	MapsGrounding int64
	// ImageOutputPerMillion prices the output tokens of the images of OpenAI's image
	// generation tool (Usage.ImageOutputTokens): the catalog's output price of the image
	// model the tool ran, filled by the ledger like WebSearch whatever priced the tokens.
	ImageOutputPerMillion int64
	// ImageTokensPerCall is what one call of the image generation tool is charged when
	// the usage counts calls and no tokens (Usage.ImageTokensAt): the dearest image of its
	// image model (pricecatalog.DearestImageTokensOf), filled by the ledger with
	// ImageOutputPerMillion; 0 reads as pricecatalog.DearestImageTokens.
	ImageTokensPerCall int64
	// ImageToolInputPerMillion and ImageToolCachedInputPerMillion price the image model's
	// input (Usage.ImageToolInputTokens and its cached part): the catalog's input and
	// cached input prices of the image model the tool ran, filled by the ledger with
	// ImageOutputPerMillion whatever priced the tokens.
	ImageToolInputPerMillion       int64
	ImageToolCachedInputPerMillion int64
	// Advisor prices the sub-inferences of Anthropic's advisor tool
	// (Usage.AdvisorInputTokens and the rest) as a response's tokens: the catalog's price
	// of the advisor model, filled by the ledger like WebSearch whatever priced the
	// tokens; nil prices them at this price, the response's model's (a settlement that
	// does not name the advisor model). Only its token prices are read (CatalogCost).
	Advisor *Price
	// AudioInputPerMillion and AudioOutputPerMillion price audio tokens apart from text
	// tokens (pricecatalog.Price.AudioInputPerMillion); 0: audio tokens are priced as
	// the rest of their class. Only a catalog entry has them: an organization's price
	// prices a model's tokens whatever their modality, and the fallback prices (the
	// catalog's highest already counts the audio prices in its classes) have none.
	AudioInputPerMillion  int64
	AudioOutputPerMillion int64
	// CachedAudioInputPerMillion prices cached audio tokens apart from cached text
	// tokens (pricecatalog.Price.CachedAudioInputPerMillion); 0: cached input has one
	// price. Only a catalog entry has it, like the audio prices.
	CachedAudioInputPerMillion int64
	// ImageInputPerMillion and CachedImageInputPerMillion price image input tokens, and
	// cached ones, apart from text tokens (pricecatalog.Price.ImageInputPerMillion: the
	// Realtime API's images cost more than its text); 0: image tokens are priced as the
	// rest of their class. Only a catalog entry has them, like the audio prices (the
	// catalog's highest counts them in its input and cached input classes).
	ImageInputPerMillion       int64
	CachedImageInputPerMillion int64
	// RegionalPremiumPercent is what the model's tokens cost more on a cloud's regional
	// endpoint (pricecatalog.Entry.RegionalPremiumPercent), charged when the usage says
	// the request went to one (Usage.Regional). Only a catalog entry has it: an
	// organization's own price of a model is what the organization pays for it.
	RegionalPremiumPercent int64
	// TierPercents are what the model's tokens cost at a dearer speed tier, in percent
	// of this price, charged at the tier the usage says the request ran at (Usage.Tier).
	// An organization's own price of a model, which is a standard one, takes them from
	// the model's catalog entry.
	pricecatalog.TierPercents
}

// ImageToolInputPrice is the image model's input as a price of its own, for
// ImageToolInputUsage: its input and cached input prices.
func (p Price) ImageToolInputPrice() Price {
	return Price{InputPerMillion: p.ImageToolInputPerMillion, CachedInputPerMillion: p.ImageToolCachedInputPerMillion}
}

// CacheWrite is the price cache writes are charged at.
func (p Price) CacheWrite() int64 {
	if p.CacheWritePerMillion != nil {
		return *p.CacheWritePerMillion
	}
	return p.InputPerMillion
}

// CacheWrite1h is the price of cache writes made for an hour
// (pricecatalog.OneHourCacheWrite).
func (p Price) CacheWrite1h() int64 {
	return pricecatalog.OneHourCacheWrite(p.InputPerMillion, p.CacheWrite())
}

// PricedAt is the price found for a request's model and where it came from
// (PriceOrganization, PriceCatalog or PriceFallback).
type PricedAt struct {
	Price  Price
	Source string
}

// Usage is what a response reported (or the enforcer estimated).
type Usage struct {
	InputTokens  int64
	OutputTokens int64
	// CachedInputTokens and CacheWriteTokens are parts of InputTokens: read from and
	// written to a prompt cache; CacheWrite1hTokens is the part of CacheWriteTokens
	// written for an hour (Price.CacheWrite1h).
	CachedInputTokens  int64
	CacheWriteTokens   int64
	CacheWrite1hTokens int64
	// AudioInputMillis is input audio the upstream billed by duration (whisper-1's
	// usage {"type": "duration", "seconds"}), in milliseconds: priced per minute
	// (Price.AudioPerMinute), on top of the tokens.
	AudioInputMillis int64
	// WebSearchRequests counts the web searches a provider's search tool made (Anthropic's,
	// OpenAI's, Google's grounding queries), priced at Price.WebSearch each (or once:
	// Price.WebSearchOnce), on top of the tokens.
	WebSearchRequests int64
	// FileSearchCalls counts the calls of a provider's file search tool (OpenAI's
	// Responses API file_search_call items), priced at Price.FileSearch each, on top of
	// the tokens.
	FileSearchCalls int64
	// MapsGroundedPrompts counts the prompts grounded with a provider's maps (Gemini's
	// googleMaps tool: 1 when the answer held a maps source, however many), priced at
	// Price.MapsGrounding each, on top of the tokens and of any web searches.
	MapsGroundedPrompts int64
	// OCRPages counts the pages an OCR model read (Mistral's usage_info.pages_processed),
	// priced at Price.PerPage each, on top of the tokens (which an OCR model prices at 0).
	OCRPages int64
	// ContainerMinutes are the minutes of the containers the request's code tools ran in
	// (OpenAI's code interpreter and hosted shell, Anthropic's code execution tool) that no
	// earlier request was charged, billed by the time a container lives: priced at
	// Price.Container's price per hour, rounded up on their own, on top of the tokens.
	// Which kind of container they are is the ledger's to price (Price.Container).
	ContainerMinutes int64
	// GuardrailUnits are what the request's Amazon Bedrock guardrails assessed, by billed
	// policy (text units of each text policy, images of the image content filter), and
	// the text units of the detect-only guardrail checks (InvokeGuardrailChecks), by
	// check: priced at Price.Guardrails (pricecatalog.GuardrailPrices.Cost, rounded up
	// once for all of them), on top of the tokens. A request its guardrail blocked before
	// the model ran counts them and no token; so does a call of the checks, which names
	// no model.
	GuardrailUnits pricecatalog.GuardrailUnits
	// ImageGenerationCalls counts the calls of OpenAI's image generation tool (Responses
	// API image_generation_call items), each an image billed as its image model's
	// output tokens apart from the response's usage: ImageOutputTokens in all, priced at
	// Price.ImageOutputPerMillion on top of the tokens. Calls with no tokens are charged
	// their image model's dearest image each (ImageTokensAt).
	ImageGenerationCalls int64
	ImageOutputTokens    int64
	// ImageToolInputTokens is the image model's input for those calls, as the upstream
	// reported it (OpenAI's tool_usage.image_gen.input_tokens: the prompt the response's
	// model wrote for it and any image it edits), its cache reads included, which
	// ImageToolCachedInputTokens is the part of: priced as a response's input at the
	// image model's input prices (ImageToolInputUsage at Price.ImageToolInputPrice), on
	// top of the tokens. 0 when it was not reported: nothing is guessed for it (a few
	// hundred tokens a call, which an answer that lists the calls reports).
	ImageToolInputTokens       int64
	ImageToolCachedInputTokens int64
	// AdvisorInputTokens, AdvisorOutputTokens, AdvisorCachedInputTokens and
	// AdvisorCacheWriteTokens are the counts of the sub-inferences of Anthropic's advisor
	// tool (the response's usage.iterations[] advisor_message entries, summed), left out
	// of the counts above and billed at the advisor model's prices: priced as a response
	// of their own at Price.Advisor (AdvisorUsage), on top of the tokens. As for the
	// response, AdvisorInputTokens includes the cache reads and writes, the two parts
	// after it; AdvisorCacheWrite1hTokens is the part of the writes made for an hour (an
	// advisor tool whose caching's ttl is "1h", priced at Price.CacheWrite1h), the rest
	// five-minute ones (priced at the cache-write price).
	AdvisorInputTokens        int64
	AdvisorOutputTokens       int64
	AdvisorCachedInputTokens  int64
	AdvisorCacheWriteTokens   int64
	AdvisorCacheWrite1hTokens int64
	// AudioInputTokens and AudioOutputTokens are the audio parts of InputTokens and
	// OutputTokens where the upstream reported them (OpenAI's audio_tokens, Gemini's
	// AUDIO modality); nil when it did not (or the counts are estimates): the split is
	// unknown, and a price with audio prices charges all of the class at the dearer
	// (CatalogCost). They are parts, so Basis does not look at them.
	AudioInputTokens  *int64
	AudioOutputTokens *int64
	// CachedAudioInputTokens is the audio part of CachedInputTokens where the upstream
	// reported it (Gemini's cacheTokensDetails, the Realtime API's
	// cached_tokens_details.audio_tokens), and so also part of AudioInputTokens; nil
	// when it did not.
	CachedAudioInputTokens *int64
	// ImageInputTokens is the image part of InputTokens where the upstream reported it
	// (the Realtime API's input_token_details.image_tokens), cached ones included, and
	// CachedImageInputTokens the image part of CachedInputTokens
	// (cached_tokens_details.image_tokens); nil when it did not: a price with image
	// prices then charges the tokens the reported parts leave at the dearer of text and
	// image (CatalogCost). Parts, like the audio ones, so Basis does not look at them.
	ImageInputTokens       *int64
	CachedImageInputTokens *int64
	// UpstreamCost is the cost the upstream reported, when it did.
	UpstreamCost *int64
	// Estimated: some counts were estimated by the enforcer from the bytes it saw.
	Estimated bool
	// Tier is the speed tier the upstream ran the request at: priced tokens cost
	// Price.TierPercent of their price.
	Tier pricecatalog.Tier
	// Regional: the request went to a cloud's regional endpoint (Amazon Bedrock, Google
	// Vertex AI), where a price with a regional premium (Price.RegionalPremiumPercent)
	// costs that much more.
	Regional bool
}

// ImageTokensAt are the image output tokens u is charged: ImageOutputTokens, else, when
// it counts calls and no tokens, perCall a call (Price.ImageTokensPerCall; 0 reads as
// pricecatalog.DearestImageTokens), saturating at MaxInt64, which CostOf caps: a call is
// never free for want of its image's size.
func (u Usage) ImageTokensAt(perCall int64) int64 {
	if u.ImageOutputTokens != 0 || u.ImageGenerationCalls <= 0 {
		return u.ImageOutputTokens
	}
	if perCall <= 0 {
		perCall = pricecatalog.DearestImageTokens
	}
	if u.ImageGenerationCalls > math.MaxInt64/perCall {
		return math.MaxInt64
	}
	return u.ImageGenerationCalls * perCall
}

// ImageToolInputUsage is the image model's input as a response's usage of its own
// (input, cache reads included, and the reads), which CostOf prices with CatalogCost at
// the image model's input prices (Price.ImageToolInputPrice).
func (u Usage) ImageToolInputUsage() Usage {
	return Usage{InputTokens: u.ImageToolInputTokens, CachedInputTokens: u.ImageToolCachedInputTokens}
}

// PromptTokens is the size of u's prompt, by which a model with a long-context price
// (pricecatalog.Entry.ForInput) picks the price of the whole request: its input count,
// which includes its cache reads and writes, or, when those parts add up to more (counts
// that disagree: a reporter that sends Anthropic's own input_tokens, which leaves them
// out), the parts, as CatalogCost charges them. A prompt is never taken for shorter than
// the tokens it is charged (until 2026-12-07 the input count alone chose the tier, and
// such a prompt of 240,000 cached tokens paid the shorter prompts' price). Negative
// counts (Bound reads them as 0) count as 0.
func (u Usage) PromptTokens() int64 {
	return max(u.InputTokens, saturate.Add(max(u.CachedInputTokens, 0), max(u.CacheWriteTokens, 0)))
}

// HasImageTool tells whether u counts any of the image generation tool's calls, images
// or input.
func (u Usage) HasImageTool() bool {
	return u.ImageGenerationCalls != 0 || u.ImageOutputTokens != 0 || u.ImageToolInputTokens != 0 || u.ImageToolCachedInputTokens != 0
}

// HasAdvisor tells whether u counts any of the advisor's tokens.
func (u Usage) HasAdvisor() bool {
	return u.AdvisorInputTokens != 0 || u.AdvisorOutputTokens != 0 || u.AdvisorCachedInputTokens != 0 || u.AdvisorCacheWriteTokens != 0
}

// AdvisorUsage is the usage of the advisor's sub-inferences as a response of their own:
// their input (cache reads and writes included), output, cache reads and writes (those
// made for an hour among them), which
// CostOf prices at Price.Advisor with CatalogCost like the response's tokens.
func (u Usage) AdvisorUsage() Usage {
	return Usage{InputTokens: u.AdvisorInputTokens, OutputTokens: u.AdvisorOutputTokens,
		CachedInputTokens: u.AdvisorCachedInputTokens, CacheWriteTokens: u.AdvisorCacheWriteTokens,
		CacheWrite1hTokens: u.AdvisorCacheWrite1hTokens}
}

// Basis says how a cost for u is known: an upstream cost; else nothing when no token
// was counted; else an estimate when the enforcer estimated counts; else reported usage.
func (u Usage) Basis() string {
	switch {
	case u.UpstreamCost != nil:
		return BasisUpstreamCost
	case u.InputTokens == 0 && u.OutputTokens == 0 && u.CachedInputTokens == 0 && u.CacheWriteTokens == 0 && u.AudioInputMillis == 0 &&
		u.WebSearchRequests == 0 && u.FileSearchCalls == 0 && u.MapsGroundedPrompts == 0 && u.OCRPages == 0 && u.ContainerMinutes == 0 &&
		u.GuardrailUnits.IsZero() && !u.HasImageTool() && !u.HasAdvisor():
		return BasisNone
	case u.Estimated:
		return BasisEstimate
	}
	return BasisReportedUsage
}

// GuardrailOnly tells whether u counts an Amazon Bedrock guardrail's units and nothing
// else, no upstream cost either: ApplyGuardrail (a guardrail called on its own, no
// model), InvokeGuardrailChecks (the detect-only checks, no guardrail and no model), or a
// prompt a guardrail refused before the model ran. The catalog's guardrail
// prices price all of it, whatever the model's token price would have been.
func (u Usage) GuardrailOnly() bool {
	rest := u
	rest.GuardrailUnits = pricecatalog.GuardrailUnits{}
	return !u.GuardrailUnits.IsZero() && u.UpstreamCost == nil && rest.Basis() == BasisNone
}

// NeedsPrice tells whether pricing u needs a price (it has tokens and no upstream cost).
func (u Usage) NeedsPrice() bool {
	b := u.Basis()
	return b == BasisReportedUsage || b == BasisEstimate
}

// ErrCostOverflow: the cost does not fit in int64 micro-USD.
var ErrCostOverflow = errors.New("accounting: cost overflows int64 micro-USD")

// ErrBadUsage: a token count or an upstream cost is negative or beyond the bounds.
var ErrBadUsage = errors.New("accounting: token counts and costs must be non-negative, and a cost at most 4503599627370495")

// Cost is a priced request.
type Cost struct {
	MicroUSD    int64
	Source      string
	Basis       string
	PriceSource string
	// Capped: the priced cost was above money.MaxAllowanceMicroUSD (or beyond int64)
	// and was capped there.
	Capped bool
}

// CostOf prices a request whose usage was bounded (Bound): an upstream-reported cost
// wins; else, with nothing counted, the cost is unknown (0); else the tokens times p, the
// price found for the model (SourceFallback when p is the fallback price, else
// SourceCatalogEstimate), plus its audio by the minute (AudioCost), at the percent of its
// speed tier (Price.TierPercent, rounded up) when it ran at a dearer one, with the
// price's regional premium when it went to a regional endpoint
// (pricecatalog.RegionalPremium), plus its web searches, file search calls,
// maps-grounded prompts and OCR pages apiece, its container minutes at the container's
// price per hour (pricecatalog.Container.Cost), its guardrails' units at their policies'
// prices (pricecatalog.GuardrailPrices.Cost), its image generation calls' output tokens
// at the image model's output price (ImageCost of ImageTokensAt) and their input at its
// input prices (CatalogCost of ImageToolInputUsage at Price.ImageToolInputPrice), and
// its advisor's sub-inferences at the advisor model's prices (CatalogCost of
// AdvisorUsage at Price.Advisor), each rounded up on its own, none of them multiplied
// by the tier or the regional premium, which price the response's own model. A cost above money.MaxAllowanceMicroUSD is capped there and
// flagged: a request is never left uncharged because its numbers are absurd.
func CostOf(u Usage, p PricedAt) (Cost, error) {
	if u.InputTokens < 0 || u.OutputTokens < 0 || u.CachedInputTokens < 0 || u.CacheWriteTokens < 0 || u.CacheWrite1hTokens < 0 ||
		u.AudioInputMillis < 0 || u.WebSearchRequests < 0 || u.FileSearchCalls < 0 || u.MapsGroundedPrompts < 0 || u.OCRPages < 0 ||
		u.ContainerMinutes < 0 || p.Price.Container.PerHour < 0 || !u.GuardrailUnits.Valid() || !p.Price.Guardrails.Valid() ||
		u.ImageGenerationCalls < 0 || u.ImageOutputTokens < 0 || u.ImageToolInputTokens < 0 || u.ImageToolCachedInputTokens < 0 ||
		u.AdvisorInputTokens < 0 || u.AdvisorOutputTokens < 0 ||
		u.AdvisorCachedInputTokens < 0 || u.AdvisorCacheWriteTokens < 0 || u.AdvisorCacheWrite1hTokens < 0 || negative(u.AudioInputTokens) || negative(u.AudioOutputTokens) {
		return Cost{}, ErrBadUsage
	}
	c := Cost{Basis: u.Basis()}
	switch c.Basis {
	case BasisUpstreamCost:
		if *u.UpstreamCost < 0 || *u.UpstreamCost > money.MaxAllowanceMicroUSD {
			return Cost{}, ErrBadUsage
		}
		c.MicroUSD, c.Source = *u.UpstreamCost, SourceUpstream
		return c, nil
	case BasisNone:
		c.Source = SourceUnknown
		return c, nil
	}
	if p.Source != PriceOrganization && p.Source != PriceCatalog && p.Source != PriceFallback {
		return Cost{}, errors.New("accounting: a price source is required to price tokens")
	}
	c.PriceSource, c.Source = p.Source, SourceCatalogEstimate
	if p.Source == PriceFallback {
		c.Source = SourceFallback
	}
	v, err := CatalogCost(u, p.Price)
	if err == nil && u.AudioInputMillis > 0 {
		v, err = addCost(v, func() (int64, error) { return AudioCost(u.AudioInputMillis, p.Price.AudioPerMinute) })
	}
	if err == nil && u.Tier != pricecatalog.Standard {
		var ok bool
		if v, ok = pricecatalog.AtPercent(v, p.Price.TierPercent(u.Tier)); !ok {
			err = ErrCostOverflow
		}
	}
	if err == nil && u.Regional {
		var ok bool
		if v, ok = pricecatalog.RegionalPremium(v, p.Price.RegionalPremiumPercent); !ok {
			err = ErrCostOverflow
		}
	}
	// Searches, file search calls, maps-grounded prompts and OCR pages are priced apiece
	// (searches of a model billed per grounded prompt once: WebSearchOnce), after the
	// service tier: it multiplies tokens. A prompt grounded with both Google Search and
	// Google Maps pays both, as Google bills them apart.
	searches := u.WebSearchRequests
	if p.Price.WebSearchOnce {
		searches = min(searches, 1)
	}
	for _, calls := range [...]struct{ n, price int64 }{{searches, p.Price.WebSearch}, {u.FileSearchCalls, p.Price.FileSearch},
		{u.MapsGroundedPrompts, p.Price.MapsGrounding}, {u.OCRPages, p.Price.PerPage}} {
		if err == nil && calls.n > 0 {
			v, err = addApiece(v, calls.n, calls.price)
		}
	}
	// The containers' minutes, at their price per hour rounded up on their own, after
	// the tier and the regional premium as well: a container is billed by its time,
	// whatever tier or endpoint priced the tokens.
	if err == nil && u.ContainerMinutes > 0 {
		v, err = addCost(v, func() (int64, error) {
			if c, ok := p.Price.Container.Cost(u.ContainerMinutes); ok {
				return c, nil
			}
			return 0, ErrCostOverflow
		})
	}
	// The guardrails' units, at their policies' prices rounded up once on their own,
	// after the tier and the regional premium as well: a guardrail is billed apart from
	// the model it guards, whatever tier or endpoint priced the tokens.
	if g := u.GuardrailUnits; err == nil && !g.IsZero() {
		v, err = addCost(v, func() (int64, error) {
			if c, ok := p.Price.Guardrails.Cost(g); ok {
				return c, nil
			}
			return 0, ErrCostOverflow
		})
	}
	// The images of the image generation tool, at their image model's output price,
	// after the tier and the regional premium as well.
	if tokens := u.ImageTokensAt(p.Price.ImageTokensPerCall); err == nil && tokens > 0 {
		v, err = addCost(v, func() (int64, error) { return ImageCost(tokens, p.Price.ImageOutputPerMillion) })
	}
	// The image model's input, priced as a response's input of the image model (its
	// uncached input and cache reads each at its price, rounded up on their own), after
	// the tier and the regional premium as well.
	if in := u.ImageToolInputUsage(); err == nil && (in.InputTokens > 0 || in.CachedInputTokens > 0) {
		v, err = addCost(v, func() (int64, error) { return CatalogCost(in, p.Price.ImageToolInputPrice()) })
	}
	// The advisor's sub-inferences, priced as a response of the advisor model (its
	// uncached input, cache reads, cache writes and output each at its price), after
	// the tier and the regional premium as well.
	if err == nil && u.HasAdvisor() {
		advisor := p.Price
		if p.Price.Advisor != nil {
			advisor = *p.Price.Advisor
		}
		v, err = addCost(v, func() (int64, error) { return CatalogCost(u.AdvisorUsage(), advisor) })
	}
	switch {
	case errors.Is(err, ErrCostOverflow) || err == nil && v > money.MaxAllowanceMicroUSD:
		v, c.Capped = money.MaxAllowanceMicroUSD, true
	case err != nil:
		return Cost{}, err
	}
	c.MicroUSD = v
	return c, nil
}

// addCost adds the cost part computes to v; an error of part, or a sum beyond int64
// (ErrCostOverflow), is returned with v unchanged.
func addCost(v int64, part func() (int64, error)) (int64, error) {
	w, err := part()
	switch {
	case err != nil:
		return v, err
	case v > math.MaxInt64-w:
		return v, ErrCostOverflow
	}
	return v + w, nil
}

// AudioCost is ceil(millis * perMinute / 60000): input audio billed by duration, priced
// per minute, rounded up to the micro-USD like CatalogCost (each rounded on its own, so a
// request with both is charged at most 1 micro-USD more than one sum would). Computed in
// 128 bits; only a result beyond int64 is an error.
func AudioCost(millis, perMinute int64) (int64, error) {
	return mulDivUp(millis, perMinute, 60_000)
}

// ImageCost is ceil(tokens * perMillion / 1e6): the output tokens of the images of
// OpenAI's image generation tool at their image model's output price, rounded up to the
// micro-USD on their own, like AudioCost. Computed in 128 bits; only a result beyond
// int64 is an error.
func ImageCost(tokens, perMillion int64) (int64, error) {
	return mulDivUp(tokens, perMillion, 1_000_000)
}

// mulDivUp is ceil(a * b / d) for d above 1, computed in 128 bits: ErrBadUsage
// for a negative a or b, ErrCostOverflow for a result beyond int64.
func mulDivUp(a, b int64, d uint64) (int64, error) {
	if a < 0 || b < 0 {
		return 0, ErrBadUsage
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= d {
		return 0, ErrCostOverflow
	}
	q, r := bits.Div64(hi, lo, d)
	if r != 0 {
		q++ // q < 2^64 - 1: the product is below 2^126
	}
	if q > math.MaxInt64 {
		return 0, ErrCostOverflow
	}
	return int64(q), nil
}

// CatalogCost is ceil((uncached * input + cached * cachedInput + written * cacheWrite +
// written1h * cacheWrite1h + output * outputPrice) / 1e6), where written1h is the part
// of the writes made for an hour (at most the writes) and written the rest, where cached
// and written are the parts of the input read from and written to a prompt cache and
// uncached is the rest. Input tokens include cached and written ones (OpenAI's
// convention, and the enforcer normalises Anthropic's to it). When the parts add up to
// more than the input count, the counts disagree and the larger reading is charged: the
// parts as reported, and no uncached input (never a negative count, never tokens that
// flowed priced at 0).
//
// A price with audio or image prices (AudioInputPerMillion, AudioOutputPerMillion,
// CachedAudioInputPerMillion, ImageInputPerMillion, CachedImageInputPerMillion above 0)
// splits the uncached input, the cached input and the output by modality. A modality
// whose price in the class is 0 is priced as text there (its count changes nothing).
// With the part of every priced modality reported, the audio part (at most the class's
// count) is priced at the audio price (of every catalog entry with both, the dearer),
// then the image part (at most what the audio left) at the image price, and the rest at
// the text price: counts that disagree are read the dearer way, never as a negative
// count nor as tokens priced at 0. A priced modality whose part is unknown (nil) may be
// anywhere in what the reported parts leave, so that rest is priced at the dearest of
// the text price and the unknown modalities' prices: an unknown split never lowers a
// charge, and a part reported is charged its own price whatever another did not say (a
// reporter that knows the audio part and not the image one, an enforcer older than
// the image prices, is charged the audio at its price and the rest at the image price,
// not every token at the audio price). A price without a cached audio (or cached
// image) price charges the cached tokens of that modality as cached text (the catalog's
// cached input price is then the dearer of the two). The audio and image input counts
// cover cached and uncached tokens: the uncached part is the count less the cached part
// when the usage reports both, and otherwise the count is taken from the uncached input
// first, the dearest reading of a usage that does not say how its audio or images
// divide. Without audio or image prices their counts change nothing.
//
// The sum is computed in 128 bits, so no intermediate product overflows; only a result
// beyond int64 is an error. It is rounded up once: a fraction of a micro-USD is never
// given away.
func CatalogCost(u Usage, p Price) (int64, error) {
	if p.InputPerMillion < 0 || p.OutputPerMillion < 0 || p.CachedInputPerMillion < 0 || p.CacheWrite() < 0 ||
		p.AudioInputPerMillion < 0 || p.AudioOutputPerMillion < 0 || p.CachedAudioInputPerMillion < 0 ||
		p.ImageInputPerMillion < 0 || p.CachedImageInputPerMillion < 0 {
		return 0, ErrBadUsage
	}
	if u.InputTokens < 0 || u.OutputTokens < 0 || u.CachedInputTokens < 0 || u.CacheWriteTokens < 0 || u.CacheWrite1hTokens < 0 ||
		negative(u.AudioInputTokens) || negative(u.AudioOutputTokens) || negative(u.CachedAudioInputTokens) ||
		negative(u.ImageInputTokens) || negative(u.CachedImageInputTokens) {
		return 0, ErrBadUsage
	}
	cached, written := u.CachedInputTokens, u.CacheWriteTokens
	uncached := u.InputTokens // minus the parts, compared first so nothing overflows
	if cached >= uncached {
		uncached = 0
	} else {
		uncached -= cached
	}
	if written >= uncached {
		uncached = 0
	} else {
		uncached -= written
	}
	var hi, lo uint64
	add := func(tokens, price int64) {
		h, l := bits.Mul64(uint64(tokens), uint64(price))
		var carry uint64
		lo, carry = bits.Add64(lo, l, 0)
		hi, _ = bits.Add64(hi, h, carry)
	}
	// split adds a class of n tokens at its text price, less the parts priced apart,
	// each at its price, in order (see above).
	split := func(n, text int64, parts ...part) {
		rest := text // the price of what the reported parts leave
		for _, m := range parts {
			switch {
			case m.price == 0: // priced as text
			case m.tokens == nil: // anywhere in the rest
				rest = max(rest, m.price)
			default:
				k := min(*m.tokens, n)
				add(k, m.price)
				n -= k
			}
		}
		add(n, rest)
	}
	split(uncached, p.InputPerMillion, part{uncachedPart(u.AudioInputTokens, u.CachedAudioInputTokens, cached), p.AudioInputPerMillion},
		part{uncachedPart(u.ImageInputTokens, u.CachedImageInputTokens, cached), p.ImageInputPerMillion})
	split(cached, p.CachedInputPerMillion, part{u.CachedAudioInputTokens, p.CachedAudioInputPerMillion},
		part{u.CachedImageInputTokens, p.CachedImageInputPerMillion})
	hour := min(u.CacheWrite1hTokens, written) // the writes made for an hour
	add(written-hour, p.CacheWrite())
	add(hour, p.CacheWrite1h())
	split(u.OutputTokens, p.OutputPerMillion, part{u.AudioOutputTokens, p.AudioOutputPerMillion})
	// The products of values below 2^63 stay below 2^126 each, and the parts of the
	// writes (two), of the uncached input and of the cached input (three each: audio,
	// image, text) and of the output (two) each add up to at most their class's count
	// times the dearest of its prices, the parts of a class never counting more tokens
	// than it has: four terms below 2^126, so the sum stays below 2^128 and hi never
	// wrapped.
	const million = 1_000_000
	if hi >= million {
		return 0, ErrCostOverflow
	}
	q, r := bits.Div64(hi, lo, million)
	if r != 0 {
		if q == math.MaxUint64 {
			return 0, ErrCostOverflow
		}
		q++
	}
	if q > math.MaxInt64 {
		return 0, ErrCostOverflow
	}
	return int64(q), nil
}

// part is the part of a class of tokens of one modality priced apart (audio, image):
// its count (nil: not reported) and its price (0: priced as the class's text).
type part struct {
	tokens *int64
	price  int64
}

// uncachedPart is a modality's part of the uncached input, nil when unknown: its input
// count less its cached part when the usage reports both (the input count covers the
// cached tokens too), else its input count, which CatalogCost takes from the uncached
// input first. The cached part taken off is at most the cached count, as CatalogCost
// charges it: counts that disagree are read the dearer way.
func uncachedPart(all, cachedPart *int64, cached int64) *int64 {
	if all == nil || cachedPart == nil {
		return all
	}
	a := max(*all-min(*cachedPart, cached), 0)
	return &a
}

// negative tells whether an optional count is present and below 0.
func negative(v *int64) bool { return v != nil && *v < 0 }

// addApiece adds n calls at price each to v, or fails with ErrCostOverflow past int64.
func addApiece(v, n, price int64) (int64, error) {
	hi, lo := bits.Mul64(uint64(n), uint64(max(price, 0)))
	if hi != 0 || lo > math.MaxInt64 || v > math.MaxInt64-int64(lo) {
		return v, ErrCostOverflow
	}
	return v + int64(lo), nil
}
