package requestbody

import (
	"encoding/json"
	"strings"
)

// AdvisorModel is the model of Anthropic's advisor tool a request gives its model (a
// "tools" element whose "type" starts with "advisor_"; its "model" is required), whose
// sub-inferences the answer's usage.iterations[] lists apart and Anthropic bills at
// that model's prices. "" when the body does not read or names none (the provider
// refuses it); of several, the last.
func AdvisorModel(body []byte) string {
	var req struct {
		Tools []struct {
			Type  string `json:"type"`
			Model string `json:"model"`
		} `json:"tools"`
	}
	if json.Unmarshal(body, &req) != nil {
		return ""
	}
	model := ""
	for _, t := range req.Tools {
		if strings.HasPrefix(t.Type, "advisor_") && t.Model != "" {
			model = t.Model
		}
	}
	return model
}
