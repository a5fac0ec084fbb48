package requestbody

import (
	"encoding/json"
	"strconv"
	"strings"
)

// Advisor is what a request's Anthropic advisor tool says (a "tools" element whose
// "type" starts with "advisor_"): its model (required), whose sub-inferences the answer's
// usage.iterations[] lists apart and Anthropic bills at that model's prices; its
// max_uses, the most consultations the request allows (0: none said, which Anthropic
// leaves unlimited); and its max_tokens, the most each consultation writes, thinking
// included (0: none said, the advisor model's own limit).
type Advisor struct {
	Model              string
	MaxUses, MaxTokens int64
}

// AdvisorTool reads the request's advisor tool: of several, the last that names a model;
// the zero Advisor when the body does not read or none names one (the provider refuses
// it). A cap that is not a positive whole number counts as unsaid.
func AdvisorTool(body []byte) Advisor {
	var req struct {
		Tools []struct {
			Type      string          `json:"type"`
			Model     string          `json:"model"`
			MaxUses   json.RawMessage `json:"max_uses"`
			MaxTokens json.RawMessage `json:"max_tokens"`
		} `json:"tools"`
	}
	if UnmarshalExact(body, &req, "tools") != nil {
		return Advisor{}
	}
	var a Advisor
	for _, t := range req.Tools {
		if strings.HasPrefix(t.Type, "advisor_") && t.Model != "" {
			a = Advisor{Model: t.Model, MaxUses: positiveCount(t.MaxUses), MaxTokens: positiveCount(t.MaxTokens)}
		}
	}
	return a
}

// positiveCount is a JSON value that is a positive whole number written as one, else 0.
func positiveCount(raw json.RawMessage) int64 {
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil || n <= 0 {
		return 0
	}
	return n
}
