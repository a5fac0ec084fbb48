package requestbody

import (
	"encoding/json"

	"github.com/tollgate-dev/tollgate/enforcer/estimate"
)

// Fallbacks reads the request's Anthropic server-side fallback chain (the top-level
// "fallbacks": substitute models the API retries a request on, in order, when the
// requested model declines it, each attempt billed): its entries that name a model, or
// whether it asks for the requested model's server-defined default ("fallbacks":
// "default"), whose models it does not name. Nothing for a body that does not read, or
// a chain of another shape (the provider refuses it).
func Fallbacks(body []byte) estimate.FallbackChain {
	var req struct {
		Fallbacks json.RawMessage `json:"fallbacks"`
	}
	if UnmarshalExact(body, &req, "fallbacks") != nil || len(req.Fallbacks) == 0 {
		return estimate.FallbackChain{}
	}
	var name string
	if json.Unmarshal(req.Fallbacks, &name) == nil {
		return estimate.FallbackChain{Default: name == "default"}
	}
	var entries []struct {
		Model     string          `json:"model"`
		MaxTokens json.RawMessage `json:"max_tokens"`
		Speed     json.RawMessage `json:"speed"`
	}
	var chain estimate.FallbackChain
	if json.Unmarshal(req.Fallbacks, &entries) != nil {
		return chain
	}
	for _, e := range entries {
		if e.Model == "" {
			continue
		}
		f := estimate.Fallback{Model: e.Model, MaxTokens: positiveCount(e.MaxTokens)}
		if len(e.Speed) > 0 {
			// Said: null runs the attempt at standard speed, as "standard" does.
			var speed string
			f.Speed = "standard"
			if json.Unmarshal(e.Speed, &speed) == nil && speed == "fast" {
				f.Speed = "fast"
			}
		}
		chain.Entries = append(chain.Entries, f)
	}
	return chain
}
