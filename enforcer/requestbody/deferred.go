package requestbody

import (
	"bytes"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/tollgate-dev/tollgate/enforcer/estimate"
	"github.com/tollgate-dev/tollgate/enforcer/internal/jsonscan"
)

// Endpoints whose cost is billed later, out of a front door's sight (Deferred).
const (
	DeferredBatches    = "batches"              // OpenAI POST /v1/batches, Anthropic POST /v1/messages/batches, Gemini :batchGenerateContent, Bedrock POST /async-invoke and /model-invocation-job, Vertex AI POST .../batchPredictionJobs, Mistral POST /v1/batch/jobs, Perplexity POST /async/chat/completions and /v1/async/sonar, Fireworks' batchInferenceJobs
	DeferredAssistants = "assistants_runs"      // OpenAI POST /v1/threads/runs, /v1/threads/{id}/runs, .../submit_tool_outputs
	DeferredFineTuning = "fine_tuning"          // OpenAI POST /v1/fine_tuning/jobs, Vertex AI POST .../tuningJobs, Together POST /v1/fine-tunes, Fireworks' fine-tuning jobs
	DeferredRealtime   = "realtime_sessions"    // OpenAI POST /v1/realtime/sessions, /transcription_sessions, /client_secrets, /calls, /translations/client_secrets, /v1/live/sessions; Azure OpenAI POST /openai/realtimeapi/sessions, /transcription_sessions
	DeferredVideos     = "videos"               // OpenAI POST /v1/videos, /v1/videos/{id}/remix, Veo's :predictLongRunning, xAI's /v1/videos/generations, Azure OpenAI's .../video/generations/jobs
	DeferredBackground = "background_responses" // OpenAI POST /v1/responses with "background": true
	// DeferredInteractions: the Gemini API's Interactions API (POST /v1beta/interactions)
	// run in the background ("background": true) or by an agent ("agent", "agent_config":
	// Deep Research and the like, whose loops run at Google): their usage comes only with
	// a later GET. A call of a model in the foreground is charged from its answer's usage
	// (since 2026-11-30).
	DeferredInteractions = "interactions"
	// DeferredEvals: OpenAI's eval runs (POST /v1/evals/{id}/runs), which sample models
	// and grade with them in the background, and its grader runs
	// (/v1/fine_tuning/alpha/graders/run), whose model graders' tokens come back in a
	// shape of their own (metadata.token_usage), not a usage read here.
	DeferredEvals = "eval_runs"
	// DeferredChatKit: OpenAI's ChatKit sessions (POST /v1/chatkit/sessions) mint a
	// client secret with which a browser runs an Agent Builder workflow at OpenAI
	// directly, as a Realtime client secret does.
	DeferredChatKit = "chatkit_sessions"
	// DeferredAgents: Anthropic's Managed Agents (POST /v1/sessions, /v1/sessions/{id}/events,
	// /v1/deployments, /v1/deployments/{id}/run and /unpause, /v1/dreams), the Gemini
	// API's agent triggers (POST /v1beta/triggers, /v1beta/triggers/{id}/executions) and
	// OpenAI's Agents API (POST /v1/agents/sessions, /v1/agents/sessions/{id}/events,
	// /v1/agents/automations, .../{id}/invocations and /resume, /v1/agents/environments)
	// and Vertex AI Agent Engine's queries (.../reasoningEngines/{id}:query, :streamQuery):
	// the agent works in the provider's environment, billed for its tokens (and
	// Anthropic's session hours) as it runs; the request only starts, schedules or
	// steers it.
	DeferredAgents = "agent_sessions"
	// DeferredContextCaches: the Gemini API's and Vertex AI's explicit context caches
	// (POST .../cachedContents), billed for the tokens they hold by the hour of their
	// TTL, after the request.
	DeferredContextCaches = "context_caches"
	// DeferredFileIndexing: Gemini File Search's imports (:importFile,
	// :uploadToFileSearchStore) and Vertex AI RAG Engine's (.../ragFiles:import,
	// :upload), whose embeddings are billed as the long-running operation indexes the
	// file.
	DeferredFileIndexing = "file_indexing"
	// DeferredContainers: OpenAI's containers (POST /v1/containers), the code
	// interpreter's sandboxes, billed by the container session, which outlives the
	// request.
	DeferredContainers = "containers"
	// DeferredDedicated: the dedicated deployments of the open-model hosts, Fireworks'
	// (POST /v1/accounts/{id}/deployments, a deployment's :undelete, its PATCH and
	// PATCH :scale) and Together's dedicated endpoints (POST /v1/endpoints, an
	// endpoint's PATCH, which starts it with "state": "STARTED"): GPUs reserved for the
	// account, billed by the hour while they run, whatever tokens pass through them.
	DeferredDedicated = "dedicated_deployments"
)

