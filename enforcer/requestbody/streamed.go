package requestbody

import (
	"strings"

	"github.com/tollgate-dev/tollgate/enforcer/estimate"
)

// Streamed reports whether a request asks for its answer as a stream: its body says a
// top-level "stream": true (est.Stream: OpenAI's and Anthropic's APIs and those shaped
// like them; est nil when the body was not read), or its path is Gemini's
// streamGenerateContent (Google's APIs and Vertex AI's, the query, as Envoy sends the
// path, ignored). A front door asks such a request's upstream for no content coding
// (responseusage.StreamAcceptEncoding).
func Streamed(path string, est *estimate.Request) bool {
	if est != nil && est.Stream {
		return true
	}
	path, _, _ = strings.Cut(path, "?")
	return strings.HasSuffix(path, ":streamGenerateContent")
}
