package e2e_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/requestbody"
)

// sdkEndpoint is one path an official SDK POSTs to: the SDK, and the path's template
// as its code spells it ("/videos/${videoID}/remix", "{model}:predictLongRunning").
type sdkEndpoint struct{ sdk, template string }

func (e sdkEndpoint) String() string { return e.sdk + " " + e.template }

// Every POST of the official SDKs (e2e/sdk's pinned npm packages) is a request some
// member's client may send through the enforcer. Each is either charged from what its
// answer reports, free (administration, lists, token counts), or billed later, out of
// the enforcer's sight, and then refused by default (requestbody.Deferred, docs/enforcer.md
// "Deferred billing"). The endpoints are read from the SDKs' own code, and each must be
// classified in sdkEndpointClasses: an SDK update that adds one fails here until
// someone decides what it costs. Before this test, OpenAI's video edits and extensions,
// eval runs, WebRTC calls and ChatKit sessions, Anthropic's Managed Agents, Gemini's
// context caches, file imports, agent triggers and ephemeral tokens, and Mistral's batch
// jobs, document libraries and workflows went through at the price of their request's
// few tokens. The SDKs: OpenAI's and Anthropic's (this._client.post), Google Gen AI's
// and Mistral's (generated: formatMap and pathToFunc, the method named after the path).
func TestEverySDKEndpointIsClassified(t *testing.T) {
	dir := sdkDir(t)
	found := sdkPOSTs(t, filepath.Join(dir, "node_modules"))
	if len(found) < 150 {
		t.Fatalf("read only %d endpoints from the SDKs: has their code's shape changed?", len(found))
	}
	seen := map[sdkEndpoint]bool{}
	var unclassified []string
	for _, e := range found {
		seen[e] = true
		want, ok := sdkEndpointClasses[e]
		if !ok {
			if !sdkAdministration(e) {
				unclassified = append(unclassified, e.String())
			}
			continue
		}
		path := sdkRequestPath(e)
		deferred, unbilled := want, false
		switch want {
		case sdkCharged:
			deferred = ""
		case sdkFree:
			deferred, unbilled = "", true
		}
		if got := requestbody.Deferred("POST", path, false); got != deferred {
			t.Errorf("%s (%s): Deferred(POST %s) = %q, want %q", e, want, path, got, deferred)
		}
		if got := requestbody.Unbilled("POST", path); got != unbilled {
			t.Errorf("%s (%s): Unbilled(POST %s) = %v, want %v", e, want, path, got, unbilled)
		}
	}
	// Administration is never billed later; OpenAI's and Anthropic's organization APIs,
	// and the collections no other provider generates at (sdkFreeAdministration), are
	// Unbilled (their other administration paths, such as OpenAI's /v1/projects/..., are
	// Vertex AI's generations' too, and Anthropic's /v1/agents/... Mistral's, and stay
	// charged).
	for _, e := range found {
		if !sdkAdministration(e) {
			continue
		}
		path := sdkRequestPath(e)
		if got := requestbody.Deferred("POST", path, false); got != "" {
			t.Errorf("%s (administration): Deferred(POST %s) = %q, want none", e, path, got)
		}
		if sdkFreeAdministration(e) && !requestbody.Unbilled("POST", path) {
			t.Errorf("%s (administration): Unbilled(POST %s) = false, want true", e, path)
		}
	}
	sort.Strings(unclassified)
	for _, u := range unclassified {
		t.Errorf("%s: not classified in sdkEndpointClasses: is it charged from its answer, free, or billed later?", u)
	}
	for e := range sdkEndpointClasses {
		if !seen[e] {
			t.Errorf("%s: classified, but no SDK posts to it any more", e)
		}
	}
	if t.Failed() {
		return
	}
	// Each kind the classes name is one the enforcer lists (metrics, docs).
	for _, want := range sdkEndpointClasses {
		if want != sdkCharged && want != sdkFree && !slices.Contains(requestbody.DeferredEndpoints, want) {
			t.Errorf("%q is not in requestbody.DeferredEndpoints", want)
		}
	}
}

