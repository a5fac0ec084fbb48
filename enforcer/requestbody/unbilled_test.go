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
		{"POST", "/v1/evals/eval_1/runs", false, requestbody.DeferredEvals},
		{"POST", "/v1/fine_tuning/alpha/graders/run", false, requestbody.DeferredEvals},
		{"POST", "/v1/fine_tuning/jobs/ftjob_1/resume", false, requestbody.DeferredFineTuning},
		{"POST", "/v1beta/tunedModels", false, requestbody.DeferredFineTuning},
		{"POST", "/v1/chatkit/sessions", false, requestbody.DeferredChatKit},
		{"POST", "/v1/sessions", false, requestbody.DeferredAgents},
		{"POST", "/anthropic/v1/sessions/sesn_1/events", false, requestbody.DeferredAgents},
		{"POST", "/v1/deployments", false, requestbody.DeferredAgents},
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
		{"POST", "/v1/containers", false, requestbody.DeferredContainers},
		{"POST", "/v1/batch/jobs", false, requestbody.DeferredBatches}, // Mistral's
		{"POST", "/v1/libraries/lib_1/documents", false, requestbody.DeferredFileIndexing},
		{"POST", "/v1/libraries/lib_1/documents/doc_1/reprocess", false, requestbody.DeferredFileIndexing},
		{"POST", "/v1/client/sessions", false, requestbody.DeferredRealtime},
		{"POST", "/v1/workflows/wf_1/execute", false, requestbody.DeferredAgents},
		{"POST", "/v1/workflows/schedules/sch_1/trigger", false, requestbody.DeferredAgents},
		{"POST", "/v1/observability/judges/j_1/live-judging", false, requestbody.DeferredEvals},
		// Their neighbours start nothing billed.
		{"POST", "/v1/libraries", false, ""},
		{"POST", "/v1/workflows/executions/ex_1/cancel", false, ""},
		{"POST", "/v1/batch/jobs/job_1/cancel", false, ""},
		{"POST", "/v1/realtime/calls/rtc_1/hangup", false, ""},
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
