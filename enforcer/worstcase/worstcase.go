// Package worstcase owns the most an inference request may cost, as far as it is known at
// admission: the reservation the in-flight guard holds for the request while it runs
// (docs/usage-limits.md, "Bounded overshoot"), instead of the policy's flat amount.
//
// The worst case of a request whose body names its model is
//
//	ceil((input × input price' + cap × choices × output price) / 10^6)
//
// micro-USD, where input is the body's input-token estimate (package estimate), cap is
// the request's output cap (max_tokens, max_completion_tokens or max_output_tokens)
// clamped to the model's output limit from the price catalog (a missing cap is that
// limit; none for an embedding model, which generates nothing), choices the most
// choices it asks for (OpenAI's n, legacy completions' best_of, Gemini's
// candidateCount; 1 when none is given; times the prompts of a legacy completion's
// batch, each answered with its own: estimate.Request.Choices), each generated and
// billed up to the cap (an image generation's n is in its images already,
// estimate.Request.ImageOutputTokens), and the prices are
// the catalog's entry for the model, matched the way
// settlement matches names (pricecatalog.Steps). Where the entry prices cache writes
// (Anthropic), input price' is that of a one-hour cache write
// (pricecatalog.OneHourCacheWrite), the dearest, because a request may write its whole
// prompt to a cache for an hour; elsewhere it is the input price.
//
// It is unknown (the policy's amount applies) when the body is not a JSON object (on a
// path that names its model, gate.BodyHint still names that model, for the
// unpriced-model rule and the settlement, and the gate reserves the policy's amount:
// estimate.Request.Unread), names no model, names one the catalog does not price, names
// one the organization prices itself (its own price wins at settlement, and the
// enforcer knows only its keys), states no cap for a model whose limit the catalog does
// not know, gives the model a web search tool whose searches it does not cap (they
// are billed apiece; a capped tool's max_uses, or a grounded prompt billed once, adds
// its price to the worst case), or continues a context its provider stores (OpenAI
// Responses' previous_response_id, conversation, stored prompt or item references, Gemini Interactions'
// previous_interaction_id, Gemini's cachedContent: billed as input, not in the body;
// Anthropic's API has no such reference, each request carries its whole conversation).
//
// A warmup (estimate.Request.NoGeneration: the Responses API's WebSocket mode's
// response.create with "generate": false, which prepares a turn's state and generates
// nothing) costs its input alone, at its tier and premium: no output, no tool's call.
//
// A request with Anthropic's server-side fallback chain (estimate.Request.FallbackChain)
// adds an attempt for each of its models (fallbackCost): declined, it is tried again on
// each, and each attempt is billed.
//
// A request whose code tools run in a container billed by its time (OpenAI's code
// interpreter and hosted shell, Anthropic's code execution: estimate.Request.
// ContainerKind) adds one container session: its idle window at its price
// (pricecatalog.Container), what a container first seen costs beyond the request's own
// length, which is not known before it runs.
//
// A request guarded by an Amazon Bedrock guardrail (estimate.Request.Guardrail) adds its
// guardrail's units: the text units of its input and its output (at the estimator's four
// bytes a token) at every billed text policy but automated reasoning
// (pricecatalog.EstimatedGuardrailUnits), at the catalog's guardrail prices, as
// settlement charges a guardrail whose answer said nothing.
//
// A request that asks for a dearer speed tier (OpenAI's "service_tier": "priority",
// "fast" or "ultrafast", Gemini's "priority", Anthropic's "speed": "fast", Bedrock's
// performanceConfig {"latency": "optimized"} or its InvokeModel header) costs the
// model's percent of the tier of that (pricecatalog.Entry.TierPercent), as settlement
// charges it.
//
// Its error is the estimator's on the input part (docs/enforcer.md: within about 30%
// either way for English text and code; images, audio and files not counted), none on
// the output part: the provider never generates more than the cap for each choice the
// request asks for. So the worst case
// covers the real cost except when the input is underestimated and the output nearly
// reaches the cap, or the provider's price is above the catalog's.
//
// It does no I/O and reads no clock.
package worstcase

import (
	"math"
	"math/bits"
	"slices"

	"github.com/tollgate-dev/tollgate/enforcer/estimate"
	"github.com/tollgate-dev/tollgate/enforcer/requestbody"
	"github.com/tollgate-dev/tollgate/pkg/money"
	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
	"github.com/tollgate-dev/tollgate/pkg/saturate"
)

// Unknown says why a worst case is unknown ("" when it is known).
type Unknown string