// DeferredAllowed is the set of the endpoints billed later (Deferred's names) that an
// operator lets through: all of them with TOLLGATE_DEFERRED_BILLING=allow, those
// TOLLGATE_DEFERRED_BILLING_ALLOW lists with refuse, none by default (nil).
type DeferredAllowed map[string]bool

// Allows tells whether requests of the deferred endpoint go through.
func (a DeferredAllowed) Allows(endpoint string) bool { return a[endpoint] }

// AllowDeferred is the DeferredAllowed of endpoints, each one of DeferredEndpoints; the
// error names the first that is not.
func AllowDeferred(endpoints ...string) (DeferredAllowed, error) {
	a := DeferredAllowed{}
	for _, e := range endpoints {
		if !slices.Contains(DeferredEndpoints, e) {
			return nil, fmt.Errorf("%q is not an endpoint billed later (one of %s)", e, strings.Join(DeferredEndpoints, ", "))
		}
		a[e] = true
	}
	return a, nil
}

// DeferredEndpoints lists every name Deferred returns (metrics and docs).
var DeferredEndpoints = []string{DeferredBatches, DeferredAssistants, DeferredFineTuning, DeferredRealtime, DeferredVideos, DeferredBackground,
	DeferredInteractions, DeferredEvals, DeferredChatKit, DeferredAgents, DeferredContextCaches, DeferredFileIndexing, DeferredContainers, DeferredDedicated}

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
// POST; a PATCH is deferred only when it may start or scale a dedicated deployment
// (DeferredDedicated), and Unbilled then does not take it for free.
func Deferred(method, path string, background bool) string {
	if !generates(method) {
		if strings.EqualFold(method, http.MethodPatch) && dedicated(method, comparable(path)) {
			return DeferredDedicated // a PATCH that may start one or add replicas
		}
		return ""
	}
	path = comparable(path)
	switch {
	case dedicated(method, path):
		return DeferredDedicated
	case strings.HasSuffix(path, "/batches"), strings.HasSuffix(path, ":batchGenerateContent"),
		strings.HasSuffix(path, ":asyncBatchEmbedContent"),
		// Amazon Bedrock: an asynchronous invocation (StartAsyncInvoke) and a batch
		// inference job (CreateModelInvocationJob) write their output to S3, billed then.
		strings.HasSuffix(path, "/async-invoke"), strings.HasSuffix(path, "/model-invocation-job"),
		// Google Vertex AI: a batch prediction job (Gemini's or Claude's) reads its
		// input from and writes its output to Cloud Storage or BigQuery, billed then.
		strings.HasSuffix(path, "/batchpredictionjobs"),
		// Mistral's batch jobs.
		strings.HasSuffix(path, "/batch/jobs"),
		// Perplexity's asynchronous calls (sonar-deep-research's): the answer is the job,
		// its usage and cost come with a later GET.
		strings.HasSuffix(path, "/async/chat/completions"), strings.HasSuffix(path, "/async/sonar"),
		// Fireworks' batch inference jobs (its datasets in, its datasets out).
		strings.HasSuffix(path, "/batchinferencejobs"):
		return DeferredBatches
	case strings.Contains(path, "/threads/") && (strings.HasSuffix(path, "/runs") || strings.HasSuffix(path, "/submit_tool_outputs")):
		return DeferredAssistants
	case strings.HasSuffix(path, "/fine_tuning/jobs"), strings.HasSuffix(path, "/tuningjobs"), // OpenAI's; Vertex AI's
		strings.HasSuffix(path, "/tunedmodels"), // the Gemini API's
		strings.HasSuffix(path, "/fine-tunes"),  // Together's
		strings.HasSuffix(path, "/supervisedfinetuningjobs"), strings.HasSuffix(path, "/reinforcementfinetuningjobs"),
		strings.HasSuffix(path, "/dpojobs"),                                                // Fireworks'
		strings.Contains(path, "/fine_tuning/jobs/") && strings.HasSuffix(path, "/resume"): // a paused job goes on
		return DeferredFineTuning
	case strings.HasSuffix(path, "/realtime/sessions"), strings.HasSuffix(path, "/realtime/transcription_sessions"),
		strings.HasSuffix(path, "/realtime/client_secrets"),
		// Azure OpenAI's Realtime preview: a WebRTC session's ephemeral key, minted with
		// the route's api-key, then used at Azure's realtimeapi-preview host directly.
		strings.HasSuffix(path, "/realtimeapi/sessions"), strings.HasSuffix(path, "/realtimeapi/transcription_sessions"),
		// A WebRTC call (its SDP offer) and a SIP call accepted: the audio then flows
		// between the caller and OpenAI.
		strings.HasSuffix(path, "/realtime/calls"), strings.Contains(path, "/realtime/calls/") && strings.HasSuffix(path, "/accept"),
		// The Gemini API's ephemeral tokens, for its Live API straight from a client;
		// Mistral's client sessions, the same for its realtime API.
		strings.HasSuffix(path, "/auth_tokens"), strings.HasSuffix(path, "/client/sessions"),
		// The Gemini API's Live Interactions straight from a client (@google/genai 3.6):
		// an interaction's auth tokens (the suffix above) and its WebRTC signaling (an SDP
		// offer), after which the media flows between the client and Google.
		strings.Contains(path, "/interactions/") && strings.HasSuffix(path, ":webrtc"),
		// OpenAI's Realtime Translation client secrets, and its Live API's WebRTC
		// sessions (created, forked onto a new connection) and SIP calls accepted.
		strings.HasSuffix(path, "/realtime/translations/client_secrets"),
		strings.HasSuffix(path, "/live/sessions"),
		strings.Contains(path, "/live/sessions/") && (strings.HasSuffix(path, "/accept") || strings.HasSuffix(path, "/fork")):
		return DeferredRealtime
	case strings.HasSuffix(path, "/videos"), strings.HasSuffix(path, "/videos/edits"), strings.HasSuffix(path, "/videos/extensions"),
		strings.Contains(path, "/videos/") && strings.HasSuffix(path, "/remix"),
		// xAI's grok-imagine-video, Azure OpenAI's Sora (a job under /openai/v1) and the
		// video tasks of OpenAI-compatible aggregators: a request id or a job, polled for.
		strings.HasSuffix(path, "/videos/generations"), strings.HasSuffix(path, "/video/generations/jobs"),
		strings.HasSuffix(path, "/video/generations"),
		// Veo, on the Gemini API and on Vertex AI: the video is generated by a
		// long-running operation, polled for afterwards.
		strings.HasSuffix(path, ":predictLongRunning"):
		return DeferredVideos
	case strings.Contains(path, "/evals/") && strings.HasSuffix(path, "/runs"), strings.HasSuffix(path, "/fine_tuning/alpha/graders/run"),
		// Mistral's judges run over its logged traffic.
		strings.HasSuffix(path, "/live-judging"):
		return DeferredEvals
	case strings.HasSuffix(path, "/chatkit/sessions"):
		return DeferredChatKit
	case strings.HasSuffix(path, "/v1/sessions"), strings.Contains(path, "/v1/sessions/") && strings.HasSuffix(path, "/events"),
		strings.HasSuffix(path, "/v1/deployments"),
		strings.Contains(path, "/v1/deployments/") && (strings.HasSuffix(path, "/run") || strings.HasSuffix(path, "/unpause")),
		strings.HasSuffix(path, "/v1/dreams"),
		strings.HasSuffix(path, "/triggers"), strings.Contains(path, "/triggers/") && strings.HasSuffix(path, "/executions"),
		// OpenAI's Agents API: a session created or sent an event (its agent runs at
		// OpenAI), an automation saved, invoked or resumed (it runs on its schedule), a
		// hosted environment made ready for sessions.
		strings.HasSuffix(path, "/agents/sessions"), strings.Contains(path, "/agents/sessions/") && strings.HasSuffix(path, "/events"),
		strings.HasSuffix(path, "/agents/automations"),
		strings.Contains(path, "/agents/automations/") && (strings.HasSuffix(path, "/invocations") || strings.HasSuffix(path, "/resume")),
		strings.HasSuffix(path, "/agents/environments"),
		// Mistral's workflows: an execution started, restarted, resumed or scheduled.
		strings.Contains(path, "/workflows/") && (strings.HasSuffix(path, "/execute") || strings.HasSuffix(path, "/start") ||
			strings.HasSuffix(path, "/restart") || strings.HasSuffix(path, "/trigger") || strings.HasSuffix(path, "/resume")),
		strings.HasSuffix(path, "/workflows/schedules"),
		// Vertex AI Agent Engine's agents queried: the agent runs at Google, its model
		// calls billed to the project, its answer the agent's own output.
		strings.Contains(path, "/reasoningengines/") && (strings.HasSuffix(path, ":query") || strings.HasSuffix(path, ":streamQuery")):
		return DeferredAgents
	case strings.HasSuffix(path, "/cachedcontents"):
		return DeferredContextCaches
	case strings.HasSuffix(path, ":importFile"), strings.HasSuffix(path, ":uploadToFileSearchStore"),
		// Vertex AI RAG Engine's imports and uploads: the files are embedded (and parsed
		// by Gemini with the LLM parser) as the long-running operation runs, billed to
		// the project then.
		strings.HasSuffix(path, "/ragfiles:import"), strings.HasSuffix(path, "/ragfiles:upload"),
		// Mistral's document libraries: a document added or reprocessed is read (OCR) and
		// indexed, billed as it is.
		strings.Contains(path, "/libraries/") && (strings.HasSuffix(path, "/documents") || strings.HasSuffix(path, "/reprocess")):
		return DeferredFileIndexing
	case strings.HasSuffix(path, "/containers"):
		return DeferredContainers
	case background && strings.HasSuffix(path, "/responses"):
		return DeferredBackground
	case background && strings.HasSuffix(path, "/interactions"):
		return DeferredInteractions
	}
	return ""
}

