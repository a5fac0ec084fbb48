package requestbody

import (
	"net/http"
	"slices"
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
// charged when it was generated, and DELETE removes one; save a PATCH that may start
// or scale a dedicated deployment, billed later: Deferred), a POST to an endpoint that
// generates nothing (unbilledPaths), or a POST that stores, updates or cancels
// something and generates nothing (freePOST: an upload, a vector store, an assistant,
// a stored chat completion's metadata). Without this rule the usage a retrieval or an
// update shows would be charged a second time, a token count's input estimate would be
// charged when its answer reports no usage, at the fallback price when its model is
// priced nowhere, and an upload would be settled incomplete at an unknown cost. Such a
// request is still admitted, and settled at the provider's price of it
// (UnbilledCost). The path is the one the upstream gets, unchanged. An unknown method
// ("", a proxy that did not say) counts as a POST: a request is never free by doubt.
func Unbilled(method, path string) bool {
	if !generates(method) {
		return Deferred(method, path, false) == "" // not a PATCH that starts a dedicated deployment
	}
	for _, p := range unbilledPaths {
		if strings.HasSuffix(path, p) {
			return true
		}
	}
	return freePOST(path)
}

// freeTails are the ends of the paths, as segments, of the POSTs that store, update or
// cancel something and generate nothing the provider charges per request ("*" is one
// id, idSegment). OpenAI's, unless said: a file uploaded (Anthropic's, Gemini's and
// Mistral's POST .../files too, a container's and an agent environment's files), a
// multipart upload and its parts; a vector store, its files and file batches created or
// updated (OpenAI bills a vector store's storage by the gigabyte-day, not per request);
// an assistant, a thread (POST /v1/threads creates it, runs nothing), its messages, a
// run's metadata; a conversation's items; an eval created or updated, an eval run
// cancelled (POST /v1/evals/{id}/runs/{run}); a fine-tuning job paused; a grader
// validated (not run); a fine-tuned checkpoint shared with projects (its permissions);
// a stored chat completion's metadata updated (the OpenAI SDK's
// chat.completions.update: POST /v1/chat/completions/{id}, whose answer is the stored
// completion, usage and all). Left billed by their path: POST /v1/conversations and
// /v1/conversations/{id} (OpenAI's create and update are free, but Mistral's same paths
// start and continue a conversation, which generates: OpenAI's answer, the conversation
// object, settles them at 0 instead, inflight.FromResponse); in doubt, a vector store's
// search, and every endpoint not listed.
var freeTails = [][]string{
	{"files"},
	{"uploads"}, {"uploads", "*", "parts"}, {"uploads", "*", "complete"},
	{"vector_stores"}, {"vector_stores", "*"}, {"vector_stores", "*", "files", "*"}, {"vector_stores", "*", "file_batches"},
	{"assistants"}, {"assistants", "*"},
	{"threads"}, {"threads", "*"}, {"threads", "*", "messages"}, {"threads", "*", "messages", "*"}, {"threads", "*", "runs", "*"},
	{"conversations", "*", "items"},
	{"evals"}, {"evals", "*"}, {"evals", "*", "runs", "*"},
	{"fine_tuning", "jobs", "*", "pause"}, {"fine_tuning", "alpha", "graders", "validate"},
	{"fine_tuning", "checkpoints", "?", "permissions"},
	{"chat", "completions", "*"},
}

// freeCollections are the collections of administration, /v1/{collection} and every
// path under it, that store, update or remove something no model works on, each a name
// only its provider uses: Anthropic's memory stores and their memories (a memory's
// content is text, up to a document's length), OpenAI's and Anthropic's skills (a
// multipart upload of their files) and vaults (credentials), OpenAI's webhook endpoints,
// Anthropic's self-hosted environments (and their work items' acknowledgements and
// heartbeats), tunnels, user profiles and compliance reviews. Not /v1/agents (Mistral's
// /v1/agents/completions generates), nor another version's (Mistral's /v2/skills, the
// Gemini API's /v1beta/environments): billed, in doubt. Before 2026-12-03 these were
// billed: charged their body's input estimate at the fallback price (they name no
// model), counted unpriced, an upload settled at an unknown cost.
var freeCollections = []string{"memory_stores", "skills", "vaults", "webhook_endpoints", "environments", "tunnels", "user_profiles", "compliance"}

// freePOST reports whether a POST to path generates nothing the provider charges per
// request, though its answer may show a usage: one of freeTails; a cancellation (a last
// segment "cancel", Gemini's ":cancel": of a response, a batch, a run, a job, an
// upload; POST /v1/responses/{id}/cancel answers the response with its usage, but a
// response run in the background, the only one there is to cancel, is refused as billed
// later, or was let through as such: its cost is not the front door's to see); an
// archival or a pause (a last segment "archive" or "pause": Anthropic's sessions, their
// threads, deployments and dreams archived, a deployment paused, OpenAI's automations
// and Mistral's schedules paused, Mistral's fine-tuned models archived; they stop or
// hide something and start nothing, and were charged their body's estimate at the
// fallback price before 2026-12-03; an unpause or a resume starts work again, and is
// billed later: Deferred); or
// OpenAI's and Anthropic's administration (POST /v1/organization/..., /v1/organizations/...,
// and freeCollections).
// Never a path Deferred names, whose refusal ext_proc would then skip. The path is
// compared as Deferred compares it (comparable); one with a dot segment or a backslash,
// which a server may resolve to another path, is not free.
func freePOST(path string) bool {
	if Deferred(http.MethodPost, path, false) != "" {
		return false
	}
	p := comparable(path)
	if strings.Contains(p, `\`) {
		return false
	}
	segs := strings.Split(p, "/")
	if slices.ContainsFunc(segs, func(s string) bool { return s == "." || s == ".." }) {
		return false
	}
	last := segs[len(segs)-1]
	if last == "cancel" || strings.HasSuffix(last, ":cancel") || last == "archive" || last == "pause" {
		return true
	}
	for i := 1; i < len(segs)-1; i++ {
		if segs[i-1] == "v1" && (segs[i] == "organization" || segs[i] == "organizations") && segs[i+1] != "" {
			return true
		}
	}
	for i := 1; i < len(segs); i++ {
		if segs[i-1] == "v1" && slices.Contains(freeCollections, segs[i]) {
			return true
		}
	}
	for _, tail := range freeTails {
		if endsWith(segs, tail) {
			return true
		}
	}
	return false
}

// endsWith reports whether segs ends with tail, each "*" of it an id (idSegment), each
// "?" any segment but an empty one (a fine-tuned checkpoint's name, "ft:gpt-4o-mini:org::id",
// is no id of letters and digits).
func endsWith(segs, tail []string) bool {
	if len(segs) <= len(tail) {
		return false
	}
	segs = segs[len(segs)-len(tail):]
	for i, t := range tail {
		switch t {
		case "*":
			if !idSegment(segs[i]) {
				return false
			}
		case "?":
			if segs[i] == "" {
				return false
			}
		default:
			if segs[i] != t {
				return false
			}
		}
	}
	return true
}

// idSegment reports whether a path segment is an object's id as OpenAI writes them
// (chatcmpl-abc123, file-abc123, vs_abc123, thread_abc123): letters, digits, '-' and
// '_', with at least one digit, '-' or '_'. A word ("stream", "runs", "search") is no
// id: a path that names another endpoint after a collection is not taken for an
// update of one of its objects.
func idSegment(s string) bool {
	marked := false
	for _, c := range s {
		switch {
		case c >= '0' && c <= '9', c == '-', c == '_':
			marked = true
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		default:
			return false
		}
	}
	return marked
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
