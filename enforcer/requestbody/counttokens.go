package requestbody

import "strings"

// tokenCountingPaths end the paths of the providers' endpoints that count a request's
// input tokens and generate nothing, which they do not charge: Anthropic's
// POST /v1/messages/count_tokens (which Claude Code calls before many turns) and
// OpenAI's POST /v1/responses/input_tokens.
var tokenCountingPaths = []string{"/messages/count_tokens", "/responses/input_tokens"}

// CountsTokens reports whether a request to path only counts tokens. Its body looks like
// a generation request's (a model, messages), so without this rule its input estimate
// would be charged when the answer reports no usage, as for a generation that broke off.
// Such a request is still admitted, and settled at the provider's price of it
// (TokenCountCost). The path is the one the upstream gets, unchanged: a request to it
// cannot generate.
func CountsTokens(path string) bool {
	for _, p := range tokenCountingPaths {
		if strings.HasSuffix(path, p) {
			return true
		}
	}
	return false
}

// TokenCountCost is the cost a token count is settled at: the one the upstream reported
// (its cost header), else 0, which is what the providers charge for it. A known 0, not
// an unknown cost: the request is not counted as unpriced.
func TokenCountCost(reported *int64) *int64 {
	if reported != nil {
		return reported
	}
	zero := int64(0)
	return &zero
}
