package e2e_test

import (
	"slices"
	"testing"

	"github.com/tollgate-dev/tollgate/e2e/fakellm"
)

// TestContainersThroughTheGateway: the containers code tools run in are billed by the time
// they live, and charged so. The official OpenAI SDK's Responses call with the code
// interpreter in a 4 GB container it opens is charged its tokens and the container's 21
// minutes (its own few milliseconds and its 20 idle minutes, at 0.12 USD per 20 minutes);
// the next call on the same container, streamed, the minute its idle window moved. Its
// hosted shell in a 16 GB container: 21 minutes at 0.48 USD per 20. The
// Anthropic SDK's message with the code execution tool likewise (5 idle minutes, 0.05 USD an
// hour), and nothing for the container beside web search of 2026-02-09, with which code
// execution is free.
func TestContainersThroughTheGateway(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	for _, tc := range []struct {
		name, script, model, header, credential, container, kind string
		shell                                                    bool // the container is a shell call's, not a code interpreter call's
		scenarios                                                []string
		minutes                                                  []int64
		perMinute                                                []int64 // micro-USD of the minutes charged, rounded up
	}{
		{name: "openai code interpreter", script: "openai.mjs", model: "gpt-5", header: "authorization", credential: "Bearer sk-provider",
			container: "cntr_e2e0001", kind: "openai-4g", scenarios: []string{"responses-code", "responses-code-stream"},
			minutes: []int64{21, 1}, perMinute: []int64{126_000, 6_000}},
		{name: "openai hosted shell", script: "openai.mjs", model: "gpt-5", header: "authorization", credential: "Bearer sk-provider",
			container: "cntr_e2eshell", kind: "openai-16g", shell: true, scenarios: []string{"responses-shell"},
			minutes: []int64{21}, perMinute: []int64{504_000}},
		{name: "anthropic code execution", script: "anthropic.mjs", model: "claude-sonnet-4-5", header: "x-api-key", credential: "sk-ant-provider",
			container: "container_e2e0001", kind: "anthropic", scenarios: []string{"code", "code-stream", "code-search"},
			minutes: []int64{6, 1, 0}, perMinute: []int64{5_000, 834, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := fakellm.Usage{InputTokens: 10_000, OutputTokens: 1_000, Container: tc.container}
			if tc.shell {
				u.Container, u.ShellContainer = "", tc.container
			}
			fake, s, o := routedGateway(t, u, tc.header, tc.credential)
			_, tokens := tenThousandIn(t, tc.model)
			for i, scenario := range tc.scenarios {
				rec, r := oneSDKCallResult(t, fake, s, dir, tc.script, scenario, o.key, tc.model)
				if !slices.Equal(r.Containers, []string{tc.container}) {
					t.Fatalf("%s: the SDK saw containers %q", scenario, r.Containers)
				}
				kind := tc.kind
				if tc.minutes[i] == 0 {
					kind = ""
				}
				if rec["container_kind"] != kind || rec["container_minutes"] != float64(tc.minutes[i]) ||
					rec.cost() != tokens+tc.perMinute[i] || rec["complete"] != true || rec["price_source"] != "catalog" {
					t.Fatalf("%s: receipt %s, want %d minutes of %q (%d micro-USD) beside the tokens' %d", scenario, rec,
						tc.minutes[i], kind, tc.perMinute[i], tokens)
				}
			}
		})
	}
}
