package requestbody

import (
	"net/url"
	"strings"
)

// RequestModel is the model a request names: its body's (cleaned, CleanModel), else its
// path's (ModelFromPath).
func RequestModel(bodyModel, path string) string {
	if m := CleanModel(bodyModel); m != "" {
		return m
	}
	return ModelFromPath(path)
}

// ModelFromPath is the model a request names in its path rather than its body: Gemini's
// API (POST /v1beta/models/{model}:generateContent, :streamGenerateContent, Vertex AI's
// .../publishers/google/models/{model}:generateContent), Amazon Bedrock Runtime's
// (POST /model/{modelId}/invoke, /invoke-with-response-stream, /converse,
// /converse-stream; the id percent-encoded or not, an inference profile's ARN
// included). "" when the path names none. The name is cleaned as a body's is
// (CleanModel); it is priced and its worst case reserved like one.
func ModelFromPath(path string) string {
	if m, ok := bedrockModel(path); ok {
		return m
	}
	i := strings.LastIndex(path, "/models/")
	if i < 0 {
		return ""
	}
	rest := path[i+len("/models/"):]
	colon := strings.IndexByte(rest, ':')
	if colon <= 0 || strings.IndexByte(rest[:colon], '/') >= 0 {
		return ""
	}
	return CleanModel(rest[:colon])
}

// bedrockActions are Bedrock Runtime's model invocations, after /model/{modelId}.
var bedrockActions = []string{"/invoke", "/invoke-with-response-stream", "/converse", "/converse-stream"}

// bedrockModel is the model id of a Bedrock Runtime invocation's path, and whether the
// path is one (behind a route prefix too).
func bedrockModel(path string) (string, bool) {
	i := strings.Index(path, "/model/")
	if i < 0 {
		return "", false
	}
	rest := path[i+len("/model/"):]
	for _, action := range bedrockActions {
		if id, ok := strings.CutSuffix(rest, action); ok && id != "" {
			if unescaped, err := url.PathUnescape(id); err == nil {
				id = unescaped
			}
			return CleanModel(id), true
		}
	}
	return "", false
}