// Why a worst case is unknown.
const (
	NoModel            Unknown = "no_model"            // the body names no model
	NotInCatalog       Unknown = "not_in_catalog"      // the catalog does not price the model
	OrganizationPriced Unknown = "organization_priced" // the organization prices the model itself
	NoCap              Unknown = "no_cap"              // no cap, and the catalog knows no output limit
	// DurationBilled: the model is billed by the minute of audio it hears (whisper-1),
	// and an upload's length is not read before it goes upstream.
	DurationBilled Unknown = "duration_billed"
	// PageBilled: the model is billed by the page it reads (OCR), and the document's
	// pages are not known before it is read.
	PageBilled Unknown = "page_billed"
	// SearchesUncapped: the request gives the model a web search tool that sets no limit
	// on its searches (OpenAI's, Gemini 3's, Anthropic's without max_uses), or OpenAI's
	// file search or image generation tool (which set none), each search or call billed
	// apart from the tokens, and no max_tool_calls caps them all.
	SearchesUncapped Unknown = "searches_uncapped"
	// AdvisorUncapped: the request gives the model Anthropic's advisor tool without
	// max_uses (its consultations, billed at the advisor model's prices, are then
	// unlimited), or with an advisor model the catalog does not price or whose output
	// nothing caps.
	AdvisorUncapped Unknown = "advisor_uncapped"
	// ServerContext: the request continues a context its provider stores (OpenAI
	// Responses' previous_response_id, conversation, or a stored prompt; Gemini
	// Interactions' previous_interaction_id; Gemini's explicit cache, cachedContent),
	// billed as its input though its body carries only the new turn
	// (estimate.Request.ServerContext).
	ServerContext Unknown = "server_context"
)

// Unknowns lists every reason a worst case is unknown (the metric's labels).
var Unknowns = []Unknown{NoModel, NotInCatalog, OrganizationPriced, NoCap, DurationBilled, PageBilled, SearchesUncapped, AdvisorUncapped, ServerContext}

// Cost is a request's worst case.
type Cost struct {
	// MicroUSD is the worst case (0 when Unknown is set), at most
	// money.MaxAllowanceMicroUSD.
	MicroUSD int64
	// Model is the catalog entry that priced it, OutputTokens the cap it was priced at
	// (the request's, clamped to the entry's output limit), InputTokens the estimate.
	Model        string
	InputTokens  int64
	OutputTokens int64
	Unknown      Unknown
}

// Known reports whether the worst case is known.
func (c Cost) Known() bool { return c.Unknown == "" }

