package responseusage

import (
	"reflect"
	"strings"
	"testing"
)

// interactionsUsage is an Interactions API usage: 1,000 input tokens (300 audio, 200
// cached, 100 of them audio), 40 of tool results, 300 output and 50 of thinking, three
// Google Search queries and two URL context fetches (free).
const interactionsUsage = `{"total_input_tokens":1000,"total_cached_tokens":200,"total_output_tokens":300,"total_thought_tokens":50,` +
	`"total_tool_use_tokens":40,"total_tokens":1390,"initial_input_tokens":1000,` +
	`"input_tokens_by_modality":[{"modality":"text","tokens":700},{"modality":"audio","tokens":300}],` +
	`"cached_tokens_by_modality":[{"modality":"text","tokens":100},{"modality":"audio","tokens":100}],` +
	`"output_tokens_by_modality":[{"modality":"text","tokens":300}],` +
	`"grounding_tool_count":[{"type":"url_context","count":2},{"type":"google_search","count":3}]}`

// The Gemini API's Interactions API (POST /v1beta/interactions) reports generateContent's
// counts by names of its own (usage.total_*_tokens, snake_case, modalities in lower case,
// the grounding tools' uses in grounding_tool_count), read as Gemini's: the input with
// the tool results, the output with the thinking, the audio parts, Google Search's
// queries. Its answer in JSON is complete; its stream is complete at interaction.completed,
// whose interaction carries the model and the final usage (step.stop events carry the
// usage so far); in any chunking, as the reference reads them.
func TestInteractions(t *testing.T) {
	want := Usage{Model: "gemini-3-flash-preview", InputTokens: 1040, OutputTokens: 350, CachedInputTokens: 200,
		AudioInputTokens: 300, AudioInputReported: true, AudioOutputReported: true, CachedAudioInputTokens: 100, CachedAudioInputReported: true,
		WebSearchRequests: 3, Complete: true, Format: FormatGemini, InputReported: true, OutputReported: true}
	body := `{"id":"v1_abc","model":"gemini-3-flash-preview","status":"completed","object":"interaction","role":"model",` +
		`"steps":[{"type":"user_input","content":[{"type":"text","text":"How are tolls paid?"}]},{"type":"model_output","content":[{"type":"text","text":"By card."}]}],` +
		`"usage":` + interactionsUsage + `,"created":"2026-11-30T00:00:00Z"}`
	checkSplits(t, ctJSON, nil, []byte(body), want)
	if ref, ok := oracleFor(ctJSON, []byte(body)); !ok || !reflect.DeepEqual(ref, want) {
		t.Fatalf("the reference reads %s", show(ref))
	}

	running := `{"total_input_tokens":1000,"total_output_tokens":2,"input_tokens_by_modality":[{"modality":"text","tokens":700},{"modality":"audio","tokens":300}]}`
	event := func(typ, data string) string { return "event: " + typ + "\ndata: " + data + "\n\n" }
	stream := event("interaction.created", `{"event_type":"interaction.created","interaction":{"id":"v1_abc","model":"gemini-3-flash-preview","status":"in_progress","object":"interaction"},"event_id":"e1"}`) +
		event("interaction.status_update", `{"event_type":"interaction.status_update","interaction_id":"v1_abc","status":"in_progress"}`) +
		event("step.start", `{"event_type":"step.start","index":0,"step":{"type":"model_output","content":[]}}`) +
		event("step.delta", `{"event_type":"step.delta","index":0,"delta":{"type":"text","text":"By "}}`) +
		event("step.delta", `{"event_type":"step.delta","index":0,"delta":{"type":"text","text":"card."},"metadata":{"total_usage":`+running+`}}`) +
		event("step.stop", `{"event_type":"step.stop","index":0,"usage":`+running+`,"step_usage":{"total_output_tokens":2}}`) +
		event("interaction.completed", `{"event_type":"interaction.completed","interaction":{"id":"v1_abc","model":"gemini-3-flash-preview","status":"completed","usage":`+interactionsUsage+`}}`) +
		"data: [DONE]\n\n"
	wantStream := want
	wantStream.Format, wantStream.TextBytes = FormatGeminiSSE, int64(len("By card."))
	checkSplits(t, ctSSE, nil, []byte(stream), wantStream)
	if ref, ok := oracleFor(ctSSE, []byte(stream)); !ok || !reflect.DeepEqual(ref, wantStream) {
		t.Fatalf("the stream: the reference reads %s", show(ref))
	}

	// Cut before interaction.completed: the usage so far, not complete.
	cut := stream[:strings.Index(stream, "event: interaction.completed")]
	got := run(ctSSE, nil, Limits{}, [][]byte{[]byte(cut)}, true)
	if got.Complete || got.InputTokens != 1000 || got.OutputTokens != 2 || got.Model != "gemini-3-flash-preview" {
		t.Fatalf("a cut stream: %s", show(got))
	}
}
