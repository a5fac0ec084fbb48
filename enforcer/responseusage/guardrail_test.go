package responseusage

import (
	"bytes"
	"reflect"
	"strconv"
	"testing"

	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
)

// guardUsage is one assessment's invocationMetrics, its usage's counts as AWS writes them
// (the free word filter and regular expression counts among them).
func guardUsage(content, topic, pii, grounding, reasoning, policies, images int) string {
	return `{"guardrailProcessingLatency":214,"usage":{"topicPolicyUnits":` + strconv.Itoa(topic) + `,"contentPolicyUnits":` + strconv.Itoa(content) +
		`,"wordPolicyUnits":3,"sensitiveInformationPolicyUnits":` + strconv.Itoa(pii) + `,"sensitiveInformationPolicyFreeUnits":4,` +
		`"contextualGroundingPolicyUnits":` + strconv.Itoa(grounding) + `,"contentPolicyImageUnits":` + strconv.Itoa(images) +
		`,"automatedReasoningPolicyUnits":` + strconv.Itoa(reasoning) + `,"automatedReasoningPolicies":` + strconv.Itoa(policies) + `},` +
		`"guardrailCoverage":{"textCharacters":{"guarded":1041,"total":1041}}}`
}

// An Amazon Bedrock guardrail's trace (asked for: trace "enabled") reports the units
// each of its policies assessed, in the prompt (inputAssessment, by guardrail) and in
// the answer (outputAssessments, by guardrail, a list: a stream is assessed in parts).
// They are billed apart from the tokens: summed over the assessments, the free word
// filters and regular expressions left out, the automated reasoning units once per
// policy; in any chunking, as the reference reads them.
func TestGuardrailUnits(t *testing.T) {
	trace := `"trace":{"guardrail":{"modelOutput":["x"],"inputAssessment":{"3e59qlue4hag":{"contentPolicy":{"filters":[]},"invocationMetrics":` +
		guardUsage(2, 2, 2, 0, 2, 2, 1) + `,"appliedGuardrailDetails":{"guardrailId":"3e59qlue4hag","guardrailOrigin":["REQUEST"]}}},` +
		`"outputAssessments":{"3e59qlue4hag":[{"invocationMetrics":` + guardUsage(1, 1, 1, 3, 1, 2, 0) + `},{"invocationMetrics":` +
		guardUsage(1, 1, 0, 0, 0, 0, 0) + `}]}}}`
	wantUnits := pricecatalog.GuardrailUnits{ContentText: 4, DeniedTopics: 4, SensitiveInformation: 3, ContextualGrounding: 3,
		AutomatedReasoning: 2*2 + 1*2, ContentImages: 1}
	body := `{"metrics":{"latencyMs":812},"output":{"message":{"content":[{"text":"Tolls are paid."}],"role":"assistant"}},"stopReason":"end_turn",` +
		trace + `,"usage":{"inputTokens":21,"outputTokens":9,"totalTokens":30}}`
	want := Usage{InputTokens: 21, OutputTokens: 9, Complete: true, Format: FormatBedrockConverse, InputReported: true, OutputReported: true,
		TextBytes: int64(len("Tolls are paid.")), Guardrail: wantUnits, GuardrailReported: true}
	checkSplits(t, ctJSON, nil, []byte(body), want)
	if ref, ok := oracleFor(ctJSON, []byte(body)); !ok || !reflect.DeepEqual(ref, want) {
		t.Fatalf("the reference reads %s", show(ref))
	}

	// A prompt the guardrail refused: the model never ran (no tokens), the guardrail's
	// units are billed.
	blocked := `{"output":{"message":{"content":[{"text":"Sorry."}],"role":"assistant"}},"stopReason":"guardrail_intervened",` +
		`"trace":{"guardrail":{"actionReason":"Guardrail blocked.","inputAssessment":{"gr1":{"topicPolicy":{"topics":[{"name":"x","type":"DENY","action":"BLOCKED","detected":true}]},` +
		`"invocationMetrics":` + guardUsage(1, 1, 0, 0, 0, 0, 0) + `}}}},"usage":{"inputTokens":0,"outputTokens":0,"totalTokens":0}}`
	wantBlocked := Usage{Complete: true, Format: FormatBedrockConverse, InputReported: true, OutputReported: true, TextBytes: int64(len("Sorry.")),
		Guardrail: pricecatalog.GuardrailUnits{ContentText: 1, DeniedTopics: 1}, GuardrailReported: true}
	checkSplits(t, ctJSON, nil, []byte(blocked), wantBlocked)
	if ref, ok := oracleFor(ctJSON, []byte(blocked)); !ok || !reflect.DeepEqual(ref, wantBlocked) {
		t.Fatalf("blocked: the reference reads %s", show(ref))
	}

	// ConverseStream: the trace comes in the metadata event.
	stream := bytes.Join([][]byte{
		frame(t, "event", "messageStart", `{"role":"assistant"}`),
		frame(t, "event", "contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":"Tolls are paid."}}`),
		frame(t, "event", "messageStop", `{"stopReason":"end_turn"}`),
		frame(t, "event", "metadata", `{"metrics":{"latencyMs":245},`+trace+`,"usage":{"inputTokens":21,"outputTokens":9,"totalTokens":30}}`),
	}, nil)
	wantStream := want
	wantStream.Format = FormatBedrockConverseStream
	checkSplits(t, ctEventStream, nil, stream, wantStream)

	// InvokeModel: the model's own answer (a Claude message) with amazon-bedrock-trace:
	// its input by guardrail, its outputs a list of them.
	invoke := `{"id":"msg_1","type":"message","role":"assistant","model":"claude-haiku-4-5","content":[{"type":"text","text":"Tolls are paid."}],` +
		`"stop_reason":"end_turn","usage":{"input_tokens":21,"output_tokens":9},"amazon-bedrock-guardrailAction":"NONE",` +
		`"amazon-bedrock-trace":{"guardrail":{"input":{"h28wrktbwagn":{"invocationMetrics":` + guardUsage(2, 0, 0, 0, 0, 0, 0) + `}},` +
		`"outputs":[{"h28wrktbwagn":{"invocationMetrics":` + guardUsage(1, 0, 0, 0, 0, 0, 0) + `}}]}}}`
	wantInvoke := Usage{Model: "claude-haiku-4-5", InputTokens: 21, OutputTokens: 9, Complete: true, Format: FormatAnthropicMessages, InputReported: true,
		OutputReported: true, TextBytes: int64(len("Tolls are paid.")), Guardrail: pricecatalog.GuardrailUnits{ContentText: 3}, GuardrailReported: true}
	checkSplits(t, ctJSON, nil, []byte(invoke), wantInvoke)
	if ref, ok := oracleFor(ctJSON, []byte(invoke)); !ok || !reflect.DeepEqual(ref, wantInvoke) {
		t.Fatalf("invoke: the reference reads %s", show(ref))
	}

	// ApplyGuardrail (a guardrail called on its own, no model): its top-level usage, and
	// not its assessments' own as well.
	apply := `{"usage":{"topicPolicyUnits":1,"contentPolicyUnits":2,"wordPolicyUnits":1,"sensitiveInformationPolicyUnits":0,` +
		`"sensitiveInformationPolicyFreeUnits":0,"contextualGroundingPolicyUnits":0,"automatedReasoningPolicyUnits":3,"automatedReasoningPolicies":2},` +
		`"action":"NONE","actionReason":"No action.","outputs":[],"assessments":[{"invocationMetrics":` + guardUsage(2, 1, 0, 0, 3, 2, 0) + `}],` +
		`"guardrailCoverage":{"textCharacters":{"guarded":1200,"total":1200}}}`
	wantApply := Usage{Complete: false, Guardrail: pricecatalog.GuardrailUnits{ContentText: 2, DeniedTopics: 1, AutomatedReasoning: 6}, GuardrailReported: true}
	checkSplits(t, ctJSON, nil, []byte(apply), wantApply)
	if ref, ok := oracleFor(ctJSON, []byte(apply)); !ok || !reflect.DeepEqual(ref, wantApply) {
		t.Fatalf("ApplyGuardrail: the reference reads %s", show(ref))
	}

	// InvokeGuardrailChecks (detect-only checks, no guardrail): each check's text units.
	checks := `{"results":{"contentFilter":{"results":[{"category":"VIOLENCE","severityScore":0.01}]},"sensitiveInformation":{"results":[],"truncated":false}},` +
		`"usage":{"contentFilter":{"textUnits":2},"promptAttack":{"textUnits":3},"sensitiveInformation":{"textUnits":1}}}`
	wantChecks := Usage{Guardrail: pricecatalog.GuardrailUnits{ChecksContentFilter: 2, ChecksPromptAttack: 3, ChecksSensitiveInformation: 1}, GuardrailReported: true}
	checkSplits(t, ctJSON, nil, []byte(checks), wantChecks)
	if ref, ok := oracleFor(ctJSON, []byte(checks)); !ok || !reflect.DeepEqual(ref, wantChecks) {
		t.Fatalf("guardrail checks: the reference reads %s", show(ref))
	}

	// A guardrail of free policies alone (word filters) reports its billed counts as 0:
	// reported, nothing to estimate.
	free := `{"output":{"message":{"content":[{"text":"Hi"}]}},"trace":{"guardrail":{"inputAssessment":{"g":{"invocationMetrics":` +
		guardUsage(0, 0, 0, 0, 0, 0, 0) + `}}}},"usage":{"inputTokens":1,"outputTokens":1}}`
	wantFree := Usage{InputTokens: 1, OutputTokens: 1, Complete: true, Format: FormatBedrockConverse, InputReported: true, OutputReported: true,
		TextBytes: 2, GuardrailReported: true}
	checkSplits(t, ctJSON, nil, []byte(free), wantFree)
	if ref, ok := oracleFor(ctJSON, []byte(free)); !ok || !reflect.DeepEqual(ref, wantFree) {
		t.Fatalf("free policies: the reference reads %s", show(ref))
	}

	// Only at those paths: the same counts elsewhere (a tool's input, a usage without its
	// invocationMetrics, a trace of another kind) are not the guardrail's.
	for _, elsewhere := range []string{
		`{"output":{"message":{"content":[{"toolUse":{"input":{"trace":{"guardrail":{"inputAssessment":{"g":{"invocationMetrics":` + guardUsage(9, 9, 9, 9, 9, 9, 9) + `}}}}}}}]}},"usage":{"inputTokens":1,"outputTokens":1}}`,
		`{"trace":{"guardrail":{"inputAssessment":{"g":{"usage":{"contentPolicyUnits":9}}}}},"usage":{"inputTokens":1,"outputTokens":1}}`,
		`{"trace":{"promptRouter":{"inputAssessment":{"g":{"invocationMetrics":` + guardUsage(9, 9, 9, 9, 9, 9, 9) + `}}}},"usage":{"inputTokens":1,"outputTokens":1}}`,
		`{"results":{"contentFilter":{"textUnits":9}},"usage":{"inputTokens":1,"outputTokens":1,"contentFilter":{"units":9}}}`,
		`{"trace":{"guardrail":{"outputAssessments":{"g":{"x":{"invocationMetrics":` + guardUsage(9, 9, 9, 9, 9, 9, 9) + `}}}}},"usage":{"inputTokens":1,"outputTokens":1}}`,
		`{"trace":{"guardrail":{"input":{"g":{"invocationMetrics":` + guardUsage(9, 9, 9, 9, 9, 9, 9) + `}}}},"usage":{"inputTokens":1,"outputTokens":1}}`,
	} {
		got := run(ctJSON, nil, Limits{}, [][]byte{[]byte(elsewhere)}, true)
		if !got.Guardrail.IsZero() || got.GuardrailReported {
			t.Fatalf("%s: read %+v", elsewhere, got.Guardrail)
		}
		if ref, _ := oracleFor(ctJSON, []byte(elsewhere)); !reflect.DeepEqual(ref, got) {
			t.Fatalf("%s: the reference reads %s, the extractor %s", elsewhere, show(ref), show(got))
		}
	}
}
