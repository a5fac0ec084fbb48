package requestbody

import "strings"

// unbilledPaths end the paths of the providers' endpoints that generate nothing and are
// not charged, though their bodies look like a generation request's (a model, messages
// or input text): Anthropic's POST /v1/messages/count_tokens (which Claude Code calls
// before many turns), OpenAI's POST /v1/responses/input_tokens, and OpenAI's
// POST /v1/moderations (free; its answer reports no usage).
var unbilledPaths = []string{"/messages/count_tokens", "/responses/input_tokens", "/moderations"}

// Unbilled reports whether a request to path is one the provider does not charge.
// Without this rule its body's input estimate would be charged when the answer reports
// no usage, as for a generation that broke off, and at the fallback price when its model
// (a moderation model) is priced nowhere. Such a request is still admitted, and settled
// at the provider's price of it (UnbilledCost). The path is the one the upstream gets,
// unchanged: a request to it cannot generate.
func Unbilled(path string) bool {
	for _, p := range unbilledPaths {
		if strings.HasSuffix(path, p) {
			return true
		}
	}
	return false
}

// UnbilledCost is the cost an unbilled request is settled at: the one the upstream
// reported (its cost header), else 0, which is what the providers charge for it. A
// known 0, not an unknown cost: the request is not counted as unpriced.
func UnbilledCost(reported *int64) *int64 {
	if reported != nil {
		return reported
	}
	zero := int64(0)
	return &zero
}