// dedicated reports whether a request of method to path (comparable) creates, starts
// or scales a dedicated deployment (DeferredDedicated): a POST of Fireworks'
// /v1/accounts/{id}/deployments or Together's /v1/endpoints, a POST of a Fireworks
// deployment's :undelete, a PATCH of one deployment or endpoint (Fireworks' update and
// :scale, Together's update, which starts or stops it and sets its replicas). A PATCH
// that stops one is refused with the rest: the path does not tell them apart, and
// stopping one that a front door could not have started is the console's work.
func dedicated(method, path string) bool {
	resource, verb := path, ""
	if i := strings.LastIndexByte(path, ':'); i > strings.LastIndexByte(path, '/') {
		resource, verb = path[:i], path[i+1:]
	}
	segs := strings.Split(resource, "/")
	collection := endsWith(segs, []string{"accounts", "?", "deployments"}) || endsWith(segs, []string{"v1", "endpoints"})
	one := endsWith(segs, []string{"accounts", "?", "deployments", "?"}) || endsWith(segs, []string{"v1", "endpoints", "?"})
	if strings.EqualFold(method, http.MethodPatch) {
		return one && (verb == "" || strings.EqualFold(verb, "scale"))
	}
	return collection && verb == "" || one && strings.EqualFold(verb, "undelete")
}

