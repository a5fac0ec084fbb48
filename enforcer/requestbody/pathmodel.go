package requestbody

import "strings"

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
// .../publishers/google/models/{model}:generateContent). "" when the path names none.
// The name is cleaned as a body's is (CleanModel); it is priced and its worst case
// reserved like one.
func ModelFromPath(path string) string {
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
