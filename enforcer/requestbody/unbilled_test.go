package requestbody_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/requestbody"
)

func TestUnbilled(t *testing.T) {
	// Only a POST generates: any other method reads or removes a stored object.
	for _, m := range []string{"GET", "HEAD", "DELETE", "OPTIONS", "PUT", "PATCH"} {
		if !requestbody.Unbilled(m, "/v1/responses/resp_123") || !requestbody.Unbilled(m, "/v1/chat/completions") {
			t.Errorf("a %s is billed", m)
		}
	}
	for _, m := range []string{"", "post", "Post"} {
		if requestbody.Unbilled(m, "/v1/chat/completions") {
			t.Errorf("a request of method %q is not billed", m)
		}
	}
	// Save a PATCH that starts or scales a dedicated deployment, billed by the GPU hour
	// (Deferred): it is refused, or charged as a POST billed later is when allowed.
	for _, path := range []string{"/v1/endpoints/endpoint-1", "/v1/accounts/a/deployments/d-1", "/v1/accounts/a/deployments/d-1:scale"} {
		if requestbody.Unbilled("PATCH", path) {
			t.Errorf("a PATCH of %s is unbilled", path)
		}
	}
	for path, want := range map[string]bool{
		"/v1/messages/count_tokens":                   true,
		"/anthropic/v1/messages/count_tokens":         true, // behind a route prefix
		"/v1/responses/input_tokens":                  true,
		"/v1/moderations":                             true,
		"/v1beta/models/gemini-2.5-flash:countTokens": true,
		"/v1/projects/p/locations/us-east5/publishers/google/models/gemini-2.5-flash:countTokens":    true,
		"/v1/projects/p/locations/us-east5/publishers/anthropic/models/count-tokens:rawPredict":      true, // Claude's token count on Vertex AI
		"/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5:rawPredict": false,
		"/v1/messages":         false,
		"/v1/chat/completions": false,
		"/v1/responses":        false,
		"/v1/embeddings":       false, // charged: it reports its usage
		"/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/count-tokens":  true, // Amazon Bedrock's
		"/model/us.anthropic.claude-sonnet-4-5-20250929-v1:0/count-tokens": true,
		"/model/m/count-tokens/x":         false,
		"/v1/messages/count_tokens/extra": false,
		"":                                false,
	} {
		if got := requestbody.Unbilled("POST", path); got != want {
			t.Errorf("Unbilled(%q) = %v, want %v", path, got, want)
		}
	}
}