// comparable is a request path as Deferred compares it: ext_proc sees the path as the
// client sent it (Envoy's :path, escapes and all), so "/v1/batche%73" or "/v1/batches/"
// must name the batches too, in case the provider reads them so. The gateway's path is
// already decoded. Lower-cased too, but Gemini's method names keep their case in the
// comparisons above ("batchGenerateContent"), so those are compared as they are. Each
// segment is compared without its ";" parameters, which servlet containers (Tomcat,
// Jetty) drop before they route: "/v1/batches;x=1" is a batch to them.
func comparable(path string) string {
	if strings.Contains(path, "%") {
		if p, err := url.PathUnescape(path); err == nil {
			path = p
		}
	}
	if strings.Contains(path, ";") {
		segs := strings.Split(path, "/")
		for i, seg := range segs {
			segs[i], _, _ = strings.Cut(seg, ";")
		}
		path = strings.Join(segs, "/")
	}
	for len(path) > 1 && strings.HasSuffix(path, "/") {
		path = path[:len(path)-1]
	}
	if i := strings.LastIndexByte(path, ':'); i >= 0 {
		return strings.ToLower(path[:i]) + path[i:]
	}
	return strings.ToLower(path)
}

// InBackground is Deferred's background for a request body: the estimate's reading
// (est, nil when the estimate could not read the body; a hint of the path's model alone,
// Unread, read none of it either), or, without one, the body's own top-level
// "background": true (AsksBackground).
func InBackground(est *estimate.Request, body []byte) bool {
	if est != nil && !est.Unread {
		return est.Background
	}
	return AsksBackground(body)
}