// Of is the worst case of the request read from a body (estimate.Input), priced from
// cat, for an organization whose own prices have the match keys orgKeys
// (pricecatalog.Key of each priced name).
func Of(cat *pricecatalog.Catalog, req estimate.Request, orgKeys []string) Cost {
	model := requestbody.CleanModel(req.Model)
	if model == "" {
		return Cost{Unknown: NoModel}
	}
	e, why := find(cat, req.Host, model, orgKeys)
	if why != "" {
		return Cost{Unknown: why}
	}
	switch e.Kind {
	case pricecatalog.AudioDuration:
		return Cost{Unknown: DurationBilled}
	case pricecatalog.OCR:
		return Cost{Unknown: PageBilled}
	}
	if req.ServerContext {
		// Billed the stored context as input: its size is not in the body.
		return Cost{Unknown: ServerContext}
	}
	// An image generation's output is fixed by its parameters, not capped by a field.
	out := max(req.OutputCap, req.ImageOutputTokens)
	switch lim := e.MaxOutputTokens; {
	case e.Kind == pricecatalog.Embedding || e.Kind == pricecatalog.Speech || req.NoGeneration:
		// An embedding model generates nothing, a speech model nothing billed, a warmup
		// nothing at all: the worst case is the input.
		out = 0
	case lim > 0 && (out <= 0 || out > lim):
		// A request may not ask for more than the model's limit (the provider refuses
		// it), and one that asks nothing may get the whole limit.
		out = lim
	case out <= 0:
		return Cost{Unknown: NoCap}
	}
	if req.ImageOutputTokens <= 0 {
		// Every choice is generated and billed, each up to the cap (OpenAI's n and
		// best_of, Gemini's candidateCount). An image generation's n is in its images.
		out = saturate.Mul(out, max(req.Choices, 1))
	}
	in := max(req.InputTokens, 0)
	// The dearest tier (a long prompt's, where the model has one: the estimate of the
	// input is not exact enough to rule it out).
	p := e.Dearest()
	cost := price(in, dearestInput(p), out, p.DearestOutput())
	if t := req.AskedTier(); t != pricecatalog.Standard {
		// Asked to run at a dearer speed tier: charged so at settlement, when the answer
		// says it ran there.
		if c, ok := pricecatalog.AtPercent(cost, e.TierPercent(t)); ok {
			cost = min(c, money.MaxAllowanceMicroUSD)
		} else {
			cost = money.MaxAllowanceMicroUSD
		}
	}
	if req.Regional || req.InferenceGeo {
		// Sent to a cloud's regional endpoint, or pinned to a geography (Anthropic's
		// inference_geo): charged its premium at settlement.
		if c, ok := pricecatalog.RegionalPremium(cost, e.RegionalPremiumPercent); ok {
			cost = min(c, money.MaxAllowanceMicroUSD)
		} else {
			cost = money.MaxAllowanceMicroUSD
		}
	}
	if req.NoGeneration {
		// Nothing generated, no tool called: its tools' calls cost nothing either.
		return Cost{MicroUSD: cost, Model: e.Model, InputTokens: in}
	}
	if req.Fallbacks {
		// Declined, the request is tried again on each model of its fallback chain, each
		// attempt billed at its model's prices on top of the rest.
		retries, why := fallbackCost(cat, req, in, out, cost, orgKeys)
		if why != "" {
			return Cost{Unknown: why}
		}
		cost = min(cost+retries, money.MaxAllowanceMicroUSD) // both ≤ 2^53: no overflow
	}
	// A model that searches for every request has a search tool without being given one.
	req.WebSearch = req.WebSearch || e.SearchesEveryRequest
	if req.WebSearch || req.FileSearch || req.ImageGeneration || req.MapsGrounding {
		// Searches, file search calls, images and a Maps grounded prompt are charged on
		// top of the tokens (after the tier), as settlement charges them; calls bound the
		// cost only when capped.
		calls, ok := toolCallsCost(cat, e, req)
		if !ok {
			return Cost{Unknown: SearchesUncapped}
		}
		cost = min(cost+calls, money.MaxAllowanceMicroUSD) // both ≤ 2^53: no overflow
	}
	if req.Advisor {
		// The advisor's consultations are charged at its own prices, from the catalog
		// (as settlement prices them), on top of the rest.
		advice, ok := advisorCost(cat, req, in, out)
		if !ok {
			return Cost{Unknown: AdvisorUncapped}
		}
		cost = min(cost+advice, money.MaxAllowanceMicroUSD) // both ≤ 2^53: no overflow
	}
	if c, ok := cat.Container(req.ContainerKind); ok {
		// A code tool's container is charged its time on top of the rest: a container
		// first seen, its idle window after the request (the request's own length is not
		// known before it runs; docs/usage-limits.md).
		session, _ := c.Cost(c.IdleMinutes)                  // at least its minimum: the catalog holds idle ≥ minimum
		cost = min(cost+session, money.MaxAllowanceMicroUSD) // both ≤ 2^53: no overflow
	}
	if req.Guardrail {
		chars := estimate.Bytes(in) + estimate.Bytes(out)
		guard, _ := cat.Guardrails().Cost(pricecatalog.EstimatedGuardrailUnits(chars)) // the bound when over it
		cost = min(cost+guard, money.MaxAllowanceMicroUSD)                             // both ≤ 2^53: no overflow
	}
	return Cost{MicroUSD: cost, Model: e.Model, InputTokens: in, OutputTokens: out}
}

