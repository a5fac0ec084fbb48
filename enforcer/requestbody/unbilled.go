package requestbody

import (
	"net/http"
	"strings"
)

// unbilledPaths end the paths of the providers' endpoints that generate nothing and are
// not charged, though their bodies look like a generation request's (a model, messages
// or input text): Anthropic's POST /v1/messages/count_tokens (which Claude Code calls
// before many turns), OpenAI's POST /v1/responses/input_tokens, and OpenAI's
// POST /v1/moderations (free; its answer reports no usage), Gemini's
// POST /v1beta/models/{model}:countTokens (Vertex AI's too), Claude's token count on
// Vertex AI, POST .../publishers/anthropic/models/count-tokens:rawPredict, and Amazon
// Bedrock's CountTokens, POST /model/{modelId}/count-tokens ("Using the CountTokens API
// doesn't incur charges", AWS's user guide).
var unbilledPaths = []string{"/messages/count_tokens", "/responses/input_tokens", "/moderations", ":countTokens", "/models/count-tokens:rawPredict",
	"/count-tokens"}

// Unbilled reports whether a request is one the provider does not charge: any method
// but POST (every provider's generation is a POST; a GET reads a stored object, such as
// a stored response or chat completion, whose usage it shows again though it was
// charged when it was generated, and DELETE removes one), or a POST to an endpoint that
// generates nothing (unbilledPaths). Without this rule the usage a retrieval shows would
// be charged a second time, and a token count's input estimate would be charged when its
// answer reports no usage, at the fallback price when its model is priced nowhere. Such
// a request is still admitted, and settled at the provider's price of it
// (UnbilledCost). The path is the one the upstream gets, unchanged. An unknown method
// ("", a proxy that did not say) counts as a POST: a request is never free by doubt.
func Unbilled(method, path string) bool {
	if !generates(method) {
		return true
	}
	for _, p := range unbilledPaths {
		if strings.HasSuffix(path, p) {
			return true
		}
	}
	return false
}

// generates tells whether a request of method may generate: a POST, in any case ("post"
// is another method to HTTP, but a server that matches methods loosely would run it as
// a POST), or a method not known (""). PUT and PATCH do not: no provider generates on
// them, and some answer an update with the usage of what it updated (Gemini's PATCH of a
// cached content shows the content's usageMetadata), which must not be charged again.
func generates(method string) bool { return strings.EqualFold(method, http.MethodPost) || method == "" }

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