// A POST that stores, updates or cancels something generates nothing billed per
// request: unbilled, though its answer may show a usage (a stored chat completion's
// metadata update answers the completion, usage and all). Its neighbours that generate,
// or are billed later, are not; nor is a spelling a server may resolve to another path.
func TestUnbilledStoresUpdatesAndCancels(t *testing.T) {
	for path, want := range map[string]bool{
		"/v1/chat/completions/chatcmpl-abc123":                true, // chat.completions.update(id, {metadata})
		"/v1/chat/completions/chatcmpl-AbC123/":               true,
		"/openai/v1/chat/completions/chatcmpl-abc123":         true,  // behind a route prefix
		"/v1/chat/completions/stream":                         false, // a word, not an id
		"/v1/chat/completions/chatcmpl-1/messages":            false,
		"/v1/chat/completions/.":                              false, // a server may read /v1/chat/completions
		"/v1/chat/completions/%2e%2e/completions":             false,
		"/v1/responses/resp_1/cancel":                         true, // answers the response, usage and all
		"/v1/responses/resp_1":                                false,
		"/v1/responses/compact":                               false,
		"/v1/files":                                           true,
		"/v1/files/":                                          true,
		"/upload/v1beta/files":                                true, // Gemini's
		"/v1/uploads":                                         true,
		"/v1/uploads/upload_1/parts":                          true,
		"/v1/uploads/upload_1/complete":                       true,
		"/v1/uploads/upload_1/cancel":                         true,
		"/v1/vector_stores":                                   true,
		"/v1/vector_stores/vs_1":                              true,
		"/v1/vector_stores/vs_1/files":                        true,
		"/v1/vector_stores/vs_1/files/file-1":                 true,
		"/v1/vector_stores/vs_1/file_batches":                 true,
		"/v1/vector_stores/vs_1/file_batches/vsfb_1/cancel":   true,
		"/v1/vector_stores/vs_1/search":                       false, // in doubt: a query may be rewritten by a model
		"/v1/assistants":                                      true,
		"/v1/assistants/asst_1":                               true,
		"/v1/threads":                                         true,
		"/v1/threads/thread_1":                                true,
		"/v1/threads/thread_1/messages":                       true,
		"/v1/threads/thread_1/messages/msg_1":                 true,
		"/v1/threads/thread_1/runs/run_1":                     true, // a run's metadata
		"/v1/threads/thread_1/runs/run_1/cancel":              true,
		"/v1/threads/runs":                                    false, // billed later (Deferred)
		"/v1/threads/thread_1/runs":                           false,
		"/v1/threads/thread_1/runs/run_1/submit_tool_outputs": false,
		"/v1/conversations":                                   false, // Mistral's starts a conversation
		"/v1/conversations/conv_1":                            false, // Mistral's appends to one
		"/v1/conversations/conv_1/items":                      true,
		"/v1/conversations/conv_1/restart":                    false,
		"/v1/evals":                                           true,
		"/v1/evals/eval_1":                                    true,
		"/v1/evals/eval_1/runs":                               false, // billed later (Deferred)
		"/v1/evals/eval_1/runs/evalrun_1":                     true,  // its cancellation
		"/v1/containers":                                      false, // billed later (Deferred)
		"/v1/containers/cntr_1/files":                         true,
		"/v1/batches":                                         false,
		"/v1/batches/batch_1/cancel":                          true,
		"/v1/messages/batches/msgbatch_1/cancel":              true,
		"/v1beta/batches/b_1:cancel":                          true,
		"/v1/fine_tuning/jobs/ftjob-1/pause":                  true,
		"/v1/fine_tuning/jobs/ftjob-1/resume":                 false,
		"/v1/fine_tuning/alpha/graders/validate":              true,
		"/v1/fine_tuning/alpha/graders/run":                   false,
		"/v1/organization/invites":                            true,
		"/v1/organization/projects/proj_1/api_keys":           true,
		"/v1/organizations/invites":                           true, // Anthropic's
		"/v1/organization":                                    false,
		"/v1/fine_tuning/checkpoints/ft:gpt-4o-mini-2024-07-18:org:custom:abc123/permissions": true, // shared with projects
		"/v1/fine_tuning/checkpoints/permissions":                                             false,
		"/v1/sessions/sesn_1/archive":                                                         true,
		"/v1/deployments/dep_1/pause":                                                         true,
		"/v1/deployments/dep_1/unpause":                                                       false, // billed later
		"/v1/agents/automations/auto_1/resume":                                                false, // billed later
		"/v1/memory_stores":                                                                   true,  // Anthropic's memory stores, memories
		"/v1/memory_stores/memstore_1/memories":                                               true,
		"/v1/memory_stores/memstore_1/memories/mem_1":                                         true,
		"/anthropic/v1/memory_stores/memstore_1/memories":                                     true, // behind a route prefix
		"/v1/skills":                                   true, // OpenAI's and Anthropic's skills
		"/v1/skills/skill_1/versions":                  true,
		"/v1/vaults/vlt_1/credentials":                 true,
		"/v1/webhook_endpoints/we_1/test":              true,
		"/v1/environments/env_1/work/work_1/heartbeat": true,
		"/v1/user_profiles":                            true,
		"/v2/skills":                                   false, // Mistral's, in doubt
		"/v1beta/environments":                         false, // Gemini's, in doubt
		"/v1/agents/environments":                      false, // OpenAI's, billed later
		"/v1/memory_stores/../messages":                false,
		"/v1/organization/../chat/completions":         false,
		"/v1/files/..":                                 false,
		`/v1/chat/completions\x/..\files`:              false,
		"/v1/agents":                                   false, // not listed: Mistral's /v1/agents/completions is its neighbour
		"/v1/agents/completions":                       false,
		"/v1/embeddings":                               false,
	} {
		if got := requestbody.Unbilled("POST", path); got != want {
			t.Errorf("Unbilled(POST %q) = %v, want %v", path, got, want)
		}
		if want && requestbody.Deferred("POST", path, false) != "" {
			t.Errorf("%q is both unbilled and billed later: ext_proc would skip its refusal", path)
		}
	}
}