// fallbackCost is the most the attempts of a request's server-side fallback chain
// (Anthropic's "fallbacks", estimate.Request.FallbackChain) cost beyond its own attempt,
// whose tokens' worst case is own and whose output cap is out: each attempt reads the
// request's input in and what the attempts before it wrote (a fallback continues the
// declined attempt's partial answer: the response's fallback block marks where), and
// writes its entry's max_tokens (else the request's cap), clamped to its model's output limit
// (NoCap where neither bounds it), at its model's dearest catalog prices (found as the
// request's model is, so an organization's own price of it makes the worst case unknown),
// at its speed tier (its entry's speed, else the request's) and the request's regional
// or geography premium. A chain left to the server ("default") names no model: one more
// attempt at own (the models Anthropic recommends as fallbacks are not dearer than the
// one they stand in for).
func fallbackCost(cat *pricecatalog.Catalog, req estimate.Request, in, out, own int64, orgKeys []string) (int64, Unknown) {
	if req.FallbackChain == nil || req.FallbackChain.Default {
		// Not read (a Request made otherwise), or not named: as the server's default.
		return own, ""
	}
	var sum int64
	read := in // the input, and the partial answers before the attempt
	for _, f := range req.FallbackChain.Entries {
		e, why := find(cat, req.Host, requestbody.CleanModel(f.Model), orgKeys)
		if why != "" {
			return 0, why
		}
		read = saturated(read, 0, 1, out) // the attempt before wrote up to out
		out = f.MaxTokens
		if out <= 0 {
			out = req.OutputCap
		}
		switch lim := e.MaxOutputTokens; {
		case lim > 0 && (out <= 0 || out > lim):
			out = lim
		case out <= 0:
			return 0, NoCap
		}
		p := e.Dearest()
		c := price(read, dearestInput(p), out, p.DearestOutput())
		tier := req.AskedTier()
		switch f.Speed {
		case "fast":
			tier = pricecatalog.Fast
		case "standard":
			tier = pricecatalog.Standard
		}
		if t, ok := pricecatalog.AtPercent(c, e.TierPercent(tier)); tier != pricecatalog.Standard {
			c = money.MaxAllowanceMicroUSD
			if ok {
				c = min(t, money.MaxAllowanceMicroUSD)
			}
		}
		if req.Regional || req.InferenceGeo {
			if r, ok := pricecatalog.RegionalPremium(c, e.RegionalPremiumPercent); ok {
				c = min(r, money.MaxAllowanceMicroUSD)
			} else {
				c = money.MaxAllowanceMicroUSD
			}
		}
		sum = min(sum+c, money.MaxAllowanceMicroUSD) // both ≤ 2^53: no overflow
	}
	return sum, ""
}

// advisorCost is the most the consultations of a request's advisor tool cost: max_uses
// of them, each reading at most the whole transcript (the request's input in, the
// executor's output out and every consultation's advice) and writing the tool's
// max_tokens (else the advisor model's output limit), at the dearest prices of the
// advisor model's catalog entry (its long prompts' tier, a one-hour cache write for its
// input), not multiplied by the executor's tier or premium: settlement does not multiply
// them. Unknown without max_uses, or for an advisor model the catalog does not price or
// whose output nothing caps.
func advisorCost(cat *pricecatalog.Catalog, req estimate.Request, in, out int64) (int64, bool) {
	if req.AdvisorMaxUses <= 0 || req.AdvisorModel == "" {
		return 0, false
	}
	e, ok := cat.Lookup(req.AdvisorModel)
	if !ok {
		return 0, false
	}
	advice := e.MaxOutputTokens
	if req.AdvisorMaxTokens > 0 && (advice <= 0 || req.AdvisorMaxTokens < advice) {
		advice = req.AdvisorMaxTokens
	}
	if advice <= 0 {
		return 0, false
	}
	uses := req.AdvisorMaxUses
	p := e.Dearest()
	each := price(saturated(in, out, uses, advice), dearestInput(p), advice, p.DearestOutput())
	return times(uses, each), true
}

// dearestInput is the dearest price an input token may cost at p: the input may be all
// audio, and a request may write its whole prompt to a cache, for an hour at that, where
// the provider prices cache writes (Anthropic).
func dearestInput(p pricecatalog.Price) int64 {
	in := p.DearestInput()
	if p.CacheWritePerMillion != nil {
		in = max(in, pricecatalog.OneHourCacheWrite(p.InputPerMillion, *p.CacheWritePerMillion))
	}
	return in
}

// times is n calls at each apiece, capped at money.MaxAllowanceMicroUSD.
func times(n, each int64) int64 {
	hi, lo := bits.Mul64(uint64(n), uint64(each))
	if hi != 0 || lo > uint64(money.MaxAllowanceMicroUSD) {
		return money.MaxAllowanceMicroUSD
	}
	return int64(lo)
}

