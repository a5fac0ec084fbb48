package fakellm

// Google Vertex AI's publisher models, answered as Vertex answers (paths under /v1/ or
// /v1beta1/, projects/{project}/locations/{location}/publishers/{publisher}/models/
// {model}:{method}):
//
//   - Anthropic's Claude: POST .../publishers/anthropic/models/{model}:rawPredict and
//     :streamRawPredict. The body is Anthropic's Messages request without "model" (the
//     path names it: "claude-sonnet-4-5@20250929") and with "anthropic_version":
//     "vertex-2023-10-16"; the answer is Anthropic's message (API AnthropicMessages), or
//     its event stream for :streamRawPredict or a body with "stream": true. The answer's
//     "model" is Anthropic's name of the model ("claude-sonnet-4-5-20250929").
//     .../anthropic/models/count-tokens:rawPredict is Anthropic's token counting
//     (AnthropicCountTokens), the model in the body.
//   - Google's Gemini: POST .../publishers/google/models/{model}:generateContent,
//     :streamGenerateContent (?alt=sse) and :countTokens, answered as the Gemini API's
//     (GeminiGenerate, GeminiStream, GeminiCountTokens).
//
// Call.Model is the model the path names, as the request sent it (the body's for a
// token count); Call.Stream whether the answer streams.

import "strings"

// vertexRoute is the API of a Vertex AI publisher model's path, the model the path
// names ("" for Claude's token counting, whose body names it) and whether the method
// streams (a :rawPredict streams when its body says so); api "" for another path.
func vertexRoute(path string) (api, model string, stream bool) {
	rest, ok := strings.CutPrefix(path, "/v1/projects/")
	if !ok {
		if rest, ok = strings.CutPrefix(path, "/v1beta1/projects/"); !ok {
			return "", "", false
		}
	}
	// {project}/locations/{location}/publishers/{publisher}/models/{model}:{method}
	seg := strings.Split(rest, "/")
	if len(seg) != 7 || seg[1] != "locations" || seg[3] != "publishers" || seg[5] != "models" ||
		seg[0] == "" || seg[2] == "" {
		return "", "", false
	}
	model, method, ok := strings.Cut(seg[6], ":")
	if !ok || model == "" {
		return "", "", false
	}
	switch seg[4] + ":" + method {
	case "anthropic:rawPredict":
		if model == "count-tokens" {
			return AnthropicCountTokens, "", false
		}
		return AnthropicMessages, model, false
	case "anthropic:streamRawPredict":
		return AnthropicMessages, model, true
	case "google:generateContent":
		return GeminiGenerate, model, false
	case "google:streamGenerateContent":
		return GeminiStream, model, true
	case "google:countTokens":
		return GeminiCountTokens, model, false
	}
	return "", "", false
}

// vertexClaudeModel is Anthropic's name of a Vertex AI Claude model id, as the answer
// gives it: the version after "@" joined with "-" ("claude-sonnet-4-5@20250929" is
// "claude-sonnet-4-5-20250929").
func vertexClaudeModel(id string) string {
	return strings.Replace(id, "@", "-", 1)
}