// The SDKs' ways of naming a POST's path:
//   - OpenAI's and Anthropic's: this._client.post('/path', ...) (since openai 7 often
//     this._client on a line and .post on the next) or, with parameters,
//     this._client.post((0, path_1.path) `/videos/${videoID}/remix`, ...); OpenAI's
//     helpers (its lib/, where embeddings are created) call client.post(...);
//   - Google Gen AI's hand-written methods: path = formatMap('{model}:generateContent', ...)
//     with the request's httpMethod after it;
//   - its generated ones: pathToFunc("/{api_version}/interactions"), method after it.
var (
	clientPost = regexp.MustCompile("\\b_?client\\s*\\.post\\(\\s*(?:\\(0, path_1\\.path\\)\\s*)?[`']([^`']+)[`']")
	// A list fetched by a POST (a vector store's search, a checkpoint's permissions):
	// this._client.getAPIList(path, Page, {body, method: 'post', ...}).
	clientListPost = regexp.MustCompile("\\b_?client\\s*\\.getAPIList\\(\\s*(?:\\(0, path_1\\.path\\)\\s*)?[`']([^`']+)[`'][^;]{0,400}?method: 'post'")
	genaiFormat    = regexp.MustCompile(`formatMap\('([^']+)'`)
	genaiPathFn    = regexp.MustCompile(`pathToFunc\("([^"]+)"\)`)
	genaiMethod    = regexp.MustCompile(`(?:httpMethod|method): ['"]([A-Z]+)['"]`)
	// AWS's SDKs: an operation's HTTP binding, ["POST", "/path", 200].
	awsOperation = regexp.MustCompile(`\["POST", "([^"]+)", \d+\]`)
)