// toolCallsCost is the most a request's billed tool calls cost, and whether that is
// known: a grounded prompt's price once (Gemini 2.5 and older's search; Google Maps
// grounding's, at the catalog's price for the provider, else its highest, as settlement
// charges it), plus the calls its caps allow (the web search tools' max_uses,
// Anthropic's; OpenAI's max_tool_calls, for all its built-in tools together, the smaller
// of the two when both are set), each at the dearest price of the tools given (an image
// generation call: its image at its image model's output price, estimate.ImageCall).
// Unknown when a search tool's provider or an image model has no price, or nothing caps
// the calls.
func toolCallsCost(cat *pricecatalog.Catalog, e pricecatalog.Entry, req estimate.Request) (int64, bool) {
	var once, perCall int64
	if req.MapsGrounding {
		p, ok := cat.MapsGrounding(e.Provider)
		if !ok {
			p = cat.HighestMapsGrounding()
		}
		once = p
	}
	if req.WebSearch {
		p, grounded, ok := cat.SearchPrice(e)
		switch {
		case !ok:
			return 0, false
		case grounded:
			once += p
		default:
			perCall = p
		}
	}
	if req.FileSearch {
		p, ok := cat.FileSearch(e.Provider)
		if !ok {
			return 0, false
		}
		perCall = max(perCall, p)
	}
	if req.ImageGeneration {
		p, ok := imageCallPrice(cat, req.ImageCall)
		if !ok {
			return 0, false
		}
		perCall = max(perCall, p)
	}
	if perCall == 0 {
		return once, true
	}
	calls := req.MaxToolCalls
	if req.WebSearch && !req.FileSearch && !req.ImageGeneration && req.WebSearchMaxUses > 0 && (calls == 0 || req.WebSearchMaxUses < calls) {
		calls = req.WebSearchMaxUses
	}
	if calls <= 0 {
		return 0, false
	}
	return min(once+times(calls, perCall), money.MaxAllowanceMicroUSD), true // each ≤ 2^52: no overflow
}

// imageCallPrice is what one call of the image generation tool costs at most: its
// tokens at its image model's catalog output price (settlement prices them from the
// catalog too, whatever prices the response's model). Unknown when the catalog does not
// price the model, or the tokens are not known (a body that does not read, an image
// model whose tokens no table knows: requestbody.ImageTokensKnown).
func imageCallPrice(cat *pricecatalog.Catalog, call estimate.ImageCall) (int64, bool) {
	if call.Tokens <= 0 || !requestbody.ImageTokensKnown(call.Model) {
		return 0, false
	}
	e, ok := cat.Lookup(call.Model)
	if !ok {
		return 0, false
	}
	return price(0, 0, call.Tokens, e.Dearest().DearestOutput()), true
}

// find walks the matching steps as settlement does (controlplane/ledger: at each step
// the organization's own price, then the catalog's). The enforcer knows the
// organization's keys, not its exact names, so the exact step compares the name's key:
// an organization name that differs from the model only in case or prefix makes the
// worst case unknown, never priced at a catalog price settlement will not use. The
// catalog's entry is the upstream host's own where it has one (FindFor), as settlement's.
func find(cat *pricecatalog.Catalog, host, model string, orgKeys []string) (pricecatalog.Entry, Unknown) {
	for _, s := range pricecatalog.Steps(model) {
		key := s.Name
		if s.Exact {
			key = pricecatalog.Key(s.Name)
		}
		if slices.Contains(orgKeys, key) {
			return pricecatalog.Entry{}, OrganizationPriced
		}
		if e, ok := cat.FindFor(host, s.Name); ok {
			return e, ""
		}
	}
	return pricecatalog.Entry{}, NotInCatalog
}

// price is ceil((in × inPrice + out × outPrice) / 10^6), in 128 bits so that no product
// overflows, capped at money.MaxAllowanceMicroUSD (the most a start may reserve).
// saturated is a + b + n×m for non-negative counts, math.MaxInt64 when it is larger:
// a count that large costs more than any allowance (price caps it).
func saturated(a, b, n, m int64) int64 {
	hi, nm := bits.Mul64(uint64(n), uint64(m))
	sum, c1 := bits.Add64(uint64(a), uint64(b), 0)
	sum, c2 := bits.Add64(sum, nm, 0)
	if hi != 0 || c1 != 0 || c2 != 0 || sum > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(sum)
}

func price(in, inPrice, out, outPrice int64) int64 {
	h1, l1 := bits.Mul64(uint64(in), uint64(inPrice))
	h2, l2 := bits.Mul64(uint64(out), uint64(outPrice))
	lo, carry := bits.Add64(l1, l2, 0)
	hi, _ := bits.Add64(h1, h2, carry) // two products below 2^126 each: no wrap
	const million = 1_000_000
	if hi >= million {
		return money.MaxAllowanceMicroUSD
	}
	q, r := bits.Div64(hi, lo, million)
	if r != 0 && q < math.MaxUint64 {
		q++
	}
	if q > uint64(money.MaxAllowanceMicroUSD) {
		return money.MaxAllowanceMicroUSD
	}
	return int64(q)
}
