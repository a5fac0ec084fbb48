package e2e_test

import (
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/e2e/fakellm"
	"github.com/tollgate-dev/tollgate/internal/googlefake"
	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
)

// TestOtherSDKsLeavingTheirStreams: the official Node SDKs of Amazon Bedrock Runtime
// (InvokeModelWithResponseStream and ConverseStream, AWS's binary event stream), Google
// Gen AI (generateContentStream, server-sent events), Mistral (chat.stream) and
// Anthropic's Vertex AI client (messages.create's stream) stream an answer of 10,000
// input and 1,000 output tokens through the enforcer's gateway (one route each, with
// its provider's credential) and through the Envoy emulator playing
// deploy/envoy/envoy.yaml, and the program leaves its stream four ways:
//
//   - "end": it reads the stream to its end. Complete, charged exactly.
//   - "stop": it breaks out of its loop at the stream's terminal event (Bedrock's metrics
//     chunk and metadata event, Anthropic's message_stop on Vertex AI, Mistral's chunk
//     with the usage, the [DONE] sent with it; Gemini's chunk with a finishReason), the
//     provider's body not yet ended (lingeringUpstream). Complete, charged exactly. The
//     Anthropic and Mistral SDKs end the request there; AWS's and Google's do not (the
//     request stays open until the body's end, the answer read whole), so Gemini's event
//     stream, which has no terminal event, is not cut there either.
//   - "break": it breaks out of its loop after the first text, the provider pausing
//     there (pauseAfter) until the client leaves: incomplete, charged at least the input
//     the stream reported before (Anthropic's message_start, Gemini's chunks carry it), or
//     the estimate from the request and the text read when it reported none (Mistral's
//     usage comes at the end): never nothing, never the whole answer. AWS's and Google's
//     SDKs stay: the answer is read whole, complete.
//   - "abort": it aborts the request with an AbortController after the first text (the
//     SDK may then end its loop quietly): as "break" with a client that leaves, for every
//     SDK but Mistral's (its fetchOptions.signal did not end the request here).
func TestOtherSDKsLeavingTheirStreams(t *testing.T) {
	t.Parallel()
	dir := sdkDir(t)
	awayFromDayBoundary(t, 3*time.Minute)
	usage := fakellm.Usage{InputTokens: 10_000, OutputTokens: 1_000}
	fake := &fakellm.Server{Usage: func(fakellm.Call) fakellm.Usage { return usage }}
	up := &lingeringUpstream{fake: fake, mistralChat: true}
	upSrv := httptest.NewServer(up)
	t.Cleanup(upSrv.Close)
	google := googlefake.Start(t)
	routes := filepath.Join(t.TempDir(), "routes.yaml")
	if err := os.WriteFile(routes, fmt.Appendf(nil, `routes:
  - prefix: /model/
    upstream: %[1]s
    header: authorization
    credentialEnv: BEDROCK_CREDENTIAL
  - prefix: /v1/models/
    upstream: %[1]s
    header: x-goog-api-key
    credentialEnv: GOOGLE_CREDENTIAL
  - prefix: /v1/chat/
    upstream: %[1]s
    header: authorization
    credentialEnv: MISTRAL_CREDENTIAL
    includeUsage: false
  - prefix: /v1/ocr
    upstream: %[1]s
    header: authorization
    credentialEnv: MISTRAL_CREDENTIAL
  - prefix: /v1/projects/
    upstream: %[1]s
    google:
      credentialsFile: %[2]s
`, upSrv.URL, google.ServiceAccountFile(t)), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startStack(t, map[string]string{"TOLLGATE_GATEWAY_ADDR": "127.0.0.1:0", "TOLLGATE_GATEWAY_ROUTES": routes,
		"BEDROCK_CREDENTIAL": bedrockProviderAuth, "GOOGLE_CREDENTIAL": "AIza-provider-key", "MISTRAL_CREDENTIAL": "Bearer mistral-provider-key",
		"TOLLGATE_UPSTREAM_AUTHORIZATION": providerAuthorization}) // Envoy's route (envoy.yaml)
	_, envoyURL := s.deployedEnvoy(t, upSrv.URL)

	// price is what usage costs at the catalog's price of entry (10% more on a regional
	// endpoint); input what its 10,000 input tokens alone cost.
	price := func(entry string, regional bool) (whole, input int64) {
		e, ok := pricecatalog.Lookup(entry)
		if !ok || e.Model != entry {
			t.Fatalf("%s is not a catalog entry (found %q)", entry, e.Model)
		}
		whole, input = ceilDiv(10_000*e.InputPerMillion+1_000*e.OutputPerMillion, 1_000_000), ceilDiv(10_000*e.InputPerMillion, 1_000_000)
		if regional {
			whole, input = ceilDiv(whole*(100+e.RegionalPremiumPercent), 100), ceilDiv(input*(100+e.RegionalPremiumPercent), 100)
		}
		return whole, input
	}
	type sdkStream struct {
		script, scenario, model string
		whole, input            int64
		// inputFirst: the stream reports its input in its first events; terminal: it has a
		// terminal event; leavesOnBreak: breaking out of the SDK's loop ends the request
		// (not AWS's nor Google's: the stream is left unread, the request open until the
		// body's end, the answer then whole; only an abort ends it).
		inputFirst, terminal, leavesOnBreak bool
		// textAt: the events the provider sends up to the first text the SDK yields
		// (Anthropic's stream has a ping before it, which the SDK does not yield).
		textAt int64
		// envoy: it runs behind the Envoy emulator too (not Mistral: envoy.yaml's route is
		// OpenAI's, whose streams ext_proc asks for their usage, which Mistral's API refuses;
		// docs/enforcer.md).
		envoy bool
	}
	claudeWhole, claudeInput := price("claude-sonnet-4-5", false)
	vertexWhole, vertexInput := price("claude-sonnet-4-5", true) // us-east5: regional
	geminiWhole, geminiInput := price("gemini-2.5-flash", false)
	mistralWhole, mistralInput := price("mistral-large", false)
	const bedrockModel = "global.anthropic.claude-sonnet-4-5-20250929-v1:0"
	streams := []sdkStream{
		{"bedrock.mjs", "invoke-stream", bedrockModel, claudeWhole, claudeInput, true, true, false, 3, true},
		{"bedrock.mjs", "converse-stream", bedrockModel, claudeWhole, claudeInput, false, true, false, 2, true},
		{"gemini.mjs", "stream", "gemini-2.5-flash", geminiWhole, geminiInput, true, false, false, 1, true},
		{"mistral.mjs", "stream", "mistral-large-latest", mistralWhole, mistralInput, false, true, true, 2, false},
		{"vertex.mjs", "vertex-stream", "claude-sonnet-4-5@20250929", vertexWhole, vertexInput, true, true, true, 4, true},
	}
	for _, front := range []struct{ name, url string }{{"gateway", s.gateway}, {"envoy", envoyURL}} {
		t.Run(front.name, func(t *testing.T) {
			o := s.setUpOrg(t)

			for _, st := range streams {
				if front.name == "envoy" && !st.envoy {
					continue
				}
				for _, leave := range []string{"end", "stop", "break", "abort"} {
					if leave == "abort" && st.script == "mistral.mjs" {
						// chat.stream's fetchOptions.signal, aborted mid-stream, did not end
						// the request here (the SDK read on until the body's end).
						continue
					}
					scenario := st.scenario
					if leave != "end" {
						scenario += "-" + leave
					}
					t.Run(st.script+" "+scenario, func(t *testing.T) {
						// A client that stays (it read to the end, or its SDK does not end
						// the request when the loop is left) gets the whole body; one that
						// leaves mid-stream leaves after the first text.
						stays := leave == "end" || !st.leavesOnBreak && leave != "abort"
						up.noLinger.Store(stays)
						if !stays && (leave == "break" || leave == "abort") {
							up.pauseAfter.Store(st.textAt + 1)
						}
						t.Cleanup(func() { up.noLinger.Store(false); up.pauseAfter.Store(0) })
						before, left := len(fake.Calls()), up.cancelled.Load()
						r := runSDK(t, dir, st.script, scenario, front.url, o.key, st.model)
						if !r.OK || r.Status != 200 || !strings.HasPrefix(fakellm.Text, r.Text) || r.Text == "" ||
							(leave == "end" || leave == "stop") != (r.Text == fakellm.Text) || r.Left != leave && (leave != "abort" || r.Left != "end") {
							t.Fatalf("the call failed or its text is not what it read: %+v", r)
						}
						got := fake.Calls()[before:]
						if len(got) != 1 || !got[0].Stream {
							t.Fatalf("the provider got %+v, want one stream", got)
						}
						rec := waitReceipt(t, s, got[0].Header.Get("X-Service-Request-Id"))
						if !stays && up.cancelled.Load() == left {
							t.Fatal("the provider's request was not cancelled: the client did not leave before the body's end")
						}
						switch {
						case stays || leave == "stop" && st.terminal:
							if rec.cost() != st.whole || rec["complete"] != true || rec["cost_basis"] != "reported_usage" {
								t.Errorf("receipt %s, want %d micro-USD, complete, from the reported usage", rec, st.whole)
							}
						case leave == "stop": // Gemini's event stream: no terminal event
							if rec.cost() != st.whole || rec["complete"] != false || rec["cost_basis"] != "reported_usage" {
								t.Errorf("receipt %s, want %d micro-USD from the reported usage, incomplete", rec, st.whole)
							}
						default: // left mid-stream
							least := int64(1)
							if st.inputFirst {
								least = st.input
							}
							if rec.cost() < least || rec.cost() >= st.whole || rec["complete"] != false {
								t.Errorf("receipt %s, want at least %d micro-USD (less than the whole %d), incomplete", rec, least, st.whole)
							}
						}
					})
				}
			}
			if front.name == "gateway" {
				blockedThroughTheOtherSDKs(t, s, dir, fake, o)
			}
		})
	}
}

// blockedThroughTheOtherSDKs: member o, over a limit of 0.01 USD, calls through the
// gateway with each SDK (Google Gen AI, Mistral, Anthropic's Vertex client, AWS's Bedrock
// Runtime), streamed and not: each gets the usage-limit 429 at once, sent once (the
// gateway counts one refusal a call: no SDK retried it; bedrock.mjs is set to one
// attempt, the AWS SDK retrying a 429 otherwise), the code readable from the SDK's error
// (its body's error.code), and the headers X-Service-Error-Code and X-Service-Usage-State
// from the error of every SDK but Google's, whose ApiError keeps the status and the body
// only (docs/gateway.md, "Usage-limit refusals in the other SDKs").
func blockedThroughTheOtherSDKs(t *testing.T, s *stack, dir string, fake *fakellm.Server, o org) {
	s.guardPolicy(t, o, "0.01", nil)
	s.waitBlocked(t, o)
	for _, c := range []struct{ script, scenario, model string }{
		{"gemini.mjs", "json", "gemini-2.5-flash"},
		{"gemini.mjs", "stream", "gemini-2.5-flash"},
		{"mistral.mjs", "stream", "mistral-large-latest"},
		{"mistral.mjs", "ocr", "mistral-ocr-latest"},
		{"vertex.mjs", "vertex", "claude-sonnet-4-5@20250929"},
		{"vertex.mjs", "vertex-stream", "claude-sonnet-4-5@20250929"},
		{"bedrock.mjs", "converse-stream", "global.anthropic.claude-sonnet-4-5-20250929-v1:0"},
		{"bedrock.mjs", "invoke-stream", "global.anthropic.claude-sonnet-4-5-20250929-v1:0"},
	} {
		t.Run("blocked "+c.script+" "+c.scenario, func(t *testing.T) {
			refused := s.metric(t, "tollgate_enforcer_gateway_requests_total", "outcome", "refused")
			before := len(fake.Calls())
			r := runSDK(t, dir, c.script, c.scenario, s.gateway, o.key, c.model)
			const code = "service_gateway_usage_limit_exceeded"
			if r.OK || r.Status != 429 || deref(r.Code) != code || r.ElapsedMs >= 2000 {
				t.Errorf("want the usage-limit 429 at once, its code readable; got %+v", r)
			}
			if c.script != "gemini.mjs" && (!r.HeadersReadable || deref(r.HeaderCode) != code || deref(r.UsageState) != "blocked" || deref(r.ShouldRetry) != "false") {
				t.Errorf("the SDK's error does not give Tollgate's headers: %+v (usage state %s)", r, deref(r.UsageState))
			}
			if got := s.metric(t, "tollgate_enforcer_gateway_requests_total", "outcome", "refused") - refused; got != 1 {
				t.Errorf("the gateway refused %v requests, want 1 (the SDK retried the 429)", got)
			}
			if got := len(fake.Calls()) - before; got != 0 {
				t.Errorf("refused calls reached the provider (%d calls)", got)
			}
		})
	}
}
