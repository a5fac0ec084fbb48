package pricecatalog

import (
	"math"
	"math/bits"

	"github.com/tollgate-dev/tollgate/pkg/money"
)

// Amazon Bedrock's guardrails are billed apart from the model they guard: by the text
// units (up to 1,000 characters each) each of a guardrail's policies assessed, in the
// prompt and in the answer, and by the image for its image content filter. A request
// its guardrail refused before the model ran is billed its guardrail's units and no
// tokens. Word filters and regular-expression sensitive-information filters are free.
// docs/prices.md, "Amazon Bedrock's guardrails".

// GuardrailUnits are what a request's guardrails assessed, by billed policy: text units
// of each text policy, and images of the image content filter; and the text units of
// the detect-only guardrail checks (InvokeGuardrailChecks, June 2026: no guardrail, a
// price of their own per check).
type GuardrailUnits struct {
	ContentText          int64 // content filters, on text
	DeniedTopics         int64
	SensitiveInformation int64 // sensitive-information filters (PII), not their regular expressions
	ContextualGrounding  int64
	AutomatedReasoning   int64 // automated reasoning checks, already times their policies
	ContentImages        int64 // content filters, on images
	// The guardrail checks' text units, by check.
	ChecksContentFilter, ChecksPromptAttack, ChecksSensitiveInformation int64
}

// IsZero tells whether nothing was assessed.
func (u GuardrailUnits) IsZero() bool { return u == GuardrailUnits{} }

// Add is u and o summed, each count saturating.
func (u GuardrailUnits) Add(o GuardrailUnits) GuardrailUnits {
	add := func(a, b int64) int64 { return min(a, math.MaxInt64-b) + b }
	return GuardrailUnits{add(u.ContentText, o.ContentText), add(u.DeniedTopics, o.DeniedTopics),
		add(u.SensitiveInformation, o.SensitiveInformation), add(u.ContextualGrounding, o.ContextualGrounding),
		add(u.AutomatedReasoning, o.AutomatedReasoning), add(u.ContentImages, o.ContentImages),
		add(u.ChecksContentFilter, o.ChecksContentFilter), add(u.ChecksPromptAttack, o.ChecksPromptAttack),
		add(u.ChecksSensitiveInformation, o.ChecksSensitiveInformation)}
}

// Valid tells whether every count is non-negative.
func (u GuardrailUnits) Valid() bool {
	return min(u.ContentText, u.DeniedTopics, u.SensitiveInformation, u.ContextualGrounding, u.AutomatedReasoning,
		u.ContentImages, u.ChecksContentFilter, u.ChecksPromptAttack, u.ChecksSensitiveInformation) >= 0
}

// GuardrailCharsPerUnit is the most characters one text unit holds.
const GuardrailCharsPerUnit = 1000

// EstimatedGuardrailUnits is what a guardrail whose answer did not say is charged for
// chars characters of text it may have assessed: their text units at every billed text
// policy but automated reasoning (which a guardrail has only with a policy made for it),
// never below the bill of a guardrail without one.
func EstimatedGuardrailUnits(chars int64) GuardrailUnits {
	if chars <= 0 {
		return GuardrailUnits{}
	}
	n := chars/GuardrailCharsPerUnit + min(chars%GuardrailCharsPerUnit, 1)
	return GuardrailUnits{ContentText: n, DeniedTopics: n, SensitiveInformation: n, ContextualGrounding: n}
}

// GuardrailPrices are the prices of guardrails' policies in integer micro-USD: per
// 1,000 text units of each text policy, per image of the image content filter.
type GuardrailPrices struct {
	ContentText          int64 `json:"contentText"`
	DeniedTopics         int64 `json:"deniedTopics"`
	SensitiveInformation int64 `json:"sensitiveInformation"`
	ContextualGrounding  int64 `json:"contextualGrounding"`
	AutomatedReasoning   int64 `json:"automatedReasoning"`
	ContentImage         int64 `json:"contentImage"`
	// The detect-only guardrail checks (InvokeGuardrailChecks), per 1,000 text units.
	ChecksContentFilter        int64 `json:"checksContentFilter"`
	ChecksPromptAttack         int64 `json:"checksPromptAttack"`
	ChecksSensitiveInformation int64 `json:"checksSensitiveInformation"`
}

