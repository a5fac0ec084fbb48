package requestbody

import (
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/estimate"
)

// TestContainerTool: the container price a request's code tools are charged at, from
// their memory limits, and the tools that name a container created apart.
func TestContainerTool(t *testing.T) {
	for _, tc := range []struct {
		body string
		want Container
	}{
		{`{"model":"gpt-5","tools":[{"type":"code_interpreter","container":{"type":"auto"}}]}`, Container{Kind: "openai-1g"}},
		{`{"tools":[{"type":"code_interpreter","container":{"type":"auto","memory_limit":"16g"}}]}`, Container{Kind: "openai-16g"}},
		{`{"tools":[{"type":"code_interpreter","container":{"type":"auto","memory_limit":"4g"}},` +
			`{"type":"shell","environment":{"type":"container_auto","memory_limit":"64g"}}]}`, Container{Kind: "openai-64g"}},
		{`{"tools":[{"type":"code_interpreter","container":{"type":"auto","memory_limit":"8g"}}]}`, Container{Kind: "openai-64g"}},
		{`{"tools":[{"type":"shell","environment":{"type":"container_auto"}}]}`, Container{Kind: "openai-1g"}},
		{`{"tools":[{"type":"code_interpreter","container":"cntr_abc"}]}`, Container{Explicit: true}},
		{`{"tools":[{"type":"shell","environment":{"type":"container_reference","container_id":"cntr_abc"}}]}`, Container{Explicit: true}},
		{`{"tools":[{"type":"code_interpreter","container":"cntr_abc"},{"type":"shell","environment":{"type":"container_auto","memory_limit":"4g"}}]}`,
			Container{Kind: "openai-4g", Explicit: true}},
		{`{"tools":[{"type":"shell","environment":{"type":"local"}}]}`, Container{}},
		{`{"tools":[{"type":"shell"}]}`, Container{Kind: "openai-1g"}},
		{`{"tools":[{"type":"shell","environment":null}]}`, Container{Kind: "openai-1g"}},
		{`{"tools":[{"type":"code_interpreter"}]}`, Container{Kind: "openai-1g"}},
		{`{"tools":[{"type":"code_interpreter","container":null}]}`, Container{Kind: "openai-1g"}},
		{`{"model":"claude-opus-4-5","tools":[{"type":"code_execution_20250825","name":"code_execution"}]}`, Container{Kind: "anthropic"}},
		{`{"tools":[{"type":"code_execution_20260120"},{"type":"web_search_20250305"}]}`, Container{Kind: "anthropic"}},
		{`{"tools":[{"type":"code_execution_20260120"},{"type":"web_search_20260209"}]}`, Container{}},
		{`{"tools":[{"type":"web_fetch_20260318"},{"type":"code_execution_20260521"}]}`, Container{}},
		{`{"tools":[{"type":"code_execution_20260120"},{"type":"web_fetch_20250910"}]}`, Container{Kind: "anthropic"}},
		{`{"tools":[{"type":"web_search"},{"type":"web_search_preview_2025_03_11"},{"type":"code_execution_20250825"}]}`, Container{Kind: "anthropic"}},
		{`{"tools":{"type":"code_interpreter"}}`, Container{}},
		{`not json`, Container{}},
	} {
		if got := ContainerTool([]byte(tc.body)); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.body, got, tc.want)
		}
	}
}

// TestDeferredRequest: a Responses call whose code tool names a container created apart is
// deferred billing, as creating the container is; one that opens its own is not.
func TestDeferredRequest(t *testing.T) {
	read := func(body string) *estimate.Request {
		est, err := estimate.Input([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		c := ContainerTool([]byte(body))
		est.ContainerKind, est.ExplicitContainer = c.Kind, c.Explicit
		return &est
	}
	explicit := `{"model":"gpt-5","tools":[{"type":"code_interpreter","container":"cntr_abc"}],"input":"x"}`
	auto := `{"model":"gpt-5","tools":[{"type":"code_interpreter","container":{"type":"auto"}}],"input":"x"}`
	background := `{"model":"gpt-5","background":true,"input":"x"}`
	for _, tc := range []struct {
		method, path, body string
		est                bool
		want               string
	}{
		{"POST", "/v1/responses", explicit, true, DeferredContainers},
		{"POST", "/v1/responses", auto, true, ""},
		{"GET", "/v1/responses", explicit, true, ""},
		{"POST", "/v1/responses", background, true, DeferredBackground},
		{"POST", "/v1/responses", background, false, DeferredBackground},
		{"POST", "/v1/batches", auto, true, DeferredBatches},
		{"POST", "/v1/responses", explicit, false, DeferredContainers},
		// The Interactions API: a model's call is charged from its answer; one in the
		// background or run by an agent is deferred billing.
		{"POST", "/v1beta/interactions", `{"model":"gemini-3-flash-preview","input":"x"}`, true, ""},
		{"POST", "/v1beta/interactions", `{"model":"gemini-3-flash-preview","input":"x","background":true}`, true, DeferredInteractions},
		{"POST", "/v1beta/interactions", `{"agent":"deep-research-pro-preview-12-2025","input":"x"}`, true, DeferredInteractions},
		{"POST", "/v1beta/interactions", `{"agent_config":{"type":"antigravity"},"input":"x"}`, false, DeferredInteractions},
		{"POST", "/v1beta/interactions", `{"model":"gemini-3-flash-preview","agent":null,"input":"x"}`, true, ""},
		{"POST", "/v1/responses", `{"agent":"x","input":"x"}`, true, ""},
	} {
		var est *estimate.Request
		if tc.est {
			est = read(tc.body)
		}
		if got := DeferredRequest(tc.method, tc.path, est, []byte(tc.body)); got != tc.want {
			t.Errorf("%s %s %s (estimate %v): %q, want %q", tc.method, tc.path, tc.body, tc.est, got, tc.want)
		}
	}
	// A hint of the path's model alone (gate.BodyHint of a body the estimate refused, here
	// for a number beyond float64's range) read nothing of the body: the body is read
	// as the provider reads it, as without an estimate.
	pathOnly := &estimate.Request{Model: "gemini-2.5-pro", Unread: true}
	for body, want := range map[string]string{
		`{"model":"gpt-5","background":true,"input":"x","temperature":1e999}`:                    DeferredBackground,
		`{"model":"gpt-5","tools":[{"type":"code_interpreter","container":"cntr_1"}],"n":1e999}`: DeferredContainers,
	} {
		if got := DeferredRequest("POST", "/v1/responses", pathOnly, []byte(body)); got != want {
			t.Errorf("%s with a hint of the path's model alone: %q, want %q", body, got, want)
		}
	}
}