func TestDeferred(t *testing.T) {
	for _, c := range []struct {
		method, path string
		background   bool
		want         string
	}{
		{"POST", "/v1/batches", false, requestbody.DeferredBatches},
		{"POST", "/v1/messages/batches", false, requestbody.DeferredBatches},
		{"POST", "/anthropic/v1/messages/batches", false, requestbody.DeferredBatches}, // behind a route prefix
		{"POST", "/v1/threads/runs", false, requestbody.DeferredAssistants},
		{"POST", "/v1/threads/thread_abc/runs", false, requestbody.DeferredAssistants},
		{"POST", "/v1/threads/thread_abc/runs/run_1/submit_tool_outputs", false, requestbody.DeferredAssistants},
		{"POST", "/v1/fine_tuning/jobs", false, requestbody.DeferredFineTuning},
		{"POST", "/v1/realtime/sessions", false, requestbody.DeferredRealtime},
		{"POST", "/v1/realtime/transcription_sessions", false, requestbody.DeferredRealtime},
		{"POST", "/v1/realtime/client_secrets", false, requestbody.DeferredRealtime},
		{"POST", "/v1/videos", false, requestbody.DeferredVideos},
		{"POST", "/v1/videos/video_1/remix", false, requestbody.DeferredVideos},
		{"POST", "/v1/responses", true, requestbody.DeferredBackground},
		{"POST", "/v1beta/models/gemini-2.5-flash:batchGenerateContent", false, requestbody.DeferredBatches},
		{"POST", "/async-invoke", false, requestbody.DeferredBatches},
		{"POST", "/v1/projects/p/locations/us-central1/batchPredictionJobs", false, requestbody.DeferredBatches},
		{"POST", "/v1/projects/p/locations/us-central1/tuningJobs", false, requestbody.DeferredFineTuning},
		{"POST", "/v1/projects/p/locations/us-central1/publishers/google/models/veo-3.0-generate-001:predictLongRunning", false, requestbody.DeferredVideos},
		{"POST", "/v1beta/models/veo-3.0-generate-preview:predictLongRunning", false, requestbody.DeferredVideos},
		{"GET", "/v1/projects/p/locations/us-central1/batchPredictionJobs", false, ""},
		{"POST", "/bedrock/model-invocation-job", false, requestbody.DeferredBatches},
		{"POST", "/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke", false, ""},
		{"POST", "/v1beta/models/gemini-embedding-001:asyncBatchEmbedContent", false, requestbody.DeferredBatches},
		{"POST", "/v1beta/models/gemini-2.5-flash:generateContent", false, ""},
		{"POST", "/v1beta/interactions", true, requestbody.DeferredInteractions},
		{"POST", "/v1beta/Interaction%73/", true, requestbody.DeferredInteractions},
		{"POST", "/v1beta/interactions", false, ""}, // a model's call in the foreground: charged from its answer
		{"GET", "/v1beta/interactions/int_1", false, ""},
		// Found by TestEverySDKEndpointIsClassified (e2e), which reads the SDKs' endpoints.
		{"POST", "/v1/videos/edits", false, requestbody.DeferredVideos},
		{"POST", "/v1/videos/extensions", false, requestbody.DeferredVideos},
		{"POST", "/v1/realtime/calls", false, requestbody.DeferredRealtime},
		{"POST", "/v1/realtime/calls/rtc_1/accept", false, requestbody.DeferredRealtime},
		{"POST", "/v1alpha/auth_tokens", false, requestbody.DeferredRealtime},
		{"POST", "/v1beta/interactions/int_1/auth_tokens", false, requestbody.DeferredRealtime},
		{"POST", "/v1beta/interactions/int_1:webrtc", false, requestbody.DeferredRealtime},
		{"POST", "/v1beta/interactions/int%2F1:webrtc", false, requestbody.DeferredRealtime},
		{"POST", "/v1/evals/eval_1/runs", false, requestbody.DeferredEvals},
		{"POST", "/v1/fine_tuning/alpha/graders/run", false, requestbody.DeferredEvals},
		{"POST", "/v1/fine_tuning/jobs/ftjob_1/resume", false, requestbody.DeferredFineTuning},
		{"POST", "/v1beta/tunedModels", false, requestbody.DeferredFineTuning},
		{"POST", "/v1/chatkit/sessions", false, requestbody.DeferredChatKit},
		{"POST", "/v1/sessions", false, requestbody.DeferredAgents},
		{"POST", "/anthropic/v1/sessions/sesn_1/events", false, requestbody.DeferredAgents},
		{"POST", "/v1/deployments", false, requestbody.DeferredAgents},
		// Vertex AI Agent Engine: an agent queried runs at Google, its model calls billed
		// to the project; its answer is the agent's own output, no usage.
		{"POST", "/v1/projects/p/locations/us-central1/reasoningEngines/123:query", false, requestbody.DeferredAgents},
		{"POST", "/v1beta1/projects/p/locations/us-central1/reasoningEngines/123:streamQuery", false, requestbody.DeferredAgents},
		{"POST", "/v1/projects/p/locations/us-central1/reasoningEngines/123/sessions", false, ""},
		{"POST", "/v1/deployments/dep_1/run", false, requestbody.DeferredAgents},
		{"POST", "/v1/deployments/dep_1/unpause", false, requestbody.DeferredAgents},
		{"POST", "/v1/dreams", false, requestbody.DeferredAgents},
		// OpenAI's Agents API and Live API (openai 7).
		{"POST", "/v1/agents/sessions", false, requestbody.DeferredAgents},
		{"POST", "/v1/agents/sessions/asess_1/events", false, requestbody.DeferredAgents},
		{"POST", "/v1/agents/automations", false, requestbody.DeferredAgents},
		{"POST", "/v1/agents/automations/auto_1/invocations", false, requestbody.DeferredAgents},
		{"POST", "/v1/agents/automations/auto_1/resume", false, requestbody.DeferredAgents},
		{"POST", "/v1/agents/automations/auto_1/pause", false, ""},
		{"POST", "/v1/agents/environments", false, requestbody.DeferredAgents},
		{"POST", "/v1/agents/sessions/asess_1", false, ""},
		{"POST", "/v1/agents", false, ""},
		{"POST", "/v1/live/sessions", false, requestbody.DeferredRealtime},
		{"POST", "/v1/live/sessions/live_1/accept", false, requestbody.DeferredRealtime},
		{"POST", "/v1/live/sessions/live_1/fork", false, requestbody.DeferredRealtime},
		{"POST", "/v1/live/sessions/live_1/hangup", false, ""},
		{"POST", "/v1/realtime/translations/client_secrets", false, requestbody.DeferredRealtime},
		{"POST", "/v1/decisions", false, ""},
		{"POST", "/v1beta/triggers", false, requestbody.DeferredAgents},
		{"POST", "/v1beta/triggers/trg_1/executions", false, requestbody.DeferredAgents},
		{"POST", "/v1beta/cachedContents", false, requestbody.DeferredContextCaches},
		{"POST", "/v1/projects/p/locations/us-central1/cachedContents", false, requestbody.DeferredContextCaches},
		{"POST", "/v1beta/fileSearchStores/s_1:importFile", false, requestbody.DeferredFileIndexing},
		{"POST", "/upload/v1beta/fileSearchStores/s_1:uploadToFileSearchStore", false, requestbody.DeferredFileIndexing},
		// Vertex AI RAG Engine's imports and uploads: the embeddings (and an LLM parser's
		// Gemini calls) are billed to the project as the import runs.
		{"POST", "/v1beta1/projects/p/locations/us-central1/ragCorpora/123/ragFiles:import", false, requestbody.DeferredFileIndexing},
		{"POST", "/v1/projects/p/locations/us-central1/ragCorpora/123/ragFiles:import", false, requestbody.DeferredFileIndexing},
		{"POST", "/upload/v1beta1/projects/p/locations/us-central1/ragCorpora/123/ragFiles:upload", false, requestbody.DeferredFileIndexing},
		{"POST", "/v1/projects/p/locations/us-central1/ragCorpora", false, ""},
		{"POST", "/v1/projects/p/locations/us-central1/datasets/d_1:import", false, ""},
		{"POST", "/v1/containers", false, requestbody.DeferredContainers},
		{"POST", "/v1/batch/jobs", false, requestbody.DeferredBatches}, // Mistral's
		{"POST", "/v1/libraries/lib_1/documents", false, requestbody.DeferredFileIndexing},
		{"POST", "/v1/libraries/lib_1/documents/doc_1/reprocess", false, requestbody.DeferredFileIndexing},
		{"POST", "/v1/client/sessions", false, requestbody.DeferredRealtime},
		{"POST", "/v1/workflows/wf_1/execute", false, requestbody.DeferredAgents},
		{"POST", "/v1/workflows/schedules/sch_1/trigger", false, requestbody.DeferredAgents},
		{"POST", "/v1/observability/judges/j_1/live-judging", false, requestbody.DeferredEvals},
		// Video generations and asynchronous calls of providers the gateway routes to that
		// no pinned SDK reads: their answers are a job's id, the work billed as it runs.
		{"POST", "/v1/videos/generations", false, requestbody.DeferredVideos},            // xAI's grok-imagine-video
		{"POST", "/openai/v1/video/generations/jobs", false, requestbody.DeferredVideos}, // Azure OpenAI's Sora
		{"POST", "/v1/video/generations", false, requestbody.DeferredVideos},             // OpenAI-compatible aggregators' video tasks
		{"POST", "/async/chat/completions", false, requestbody.DeferredBatches},          // Perplexity's asynchronous calls
		{"POST", "/v1/async/sonar", false, requestbody.DeferredBatches},
		{"GET", "/v1/async/sonar/req_1", false, ""},
		// Fine-tuning and batch jobs of the open-model hosts (Together's, Fireworks'), each
		// billed as it trains or runs, not in its answer.
		{"POST", "/v1/fine-tunes", false, requestbody.DeferredFineTuning},
		{"POST", "/v1/accounts/acct-1/supervisedFineTuningJobs", false, requestbody.DeferredFineTuning},
		{"POST", "/v1/accounts/acct-1/reinforcementFineTuningJobs", false, requestbody.DeferredFineTuning},
		{"POST", "/v1/accounts/acct-1/dpoJobs", false, requestbody.DeferredFineTuning},
		{"POST", "/v1/accounts/acct-1/batchInferenceJobs", false, requestbody.DeferredBatches},
		{"POST", "/v1/fine-tunes/ft-1/cancel", false, ""},
		{"GET", "/v1/accounts/acct-1/supervisedFineTuningJobs", false, ""},
		// Dedicated deployments of the open-model hosts, billed by the GPU hour while they
		// run, whatever passes through them: created, started, scaled, undeleted.
		{"POST", "/v1/accounts/acct-1/deployments", false, requestbody.DeferredDedicated},                // Fireworks'
		{"POST", "/v1/accounts/acct-1/deployments/dep-1:undelete", false, requestbody.DeferredDedicated}, // a deleted deployment back
		{"PATCH", "/v1/accounts/acct-1/deployments/dep-1", false, requestbody.DeferredDedicated},         // minReplicaCount raised
		{"patch", "/v1/accounts/acct-1/deployments/dep-1:scale", false, requestbody.DeferredDedicated},   // replicas out of zero
		{"POST", "/v1/endpoints", false, requestbody.DeferredDedicated},                                  // Together's dedicated endpoints
		{"POST", "/together/v1/Endpoints/", false, requestbody.DeferredDedicated},                        // behind a route prefix, as a server reads it
		{"PATCH", "/v1/endpoints/endpoint-d23901de", false, requestbody.DeferredDedicated},               // "state": "STARTED"
		{"GET", "/v1/accounts/acct-1/deployments", false, ""},
		{"DELETE", "/v1/accounts/acct-1/deployments/dep-1", false, ""},
		{"DELETE", "/v1/endpoints/endpoint-d23901de", false, ""},
		{"PATCH", "/v1/endpoints", false, ""},
		{"PATCH", "/v1/accounts/acct-1/deployedModels/dm-1", false, ""},
		{"POST", "/v1/endpoints/endpoint-d23901de/adapters", false, ""}, // an adapter on an endpoint already billed
		{"GET", "/v1/videos/vid_1", false, ""},
		// Their neighbours start nothing billed.
		{"POST", "/v1/libraries", false, ""},
		{"POST", "/v1/workflows/executions/ex_1/cancel", false, ""},
		{"POST", "/v1/batch/jobs/job_1/cancel", false, ""},
		{"POST", "/v1/realtime/calls/rtc_1/hangup", false, ""},
		{"POST", "/v1beta/interactions/int_1/cancel", false, ""},
		{"POST", "/v1/evals/eval_1/runs/run_1", false, ""}, // a run's cancellation
		{"POST", "/v1/evals", false, ""},
		{"POST", "/v1/fine_tuning/jobs/ftjob_1/pause", false, ""},
		{"POST", "/v1/chatkit/sessions/cs_1/cancel", false, ""},
		{"POST", "/v1/sessions/sesn_1", false, ""},
		{"POST", "/v1/sessions/sesn_1/archive", false, ""},
		{"POST", "/v1/deployments/dep_1/pause", false, ""},
		{"POST", "/v1/dreams/drm_1/cancel", false, ""},
		{"POST", "/v1/containers/cntr_1/files", false, ""},
		{"PATCH", "/v1beta/cachedContents/c_1", false, ""},
		{"GET", "/v1beta/triggers", false, ""},
		{"POST", "/v1beta/fileSearchStores", false, ""},
		// Their answers carry their cost, or they cost nothing.
		{"POST", "/v1/responses", false, ""},
		{"POST", "/v1/chat/completions", true, ""},
		{"POST", "/v1/messages", false, ""},
		{"POST", "/v1/responses/resp_1/cancel", true, ""},
		{"POST", "/v1/threads", false, ""}, // a thread is created, nothing runs
		{"POST", "/v1/threads/thread_abc/messages", false, ""},
		{"POST", "/v1/files", false, ""},
		{"POST", "/v1/batches/batch_1/cancel", false, ""},
		{"GET", "/v1/batches", false, ""},
		{"GET", "/v1/responses", true, ""},
		{"DELETE", "/v1/videos/video_1", false, ""},
		{"POST", "", false, ""},
		{"", "/v1/batches", false, requestbody.DeferredBatches}, // a method nobody told counts as a POST
		// Spellings a server may read as the same path (ext_proc sees the path as sent).
		{"POST", "/v1/batches/", false, requestbody.DeferredBatches},
		{"POST", "/v1/batche%73", false, requestbody.DeferredBatches},
		{"POST", "/v1/%62atches//", false, requestbody.DeferredBatches},
		{"POST", "/v1/Batches", false, requestbody.DeferredBatches},
		{"POST", "/v1/fine_tuning/jobs/", false, requestbody.DeferredFineTuning},
		{"POST", "/V1/Models/gemini-2.5-flash:batchGenerateContent", false, requestbody.DeferredBatches},
		{"POST", "/v1/batches%2", false, ""}, // a malformed escape is compared as it is
		// A segment's ";" parameters, which servlet containers (Tomcat, Jetty) drop before
		// they route: a batch to them all the same (before 2026-12-07, not deferred).
		{"POST", "/v1/batches;x=1", false, requestbody.DeferredBatches},
		{"POST", "/v1;v=2/fine_tuning/jobs;jsessionid=a/", false, requestbody.DeferredFineTuning},
		{"POST", "/v1/batches%3Bx", false, requestbody.DeferredBatches},
		{"POST", "/v1/batches;x/batch_1/cancel", false, ""},
	} {
		if got := requestbody.Deferred(c.method, c.path, c.background); got != c.want {
			t.Errorf("Deferred(%s %q, background %v) = %q, want %q", c.method, c.path, c.background, got, c.want)
		}
		if c.want != "" && !slices.Contains(requestbody.DeferredEndpoints, c.want) {
			t.Errorf("%q is not listed in DeferredEndpoints", c.want)
		}
	}
}