// sdkPOSTs reads the POST endpoints of the three SDKs under modules.
func sdkPOSTs(t *testing.T, modules string) []sdkEndpoint {
	t.Helper()
	set := map[sdkEndpoint]bool{}
	for _, r := range []struct{ sdk, root string }{{"openai", "openai/resources"}, {"openai", "openai/lib"}, {"anthropic", "@anthropic-ai/sdk/resources"}} {
		sdk, root := r.sdk, r.root
		err := filepath.WalkDir(filepath.Join(modules, root), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".js") {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, re := range []*regexp.Regexp{clientPost, clientListPost} {
				for _, m := range re.FindAllSubmatch(b, -1) {
					set[sdkEndpoint{sdk, string(m[1])}] = true
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(filepath.Join(modules, "@google/genai/dist/node/index.cjs"))
	if err != nil {
		t.Fatal(err)
	}
	generatedPOSTs(set, "genai", b)
	// The Mistral SDK is generated as Gen AI's newer methods are: one file a method.
	err = filepath.WalkDir(filepath.Join(modules, "@mistralai/mistralai/esm/funcs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".js") {
			return err
		}
		b, err := os.ReadFile(p)
		if err == nil {
			generatedPOSTs(set, "mistral", b)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// AWS's SDK declares each operation's method and path: ["POST", "/model/{modelId}/converse", 200].
	b, err = os.ReadFile(filepath.Join(modules, "@aws-sdk/client-bedrock-runtime/dist-cjs/index.js"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range awsOperation.FindAllSubmatch(b, -1) {
		set[sdkEndpoint{"bedrock", string(m[1])}] = true
	}
	var out []sdkEndpoint
	for e := range set {
		out = append(out, e)
	}
	return out
}

// generatedPOSTs adds to set the paths code b names with formatMap or pathToFunc whose
// request is a POST: the method is the first one named after the path, before the next
// path (a method that names none is one of Gen AI's uploads or batches: a POST).
func generatedPOSTs(set map[sdkEndpoint]bool, sdk string, b []byte) {
	for _, re := range []*regexp.Regexp{genaiFormat, genaiPathFn} {
		for _, m := range re.FindAllSubmatchIndex(b, -1) {
			template := string(b[m[2]:m[3]])
			rest := b[m[1]:min(len(b), m[1]+3000)]
			if next := genaiFormat.FindIndex(rest); next != nil {
				rest = rest[:next[0]]
			}
			if next := genaiPathFn.FindIndex(rest); next != nil {
				rest = rest[:next[0]]
			}
			if mm := genaiMethod.FindSubmatch(rest); mm != nil && string(mm[1]) != "POST" {
				continue
			}
			set[sdkEndpoint{sdk, template}] = true
		}
	}
}

// templateParam matches a path parameter of the SDKs' templates: ${videoID}, {model}.
var templateParam = regexp.MustCompile(`\$?\{[^}]+\}`)

// sdkRequestPath is the path a request of endpoint e reaches the enforcer with: OpenAI's
// SDK puts its paths under the base URL's /v1, Gemini's under /v1beta; parameters are
// filled in (a model as Gemini names it: models/{id}) and a query left out.
func sdkRequestPath(e sdkEndpoint) string {
	p, _, _ := strings.Cut(e.template, "?")
	p, _, _ = strings.Cut(p, "#") // Mistral's "/v1/chat/completions#stream": the same path
	p = strings.ReplaceAll(p, "{api_version}", "v1beta")
	p = strings.ReplaceAll(p, "{model}", "models/some-model")
	p = templateParam.ReplaceAllString(p, "id_1")
	switch e.sdk {
	case "openai":
		return "/v1" + p
	case "genai":
		if !strings.HasPrefix(p, "/") {
			if !strings.HasPrefix(p, "upload/") {
				p = "v1beta/" + p
			}
			p = "/" + p
		}
	}
	return p
}

// sdkAdministration tells the endpoints of an organization's administration (keys,
// users, projects, workspaces, spend limits, webhooks, skills, vaults, memory stores,
// environments...), which no model works on: free, and not listed one by one.
func sdkAdministration(e sdkEndpoint) bool {
	for _, prefix := range sdkAdministrationPrefixes[e.sdk] {
		if strings.HasPrefix(e.template, prefix) {
			return true
		}
	}
	return false
}

// sdkAdministrationPrefixes are, by SDK, the paths of administration (sdkAdministration).
var sdkAdministrationPrefixes = map[string][]string{
	"openai": {"/organization/", "/projects/", "/skills", "/vaults", "/webhook_endpoints"},
	"anthropic": {"/v1/organizations/", "/v1/user_profiles", "/v1/vaults", "/v1/tunnels", "/v1/compliance/", "/v1/environments",
		"/v1/memory_stores", "/v1/skills", "/v1/agents"},
	"genai": {"/{api_version}/agents", "/{api_version}/credentials", "/{api_version}/environments", "/{api_version}/webhooks"},
}

// sdkFreeAdministration tells the administration endpoints (sdkAdministration) that are
// free (requestbody.Unbilled): the organization APIs, and the collections that store
// what no model works on (memory stores, skills, vaults, webhook endpoints, environments,
// tunnels, user profiles, compliance reviews); before 2026-12-03 all but the organization
// APIs were charged their body's estimate at the fallback price (TestAdministrationIsFree).
func sdkFreeAdministration(e sdkEndpoint) bool {
	for _, prefix := range sdkFreeAdministrationPrefixes[e.sdk] {
		if strings.HasPrefix(e.template, prefix) {
			return true
		}
	}
	return false
}

var sdkFreeAdministrationPrefixes = map[string][]string{
	"openai": {"/organization/", "/skills", "/vaults", "/webhook_endpoints"},
	"anthropic": {"/v1/organizations/", "/v1/user_profiles", "/v1/vaults", "/v1/tunnels", "/v1/compliance/", "/v1/environments",
		"/v1/memory_stores", "/v1/skills"},
}

// The classes of sdkEndpointClasses besides the requestbody.Deferred kinds. Each is
// checked against requestbody.Unbilled and Deferred, so an endpoint is either charged
// from its answer, free, or billed later: none falls between. Before 2026-12-02 the two
// were one class (""), and free POSTs (uploads, vector stores, assistants, threads,
// cancellations) were billed: their answers carry no usage, so each settled incomplete
// at an unknown cost, and a stored chat completion's metadata update was charged the
// usage its answer shows again.
const (
	// sdkCharged: charged from what its answer reports (its usage, else an estimate of
	// what it carried): it generates, or may, or its path is another provider's that
	// does (OpenAI's free POST /v1/conversations is Mistral's start of a conversation).
	// Never free by doubt.
	sdkCharged = "charged"
	// sdkFree: generates nothing billed per request (requestbody.Unbilled): settled at a
	// known 0 (docs/enforcer.md, "Unbilled endpoints").
	sdkFree = "free"
)

// sdkEndpointClasses classifies every other POST the SDKs make: sdkCharged, sdkFree, or
// the requestbody.Deferred kind of one billed later.
//
// Charged or free, though not obviously: the Responses API's compaction (its usage is
// read); Gemini's :predict (Imagen's images, billed apiece, would be charged their
// prompt's estimate alone; Google shut Imagen down in 2026: docs/enforcer.md, "Deferred
// billing"); OpenAI's vector stores and files (free: billed by the gigabyte-day of
// storage, not by request), but not a vector store's search (charged, in doubt); a Sora
// character (no price published; Sora's API closed on 2026-09-24). Charged though
// probably free, because nothing tells them from a generation yet: OpenAI's voices,
// voice consents, content provenance checks, agent definitions and Realtime call
// controls, Anthropic's session and deployment updates (not their archival or pause: free), Gemini's file registrations and
// file search stores, Mistral's agents, libraries and observability.
var sdkEndpointClasses = map[sdkEndpoint]string{
	// openai
	{"openai", "/chat/completions"}:                                                sdkCharged,
	{"openai", "/completions"}:                                                     sdkCharged,
	{"openai", "/responses"}:                                                       sdkCharged,
	{"openai", "/responses?beta=true"}:                                             sdkCharged,
	{"openai", "/responses/compact"}:                                               sdkCharged,
	{"openai", "/responses/compact?beta=true"}:                                     sdkCharged,
	{"openai", "/embeddings"}:                                                      sdkCharged,
	{"openai", "/audio/speech"}:                                                    sdkCharged,
	{"openai", "/audio/transcriptions"}:                                            sdkCharged,
	{"openai", "/audio/translations"}:                                              sdkCharged,
	{"openai", "/images/generations"}:                                              sdkCharged,
	{"openai", "/images/edits"}:                                                    sdkCharged,
	{"openai", "/images/variations"}:                                               sdkCharged,
	{"openai", "/responses/input_tokens"}:                                          sdkFree,
	{"openai", "/responses/input_tokens?beta=true"}:                                sdkFree,
	{"openai", "/moderations"}:                                                     sdkFree,
	{"openai", "/responses/${responseID}/cancel"}:                                  sdkFree,
	{"openai", "/responses/${responseID}/cancel?beta=true"}:                        sdkFree,
	{"openai", "/chat/completions/${completionID}"}:                                sdkFree,
	{"openai", "/assistants"}:                                                      sdkFree,
	{"openai", "/assistants/${assistantID}"}:                                       sdkFree,
	{"openai", "/threads"}:                                                         sdkFree,
	{"openai", "/threads/${threadID}"}:                                             sdkFree,
	{"openai", "/threads/${threadID}/messages"}:                                    sdkFree,
	{"openai", "/threads/${thread_id}/messages/${messageID}"}:                      sdkFree,
	{"openai", "/threads/${thread_id}/runs/${runID}"}:                              sdkFree,
	{"openai", "/threads/${thread_id}/runs/${runID}/cancel"}:                       sdkFree,
	{"openai", "/conversations"}:                                                   sdkCharged, // Mistral's path too: OpenAI's answer settles it at 0 (TestOpenAIConversationsAreFree)
	{"openai", "/conversations/${conversationID}"}:                                 sdkCharged,
	{"openai", "/conversations/${conversationID}/items"}:                           sdkFree,
	{"openai", "/files"}:                                                           sdkFree,
	{"openai", "/uploads"}:                                                         sdkFree,
	{"openai", "/uploads/${uploadID}/cancel"}:                                      sdkFree,
	{"openai", "/uploads/${uploadID}/complete"}:                                    sdkFree,
	{"openai", "/uploads/${uploadID}/parts"}:                                       sdkFree,
	{"openai", "/vector_stores"}:                                                   sdkFree,
	{"openai", "/vector_stores/${vectorStoreID}"}:                                  sdkFree,
	{"openai", "/vector_stores/${vectorStoreID}/file_batches"}:                     sdkFree,
	{"openai", "/vector_stores/${vectorStoreID}/files"}:                            sdkFree,
	{"openai", "/vector_stores/${vector_store_id}/file_batches/${batchID}/cancel"}: sdkFree,
	{"openai", "/vector_stores/${vector_store_id}/files/${fileID}"}:                sdkFree,
	{"openai", "/batches/${batchID}/cancel"}:                                       sdkFree,
	{"openai", "/fine_tuning/jobs/${fineTuningJobID}/cancel"}:                      sdkFree,
	{"openai", "/fine_tuning/jobs/${fineTuningJobID}/pause"}:                       sdkFree,
	{"openai", "/fine_tuning/alpha/graders/validate"}:                              sdkFree,
	{"openai", "/fine_tuning/checkpoints/${fineTunedModelCheckpoint}/permissions"}: sdkFree,
	{"openai", "/vector_stores/${vectorStoreID}/search"}:                           sdkCharged, // in doubt (above)
	{"openai", "/evals"}:                                                           sdkFree,
	{"openai", "/evals/${evalID}"}:                                                 sdkFree,
	{"openai", "/evals/${eval_id}/runs/${runID}/cancel"}:                           sdkFree,
	{"openai", "/decisions"}:                                                       sdkCharged, // a classification's usage, read as a Responses answer's
	{"openai", "/audio/voices"}:                                                    sdkCharged,
	{"openai", "/audio/voice_consents"}:                                            sdkCharged,
	{"openai", "/audio/voice_consents/${consentID}"}:                               sdkCharged,
	{"openai", "/content_provenance_checks"}:                                       sdkCharged,
	{"openai", "/agents"}:                                                          sdkCharged, // a reusable agent's definition
	{"openai", "/agents/${agentID}"}:                                               sdkCharged,
	{"openai", "/agents/sessions/${sessionID}"}:                                    sdkCharged, // its settings, for its next turns
	{"openai", "/agents/automations/${automationID}"}:                              sdkCharged,
	{"openai", "/agents/automations/${automationID}/pause"}:                        sdkFree,
	{"openai", "/agents/environments/${environmentID}/files"}:                      sdkFree,
	{"openai", "/agents/environments/templates"}:                                   sdkCharged,
	{"openai", "/agents/environments/templates/${environmentTemplateID}"}:          sdkCharged,
	{"openai", "/live/sessions/${sessionID}/hangup"}:                               sdkCharged,
	{"openai", "/live/sessions/${sessionID}/refer"}:                                sdkCharged,
	{"openai", "/live/sessions/${sessionID}/reject"}:                               sdkCharged,
	{"openai", "/containers/${containerID}/files"}:                                 sdkFree,
	{"openai", "/chatkit/sessions/${sessionID}/cancel"}:                            sdkFree,
	{"openai", "/realtime/calls/${callID}/hangup"}:                                 sdkCharged,
	{"openai", "/realtime/calls/${callID}/refer"}:                                  sdkCharged,
	{"openai", "/realtime/calls/${callID}/reject"}:                                 sdkCharged,
	{"openai", "/videos/characters"}:                                               sdkCharged,
	{"openai", "/batches"}:                                                         requestbody.DeferredBatches,
	{"openai", "/threads/runs"}:                                                    requestbody.DeferredAssistants,
	{"openai", "/threads/${threadID}/runs"}:                                        requestbody.DeferredAssistants,
	{"openai", "/threads/${thread_id}/runs/${runID}/submit_tool_outputs"}:          requestbody.DeferredAssistants,
	{"openai", "/fine_tuning/jobs"}:                                                requestbody.DeferredFineTuning,
	{"openai", "/fine_tuning/jobs/${fineTuningJobID}/resume"}:                      requestbody.DeferredFineTuning,
	{"openai", "/realtime/sessions"}:                                               requestbody.DeferredRealtime,
	{"openai", "/realtime/transcription_sessions"}:                                 requestbody.DeferredRealtime,
	{"openai", "/realtime/client_secrets"}:                                         requestbody.DeferredRealtime,
	{"openai", "/realtime/calls/${callID}/accept"}:                                 requestbody.DeferredRealtime,
	{"openai", "/realtime/calls"}:                                                  requestbody.DeferredRealtime,
	{"openai", "/realtime/translations/client_secrets"}:                            requestbody.DeferredRealtime,
	{"openai", "/live/sessions"}:                                                   requestbody.DeferredRealtime,
	{"openai", "/live/sessions/${sessionID}/accept"}:                               requestbody.DeferredRealtime,
	{"openai", "/live/sessions/${sessionID}/fork"}:                                 requestbody.DeferredRealtime,
	{"openai", "/agents/sessions"}:                                                 requestbody.DeferredAgents,
	{"openai", "/agents/sessions/${sessionID}/events"}:                             requestbody.DeferredAgents,
	{"openai", "/agents/automations"}:                                              requestbody.DeferredAgents,
	{"openai", "/agents/automations/${automationID}/invocations"}:                  requestbody.DeferredAgents,
	{"openai", "/agents/automations/${automationID}/resume"}:                       requestbody.DeferredAgents,
	{"openai", "/agents/environments"}:                                             requestbody.DeferredAgents,
	{"openai", "/videos"}:                                                          requestbody.DeferredVideos,
	{"openai", "/videos/${videoID}/remix"}:                                         requestbody.DeferredVideos,
	{"openai", "/videos/edits"}:                                                    requestbody.DeferredVideos,
	{"openai", "/videos/extensions"}:                                               requestbody.DeferredVideos,
	{"openai", "/evals/${evalID}/runs"}:                                            requestbody.DeferredEvals,
	{"openai", "/fine_tuning/alpha/graders/run"}:                                   requestbody.DeferredEvals,
	{"openai", "/chatkit/sessions"}:                                                requestbody.DeferredChatKit,
	{"openai", "/containers"}:                                                      requestbody.DeferredContainers,
	// anthropic
	{"anthropic", "/v1/messages"}:              sdkCharged,
	{"anthropic", "/v1/messages/count_tokens"}: sdkFree,
	// bedrock (Amazon Bedrock Runtime)
	{"bedrock", "/model/{modelId}/invoke"}:                      sdkCharged,
	{"bedrock", "/model/{modelId}/invoke-with-response-stream"}: sdkCharged,
	{"bedrock", "/model/{modelId}/converse"}:                    sdkCharged,
	{"bedrock", "/model/{modelId}/converse-stream"}:             sdkCharged,
	{"bedrock", "/model/{modelId}/count-tokens"}:                sdkFree, // free (requestbody.Unbilled)
	// A guardrail called on its own: its units (requestbody.GuardrailCheck).
	{"bedrock", "/guardrail/{guardrailIdentifier}/version/{guardrailVersion}/apply"}: sdkCharged,
	// The detect-only guardrail checks: their units at their own prices (requestbody.GuardrailCheck).
	{"bedrock", "/guardrail-checks/invoke"}: sdkCharged,
	// Nova Sonic's speech to speech, a bidirectional HTTP/2 stream: the gateway answers
	// it 501 (requestbody.Bidirectional: it reads a request's body before it admits it,
	// and a bidirectional session's body ends only with the session).
	{"bedrock", "/model/{modelId}/invoke-with-bidirectional-stream"}:        sdkCharged,
	{"bedrock", "/async-invoke"}:                                            requestbody.DeferredBatches,
	{"anthropic", "/v1/files"}:                                              sdkFree,
	{"anthropic", "/v1/messages/batches/${messageBatchID}/cancel"}:          sdkFree,
	{"anthropic", "/v1/sessions/${sessionID}"}:                              sdkCharged,
	{"anthropic", "/v1/sessions/${sessionID}/archive"}:                      sdkFree,
	{"anthropic", "/v1/sessions/${sessionID}/resources"}:                    sdkCharged,
	{"anthropic", "/v1/sessions/${session_id}/resources/${resourceID}"}:     sdkCharged,
	{"anthropic", "/v1/sessions/${session_id}/threads/${threadID}/archive"}: sdkFree,
	{"anthropic", "/v1/deployments/${deploymentID}"}:                        sdkCharged,
	{"anthropic", "/v1/deployments/${deploymentID}/archive"}:                sdkFree,
	{"anthropic", "/v1/deployments/${deploymentID}/pause"}:                  sdkFree,
	{"anthropic", "/v1/dreams/${dreamID}/archive"}:                          sdkFree,
	{"anthropic", "/v1/dreams/${dreamID}/cancel"}:                           sdkFree,
	{"anthropic", "/v1/messages/batches"}:                                   requestbody.DeferredBatches,
	{"anthropic", "/v1/sessions"}:                                           requestbody.DeferredAgents,
	{"anthropic", "/v1/sessions/${sessionID}/events"}:                       requestbody.DeferredAgents,
	{"anthropic", "/v1/deployments"}:                                        requestbody.DeferredAgents,
	{"anthropic", "/v1/deployments/${deploymentID}/run"}:                    requestbody.DeferredAgents,
	{"anthropic", "/v1/deployments/${deploymentID}/unpause"}:                requestbody.DeferredAgents,
	{"anthropic", "/v1/dreams"}:                                             requestbody.DeferredAgents,
	// genai
	{"genai", "{model}:generateContent"}:                                               sdkCharged,
	{"genai", "{model}:streamGenerateContent?alt=sse"}:                                 sdkCharged,
	{"genai", "{model}:countTokens"}:                                                   sdkFree,
	{"genai", "{model}:computeTokens"}:                                                 sdkCharged,
	{"genai", "{model}:batchEmbedContents"}:                                            sdkCharged,
	{"genai", "{model}:predict"}:                                                       sdkCharged,
	{"genai", "{resourceName}:fetchPredictOperation"}:                                  sdkCharged,
	{"genai", "{name}:cancel"}:                                                         sdkFree,
	{"genai", "batches/{name}:cancel"}:                                                 sdkFree,
	{"genai", "batchPredictionJobs/{name}:cancel"}:                                     sdkFree,
	{"genai", "files:register"}:                                                        sdkCharged,
	{"genai", "upload/{api_version}/files"}:                                            sdkFree,
	{"genai", "/{api_version}/decisions"}:                                              sdkCharged, // a classification's usage, read as an interaction's
	{"genai", "fileSearchStores"}:                                                      sdkCharged,
	{"genai", "{parent}/tuningJobs:validateReinforcementTuningReward"}:                 sdkCharged,
	{"genai", "/{api_version}/interactions/{interactionsId}/cancel"}:                   sdkFree,
	{"genai", "/{api_version}/voices"}:                                                 sdkCharged,
	{"genai", "{model}:batchGenerateContent"}:                                          requestbody.DeferredBatches,
	{"genai", "{model}:asyncBatchEmbedContent"}:                                        requestbody.DeferredBatches,
	{"genai", "batchPredictionJobs"}:                                                   requestbody.DeferredBatches,
	{"genai", "tunedModels"}:                                                           requestbody.DeferredFineTuning,
	{"genai", "tuningJobs"}:                                                            requestbody.DeferredFineTuning,
	{"genai", "{model}:predictLongRunning"}:                                            requestbody.DeferredVideos,
	{"genai", "/{api_version}/interactions"}:                                           sdkCharged, // charged from its answer; in the background or by an agent deferred (requestbody.DeferredRequest)
	{"genai", "auth_tokens"}:                                                           requestbody.DeferredRealtime,
	{"genai", "/{api_version}/interactions/{interactionsId}/auth_tokens"}:              requestbody.DeferredRealtime, // a Live Interaction's, for a client to talk to Google itself
	{"genai", "cachedContents"}:                                                        requestbody.DeferredContextCaches,
	{"genai", "{file_search_store_name}:importFile"}:                                   requestbody.DeferredFileIndexing,
	{"genai", "upload/{api_version}/{file_search_store_name}:uploadToFileSearchStore"}: requestbody.DeferredFileIndexing,
	{"genai", "/{api_version}/triggers"}:                                               requestbody.DeferredAgents,
	{"genai", "/{api_version}/triggers/{triggerId}/executions"}:                        requestbody.DeferredAgents,
	// mistral (its moderations are billed by the token and settled at 0
	// as OpenAI's free moderations are: requestbody.Unbilled; its connectors' tool calls
	// are charged nothing: docs/prices.md, "Billed items not charged yet")
	{"mistral", "/v1/agents"}:                                                         sdkCharged,
	{"mistral", "/v1/agents/completions"}:                                             sdkCharged,
	{"mistral", "/v1/agents/completions#stream"}:                                      sdkCharged,
	{"mistral", "/v1/audio/speech"}:                                                   sdkCharged,
	{"mistral", "/v1/audio/transcriptions"}:                                           sdkCharged,
	{"mistral", "/v1/audio/transcriptions#stream"}:                                    sdkCharged,
	{"mistral", "/v1/audio/voices"}:                                                   sdkCharged,
	{"mistral", "/v1/batch/jobs/{job_id}/cancel"}:                                     sdkFree,
	{"mistral", "/v1/chat/classifications"}:                                           sdkCharged,
	{"mistral", "/v1/chat/completions"}:                                               sdkCharged,
	{"mistral", "/v1/chat/completions#stream"}:                                        sdkCharged,
	{"mistral", "/v1/chat/moderations"}:                                               sdkFree,
	{"mistral", "/v1/classifications"}:                                                sdkCharged,
	{"mistral", "/v1/connectors"}:                                                     sdkCharged,
	{"mistral", "/v1/connectors/{connector_id_or_name}/tools/{tool_name}/call"}:       sdkCharged,
	{"mistral", "/v1/connectors/{connector_id_or_name}/{consumer_scope}/credentials"}: sdkCharged,
	{"mistral", "/v1/connectors/{connector_id}/{consumer_scope}/activate"}:            sdkCharged,
	{"mistral", "/v1/connectors/{connector_id}/{consumer_scope}/deactivate"}:          sdkCharged,
	{"mistral", "/v1/conversations"}:                                                  sdkCharged,
	{"mistral", "/v1/conversations#stream"}:                                           sdkCharged,
	{"mistral", "/v1/conversations/{conversation_id}"}:                                sdkCharged,
	{"mistral", "/v1/conversations/{conversation_id}#stream"}:                         sdkCharged,
	{"mistral", "/v1/conversations/{conversation_id}/restart"}:                        sdkCharged,
	{"mistral", "/v1/conversations/{conversation_id}/restart#stream"}:                 sdkCharged,
	{"mistral", "/v1/embeddings"}:                                                     sdkCharged,
	{"mistral", "/v1/files"}:                                                          sdkFree,
	{"mistral", "/v1/fim/completions"}:                                                sdkCharged,
	{"mistral", "/v1/fim/completions#stream"}:                                         sdkCharged,
	{"mistral", "/v1/fine_tuning/models/{model_id}/archive"}:                          sdkFree,
	{"mistral", "/v1/libraries"}:                                                      sdkCharged,
	{"mistral", "/v1/moderations"}:                                                    sdkFree,
	{"mistral", "/v1/observability/dataset-records/bulk-delete"}:                      sdkCharged,
	{"mistral", "/v1/observability/datasets"}:                                         sdkCharged,
	{"mistral", "/v1/observability/datasets/{dataset_id}/imports/from-dataset"}:       sdkCharged,
	{"mistral", "/v1/observability/datasets/{dataset_id}/imports/from-file"}:          sdkCharged,
	{"mistral", "/v1/observability/datasets/{dataset_id}/imports/from-playground"}:    sdkCharged,
	{"mistral", "/v1/observability/datasets/{dataset_id}/records"}:                    sdkCharged,
	{"mistral", "/v1/observability/judges"}:                                           sdkCharged,
	{"mistral", "/v1/observability/logs/search"}:                                      sdkCharged,
	{"mistral", "/v1/observability/pipeline-configs"}:                                 sdkCharged,
	{"mistral", "/v1/observability/spans/aggregate"}:                                  sdkCharged,
	{"mistral", "/v1/observability/spans/evaluations/search"}:                         sdkCharged,
	{"mistral", "/v1/observability/spans/evaluations/search/latest"}:                  sdkCharged,
	{"mistral", "/v1/observability/spans/search"}:                                     sdkCharged,
	{"mistral", "/v1/observability/traces/aggregate"}:                                 sdkCharged,
	{"mistral", "/v1/observability/traces/search"}:                                    sdkCharged,
	{"mistral", "/v1/ocr"}:                                                            sdkCharged,
	{"mistral", "/v1/service-accounts"}:                                               sdkCharged,
	{"mistral", "/v1/workflows/deployments"}:                                          sdkCharged,
	{"mistral", "/v1/workflows/deployments/{name}/stop"}:                              sdkCharged,
	{"mistral", "/v1/workflows/executions/cancel"}:                                    sdkFree,
	{"mistral", "/v1/workflows/executions/terminate"}:                                 sdkCharged,
	{"mistral", "/v1/workflows/executions/{execution_id}/cancel"}:                     sdkFree,
	{"mistral", "/v1/workflows/executions/{execution_id}/queries"}:                    sdkCharged,
	{"mistral", "/v1/workflows/executions/{execution_id}/reset"}:                      sdkCharged,
	{"mistral", "/v1/workflows/executions/{execution_id}/signals"}:                    sdkCharged,
	{"mistral", "/v1/workflows/executions/{execution_id}/terminate"}:                  sdkCharged,
	{"mistral", "/v1/workflows/executions/{execution_id}/updates"}:                    sdkCharged,
	{"mistral", "/v1/workflows/schedules/{schedule_id}/pause"}:                        sdkFree,
	{"mistral", "/v2/prompts"}:                                                        sdkCharged,
	{"mistral", "/v2/prompts/{prompt_id}/versions"}:                                   sdkCharged,
	{"mistral", "/v2/skills"}:                                                         sdkCharged,
	{"mistral", "/v2/skills/{skill_id}/versions"}:                                     sdkCharged,
	{"mistral", "/v1/batch/jobs"}:                                                     requestbody.DeferredBatches,
	{"mistral", "/v1/libraries/{library_id}/documents"}:                               requestbody.DeferredFileIndexing,
	{"mistral", "/v1/libraries/{library_id}/documents/{document_id}/reprocess"}:       requestbody.DeferredFileIndexing,
	{"mistral", "/v1/observability/dataset-records/{dataset_record_id}/live-judging"}: requestbody.DeferredEvals,
	{"mistral", "/v1/observability/judges/{judge_id}/live-judging"}:                   requestbody.DeferredEvals,
	{"mistral", "/v1/workflows/deployments/{name}/restart"}:                           requestbody.DeferredAgents,
	{"mistral", "/v1/workflows/deployments/{name}/start"}:                             requestbody.DeferredAgents,
	{"mistral", "/v1/workflows/registrations/{workflow_registration_id}/execute"}:     requestbody.DeferredAgents,
	{"mistral", "/v1/workflows/schedules"}:                                            requestbody.DeferredAgents,
	{"mistral", "/v1/workflows/schedules/{schedule_id}/resume"}:                       requestbody.DeferredAgents,
	{"mistral", "/v1/workflows/schedules/{schedule_id}/trigger"}:                      requestbody.DeferredAgents,
	{"mistral", "/v1/workflows/{workflow_identifier}/execute"}:                        requestbody.DeferredAgents,
	{"mistral", "/v1/client/sessions"}:                                                requestbody.DeferredRealtime,
}