// Valid tells whether every price is non-negative (a negative one would read as free).
func (p GuardrailPrices) Valid() bool {
	return min(p.ContentText, p.DeniedTopics, p.SensitiveInformation, p.ContextualGrounding, p.AutomatedReasoning, p.ContentImage,
		p.ChecksContentFilter, p.ChecksPromptAttack, p.ChecksSensitiveInformation) >= 0
}

// Cost is the price of u: its text units at their policies' prices per 1,000, rounded up
// once for them all, and its images apiece, in micro-USD; false when it exceeds
// money.MaxAllowanceMicroUSD (the caller charges the bound). A negative count or price
// counts as 0.
func (p GuardrailPrices) Cost(u GuardrailUnits) (int64, bool) {
	// The text units' sum of units times price per 1,000, in 128 bits, divided once.
	var hi, lo uint64
	for _, t := range [...][2]int64{{u.ContentText, p.ContentText}, {u.DeniedTopics, p.DeniedTopics},
		{u.SensitiveInformation, p.SensitiveInformation}, {u.ContextualGrounding, p.ContextualGrounding},
		{u.AutomatedReasoning, p.AutomatedReasoning}, {u.ChecksContentFilter, p.ChecksContentFilter},
		{u.ChecksPromptAttack, p.ChecksPromptAttack}, {u.ChecksSensitiveInformation, p.ChecksSensitiveInformation}} {
		if t[0] <= 0 || t[1] <= 0 {
			continue
		}
		h, l := bits.Mul64(uint64(t[0]), uint64(t[1]))
		var c uint64
		lo, c = bits.Add64(lo, l, 0)
		if hi, c = bits.Add64(hi, h, c); c != 0 {
			return money.MaxAllowanceMicroUSD, false
		}
	}
	lo, c := bits.Add64(lo, 999, 0) // rounded up
	if hi, c = bits.Add64(hi, 0, c); c != 0 || hi >= 1000 {
		return money.MaxAllowanceMicroUSD, false
	}
	text, _ := bits.Div64(hi, lo, 1000)
	var images uint64
	if u.ContentImages > 0 && p.ContentImage > 0 {
		h, l := bits.Mul64(uint64(u.ContentImages), uint64(p.ContentImage))
		if h != 0 {
			return money.MaxAllowanceMicroUSD, false
		}
		images = l
	}
	if text > uint64(money.MaxAllowanceMicroUSD) || images > uint64(money.MaxAllowanceMicroUSD)-text {
		return money.MaxAllowanceMicroUSD, false
	}
	return int64(text + images), true
}

// checkGuardrails checks the file's guardrail prices: each from 0 (free) to the bound.
func checkGuardrails(p GuardrailPrices, bad func(string, ...any)) GuardrailPrices {
	for name, v := range map[string]int64{"contentText": p.ContentText, "deniedTopics": p.DeniedTopics,
		"sensitiveInformation": p.SensitiveInformation, "contextualGrounding": p.ContextualGrounding,
		"automatedReasoning": p.AutomatedReasoning, "contentImage": p.ContentImage, "checksContentFilter": p.ChecksContentFilter,
		"checksPromptAttack": p.ChecksPromptAttack, "checksSensitiveInformation": p.ChecksSensitiveInformation} {
		if v < 0 || v > money.MaxAllowanceMicroUSD/1000 {
			bad("guardrails.%s: must be from 0 to %d", name, money.MaxAllowanceMicroUSD/1000)
		}
	}
	return p
}

// Guardrails are the catalog's prices of Amazon Bedrock's guardrails.
func (c *Catalog) Guardrails() GuardrailPrices { return c.guardrails }