func TestUnbilledCost(t *testing.T) {
	if c := requestbody.UnbilledCost(nil); c == nil || *c != 0 {
		t.Errorf("UnbilledCost(nil) = %v, want a known 0", c)
	}
	reported := int64(17)
	if c := requestbody.UnbilledCost(&reported); c != &reported {
		t.Errorf("UnbilledCost(&17) = %v, want the reported cost", c)
	}
}

func TestAllowDeferred(t *testing.T) {
	a, err := requestbody.AllowDeferred(requestbody.DeferredContextCaches, requestbody.DeferredBatches)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range requestbody.DeferredEndpoints {
		if want := e == requestbody.DeferredContextCaches || e == requestbody.DeferredBatches; a.Allows(e) != want {
			t.Errorf("Allows(%q) = %v, want %v", e, a.Allows(e), want)
		}
	}
	if _, err := requestbody.AllowDeferred("videos", "Batches"); err == nil || !strings.Contains(err.Error(), `"Batches" is not an endpoint billed later`) {
		t.Errorf("a name not in the list: %v", err)
	}
	var none requestbody.DeferredAllowed
	if none.Allows(requestbody.DeferredBatches) {
		t.Error("the default allows a batch")
	}
}

// Azure OpenAI's Realtime preview mints a WebRTC session's ephemeral key at
// /openai/realtimeapi/sessions and /transcription_sessions (api-version 2025-04-01-preview), with the route's own
// api-key; the browser then talks to Azure's realtimeapi-preview host directly, past
// the gateway. Before, only OpenAI's /realtime/sessions was known, so a member could
// mint such keys through the gateway, each charged as an ordinary request, and hold
// uncharged voice sessions with the operator's deployment.
func TestAzureRealtimeSessionsAreDeferred(t *testing.T) {
	for _, path := range []string{"/openai/realtimeapi/sessions", "/azure/openai/realtimeapi/sessions", "/openai/RealtimeAPI/sessions/",
		"/openai/realtimeapi/transcription_sessions"} {
		if got := requestbody.Deferred("POST", path, false); got != requestbody.DeferredRealtime {
			t.Errorf("Deferred(POST %q) = %q, want %q", path, got, requestbody.DeferredRealtime)
		}
	}
	if got := requestbody.Deferred("GET", "/openai/realtimeapi/sessions", false); got != "" {
		t.Errorf("a GET is deferred: %q", got)
	}
}
