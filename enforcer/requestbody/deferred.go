package requestbody

import (
	"net/url"
	"strings"
)

// Endpoints whose cost is billed later, out of a front door's sight (Deferred).
const (
	DeferredBatches    = "batches"              // OpenAI POST /v1/batches, Anthropic POST /v1/messages/batches, Gemini :batchGenerateContent, Bedrock POST /async-invoke and /model-invocation-job
	DeferredAssistants = "assistants_runs"      // OpenAI POST /v1/threads/runs, /v1/threads/{id}/runs, .../submit_tool_outputs
	DeferredFineTuning = "fine_tuning"          // OpenAI POST /v1/fine_tuning/jobs
	DeferredRealtime   = "realtime_sessions"    // OpenAI POST /v1/realtime/sessions, /transcription_sessions, /client_secrets
	DeferredVideos     = "videos"               // OpenAI POST /v1/videos, /v1/videos/{id}/remix
	DeferredBackground = "background_responses" // OpenAI POST /v1/responses with "background": true
)

// DeferredEndpoints lists every name Deferred returns (metrics and docs).
var DeferredEndpoints = []string{DeferredBatches, DeferredAssistants, DeferredFineTuning, DeferredRealtime, DeferredVideos, DeferredBackground}

// Deferred names the kind of a request whose cost its own answer does not carry: the
// provider does the work later and bills it then (a batch, an Assistants run, a
// fine-tuning job, a video, a Responses call run in the background), or the request
// mints a short-lived key with which the client then talks to the provider directly
// (a Realtime session). A front door that charges what the answer reports would let
// such requests through at no cost, and the member's limit would not hold; the enforcer
// refuses them unless an operator allows them (docs/enforcer.md, "Deferred billing").
// "" for any other request. background is the body's top-level "background": true
// (estimate.Request.Background). The path is the one the upstream gets, after any
// route prefix: only its end is compared, as a server would read it (percent-escapes
// decoded, trailing slashes dropped, letters in any case: see comparable), so that a
// spelling a provider accepts is no way around it. An unknown method ("") counts as a
// POST.
func Deferred(method, path string, background bool) string {
	if !generates(method) {
		return ""
	}
	path = comparable(path)
	switch {
	case strings.HasSuffix(path, "/batches"), strings.HasSuffix(path, ":batchGenerateContent"),
		strings.HasSuffix(path, ":asyncBatchEmbedContent"),
		// Amazon Bedrock: an asynchronous invocation (StartAsyncInvoke) and a batch
		// inference job (CreateModelInvocationJob) write their output to S3, billed then.
		strings.HasSuffix(path, "/async-invoke"), strings.HasSuffix(path, "/model-invocation-job"):
		return DeferredBatches
	case strings.Contains(path, "/threads/") && (strings.HasSuffix(path, "/runs") || strings.HasSuffix(path, "/submit_tool_outputs")):
		return DeferredAssistants
	case strings.HasSuffix(path, "/fine_tuning/jobs"):
		return DeferredFineTuning
	case strings.HasSuffix(path, "/realtime/sessions"), strings.HasSuffix(path, "/realtime/transcription_sessions"),
		strings.HasSuffix(path, "/realtime/client_secrets"):
		return DeferredRealtime
	case strings.HasSuffix(path, "/videos"), strings.Contains(path, "/videos/") && strings.HasSuffix(path, "/remix"):
		return DeferredVideos
	case background && strings.HasSuffix(path, "/responses"):
		return DeferredBackground
	}
	return ""
}

// comparable is a request path as Deferred compares it: ext_proc sees the path as the
// client sent it (Envoy's :path, escapes and all), so "/v1/batche%73" or "/v1/batches/"
// must name the batches too, in case the provider reads them so. The gateway's path is
// already decoded. Lower-cased too, but Gemini's method names keep their case in the
// comparisons above ("batchGenerateContent"), so those are compared as they are.
func comparable(path string) string {
	if strings.Contains(path, "%") {
		if p, err := url.PathUnescape(path); err == nil {
			path = p
		}
	}
	for len(path) > 1 && strings.HasSuffix(path, "/") {
		path = path[:len(path)-1]
	}
	if i := strings.LastIndexByte(path, ':'); i >= 0 {
		return strings.ToLower(path[:i]) + path[i:]
	}
	return strings.ToLower(path)
}