// AsksBackground reports whether a JSON body's top level holds "background": true. It is
// the check of a body the estimate could not read (estimate.Input refuses a number
// beyond float64's range, which a provider may take as infinity): a Responses call run
// in the background is deferred billing however the rest of its body reads. A body that
// is not a well-formed JSON object asks nothing (the provider refuses it too).
func AsksBackground(body []byte) bool {
	background := false
	eachTopLevel(body, func(key, value []byte) {
		if jsonscan.KeyIs(key, "background") {
			// The last of repeated keys wins, as in encoding/json and Python's json.
			background = bytes.HasPrefix(value, []byte("true"))
		}
	})
	return background
}

// NamesAgent reports whether a JSON body's top level names an agent to run ("agent" or
// "agent_config" with a value other than null): an Interactions API call run by an
// agent, whose loops run at the provider and whose usage its answer does not carry.
func NamesAgent(body []byte) bool {
	agent := false
	eachTopLevel(body, func(key, value []byte) {
		if jsonscan.KeyIs(key, "agent") || jsonscan.KeyIs(key, "agent_config") {
			agent = agent || !bytes.HasPrefix(value, []byte("null"))
		}
	})
	return agent
}

// eachTopLevel calls fn with each member of a JSON body's top-level object: its key (the
// string, quotes included) and its value (from its first byte to the body's end). A body
// that is not a well-formed JSON object has none.
func eachTopLevel(body []byte, fn func(key, value []byte)) {
	if !jsonscan.WellFormed(body) {
		return
	}
	i := jsonscan.SkipSpace(body, 0)
	if body[i] != '{' {
		return
	}
	for i = jsonscan.SkipSpace(body, i+1); body[i] != '}'; {
		end := jsonscan.SkipString(body, i)
		key := body[i:end]
		i = jsonscan.SkipSpace(body, jsonscan.SkipSpace(body, end)+1) // past the colon
		fn(key, body[i:])
		if i = jsonscan.SkipSpace(body, jsonscan.SkipValue(body, i)); body[i] == ',' {
			i = jsonscan.SkipSpace(body, i+1)
		}
	}
}

// AlwaysJSON reports whether a request to path has a JSON body whatever its
// Content-Type says: an OpenAI Responses call, whose body must be read (not streamed
// past as an upload) for its "background" to be seen.
func AlwaysJSON(path string) bool { return strings.HasSuffix(comparable(path), "/responses") }
