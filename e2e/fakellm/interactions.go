package fakellm

// Google's Gemini API's Interactions API (POST /v1/interactions, /v1beta/...), answered as Google
// answers it in the format of May 2026 (steps; the older outputs removed), in the parts
// the official SDK (@google/genai) reads and the enforcer's accounting depends on:
//
//   - JSON: the Interaction (id, object, model, status "completed", its steps: a thought
//     step when the answer thought, a google_search_call step listing the web searches'
//     queries and its google_search_result step when it searched, the model_output step
//     with Text) and its usage, snake_case: total_input_tokens (InputTokens, the cached
//     ones included), total_cached_tokens (CachedInputTokens), total_output_tokens and
//     total_thought_tokens (OutputTokens split as generateContent's answer splits it: a
//     quarter of them thinking), total_tool_use_tokens (ToolUsePromptTokens), total_tokens
//     their sum, the lists by modality in lower case (input_tokens_by_modality,
//     cached_tokens_by_modality, output_tokens_by_modality: a "text" entry for the rest,
//     an "audio" one from AudioInputTokens, CachedAudioInputTokens, AudioOutputTokens)
//     and grounding_tool_count ([{"type": "google_search", "count": WebSearchRequests}]).
//     A count of 0 is left out, as Google's JSON leaves it out.
//   - "stream": true: server-sent events, each an event: line and its data, whose JSON
//     says its event_type too (last, as Google writes it): interaction.created (the
//     interaction in_progress), interaction.status_update, then each step's step.start,
//     step.delta (the text one per word, delta {"type": "text", "text"}) and step.stop
//     (usage: the running total so far; step_usage: that step's own), then
//     interaction.completed (the interaction completed, with its whole usage), then
//     "data: [DONE]", the terminator the SDK stops at.
//   - "background": true, not streamed: the interaction as Google answers it at once,
//     in_progress, without steps or usage (those come with a later GET).
//
// Call.Model is the body's model; Call.Stream its "stream".

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// interactionsRequest is the part of an Interactions request the fake reads.
type interactionsRequest struct {
	Model       string          `json:"model"`
	Agent       json.RawMessage `json:"agent"`
	Stream      bool            `json:"stream"`
	Background  bool            `json:"background"`
	ServiceTier string          `json:"service_tier"`
}

// interactions answers POST /{version}/interactions.
func (s *Server) interactions(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c := Call{API: GeminiInteractions, Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header.Clone(), Body: body}
	var req interactionsRequest
	jsonErr := json.Unmarshal(body, &req)
	c.Model, c.Stream = req.Model, req.Stream
	valid := jsonErr == nil && (req.Model != "" || len(req.Agent) > 0)
	n := s.record(&c, r, valid)
	if !valid {
		// Google's error shape.
		w.Header().Set("Content-Type", "application/json; charset=UTF-8")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"error":{"code":400,"message":"the body must be JSON with a model or an agent","status":"INVALID_ARGUMENT"}}`)
		return
	}
	model := req.Model
	if m, ok := s.Snapshots[model]; ok {
		model = m
	}
	id := fmt.Sprintf("v1_fake%06d", n)
	ew := newEventWriter(w, c.Gzip)
	defer ew.close()
	if req.Background && !req.Stream {
		ew.start("application/json; charset=UTF-8", http.StatusOK)
		ew.write(fmt.Sprintf(`{"id":%q,"status":"in_progress","object":"interaction",%s,"created":%q,"updated":%q}`,
			id, interactionsActor(model, req.Agent), interactionsTime, interactionsTime))
		return
	}
	tier := "standard"
	if req.ServiceTier == "priority" || req.ServiceTier == "flex" {
		tier = req.ServiceTier
	}
	steps := interactionSteps(c.Usage)
	if !req.Stream {
		var parts []string
		for _, st := range steps {
			parts = append(parts, st.whole)
		}
		ew.start("application/json; charset=UTF-8", http.StatusOK)
		ew.write(fmt.Sprintf(`{"id":%q,"status":"completed","object":"interaction","model":%q,"created":%q,"updated":%q,"service_tier":%q,"steps":[%s],"usage":%s}`,
			id, model, interactionsTime, interactionsTime, tier, strings.Join(parts, ","), interactionUsageOf(c.Usage).json()))
		return
	}
	ew.start("text/event-stream", http.StatusOK)
	event := func(typ, fields string) {
		ew.write(fmt.Sprintf("event: %s\ndata: {%s,\"event_type\":%q}\n\n", typ, fields, typ))
	}
	event("interaction.created", fmt.Sprintf(`"interaction":{"id":%q,"status":"in_progress","object":"interaction","model":%q}`, id, model))
	event("interaction.status_update", fmt.Sprintf(`"interaction_id":%q,"status":"in_progress"`, id))
	var running interactionUsage
	for i, st := range steps {
		event("step.start", fmt.Sprintf(`"index":%d,"step":%s`, i, st.start))
		for _, d := range st.deltas {
			event("step.delta", fmt.Sprintf(`"index":%d,"delta":%s`, i, d))
		}
		running = running.plus(st.usage)
		event("step.stop", fmt.Sprintf(`"index":%d,"usage":%s,"step_usage":%s`, i, running.json(), st.usage.json()))
	}
	event("interaction.completed", fmt.Sprintf(`"interaction":{"id":%q,"status":"completed","usage":%s,"object":"interaction","model":%q,"service_tier":%q,"created":%q,"updated":%q}`,
		id, running.json(), model, tier, interactionsTime, interactionsTime))
	ew.write("data: [DONE]\n\n")
}

// interactionsTime is every interaction's created and updated time.
const interactionsTime = "2026-11-29T12:00:00Z"

// interactionsActor is an interaction's "model" member, or its "agent" when the request
// named one.
func interactionsActor(model string, agent json.RawMessage) string {
	if model == "" {
		return `"agent":` + string(agent)
	}
	return fmt.Sprintf(`"model":%q`, model)
}

// interactionUsage is an Interactions usage, or a part of one: its counts, the audio
// parts of the input, the cached input and the output, and the web searches.
type interactionUsage struct {
	input, audioInput, cached, cachedAudio, toolUse int64
	output, audioOutput, thoughts, searches         int64
}

// interactionUsageOf is the whole usage of an answer reporting u: its output split as
// generateContent's (a quarter of OutputTokens thinking, apart from the output).
func interactionUsageOf(u Usage) interactionUsage {
	thoughts := u.OutputTokens / 4
	return interactionUsage{
		input: u.InputTokens, audioInput: u.AudioInputTokens, cached: u.CachedInputTokens, cachedAudio: u.CachedAudioInputTokens,
		toolUse: u.ToolUsePromptTokens, output: u.OutputTokens - thoughts, audioOutput: u.AudioOutputTokens, thoughts: thoughts,
		searches: u.WebSearchRequests,
	}
}

func (a interactionUsage) plus(b interactionUsage) interactionUsage {
	return interactionUsage{a.input + b.input, a.audioInput + b.audioInput, a.cached + b.cached, a.cachedAudio + b.cachedAudio,
		a.toolUse + b.toolUse, a.output + b.output, a.audioOutput + b.audioOutput, a.thoughts + b.thoughts, a.searches + b.searches}
}

// json is the usage object, its counts of 0 left out (total_tokens always written).
func (a interactionUsage) json() string {
	var fields []string
	count := func(name string, n int64) {
		if n != 0 {
			fields = append(fields, fmt.Sprintf(`%q:%d`, name, n))
		}
	}
	list := func(name, entries string) {
		if entries != "" {
			fields = append(fields, fmt.Sprintf(`%q:[%s]`, name, entries))
		}
	}
	count("total_input_tokens", a.input)
	list("input_tokens_by_modality", interactionModalities(a.input-a.audioInput, a.audioInput))
	count("total_cached_tokens", a.cached)
	list("cached_tokens_by_modality", interactionModalities(a.cached-a.cachedAudio, a.cachedAudio))
	count("total_output_tokens", a.output)
	list("output_tokens_by_modality", interactionModalities(a.output-a.audioOutput, a.audioOutput))
	count("total_thought_tokens", a.thoughts)
	count("total_tool_use_tokens", a.toolUse)
	if a.searches > 0 {
		list("grounding_tool_count", fmt.Sprintf(`{"type":"google_search","count":%d}`, a.searches))
	}
	fields = append(fields, fmt.Sprintf(`"total_tokens":%d`, a.input+a.toolUse+a.output+a.thoughts))
	return "{" + strings.Join(fields, ",") + "}"
}

// interactionModalities are the entries of a *_tokens_by_modality list (lower-case
// modalities, as the Interactions API names them), 0 left out.
func interactionModalities(text, audio int64) string {
	var entries []string
	if text > 0 {
		entries = append(entries, fmt.Sprintf(`{"modality":"text","tokens":%d}`, text))
	}
	if audio > 0 {
		entries = append(entries, fmt.Sprintf(`{"modality":"audio","tokens":%d}`, audio))
	}
	return strings.Join(entries, ",")
}

// interactionStep is one step of an answer: as the JSON answer lists it (whole), as a
// stream's step.start shows it (start) and its step.delta deltas, and the usage it adds
// (a stream's step_usage).
type interactionStep struct {
	whole, start string
	deltas       []string
	usage        interactionUsage
}

// interactionSteps are the steps of an answer reporting u: a thought (when it thought;
// it counts the input, read before), the web searches' call and result (when it
// searched; the results given back to the model are the tool-use tokens), then the
// model's output, Text (in a stream one delta per word). Their usages add up to u's.
func interactionSteps(u Usage) []interactionStep {
	whole := interactionUsageOf(u)
	input := interactionUsage{input: whole.input, audioInput: whole.audioInput, cached: whole.cached, cachedAudio: whole.cachedAudio}
	var steps []interactionStep
	if whole.thoughts > 0 {
		const signature = "c2lnbmF0dXJlIG9mIGEgdGhvdWdodA=="
		steps = append(steps, interactionStep{
			whole:  fmt.Sprintf(`{"type":"thought","signature":%q}`, signature),
			start:  `{"type":"thought"}`,
			deltas: []string{fmt.Sprintf(`{"type":"thought_signature","signature":%q}`, signature)},
			usage:  interactionUsage{thoughts: whole.thoughts}.plus(input),
		})
		input = interactionUsage{}
	}
	if whole.searches > 0 {
		queries := make([]string, whole.searches)
		for i := range queries {
			queries[i] = fmt.Sprintf("%q", fmt.Sprint("how are tolls paid ", i))
		}
		call := fmt.Sprintf(`{"type":"google_search_call","id":"gs_0","arguments":{"queries":[%s]}}`, strings.Join(queries, ","))
		result := `{"type":"google_search_result","call_id":"gs_0","result":[{"search_suggestions":"<div></div>"}]}`
		steps = append(steps,
			interactionStep{whole: call, start: call, usage: interactionUsage{searches: whole.searches}.plus(input)},
			interactionStep{whole: result, start: result, usage: interactionUsage{toolUse: whole.toolUse}})
		input = interactionUsage{}
	} else {
		input.toolUse = whole.toolUse
	}
	var deltas []string
	for _, w := range words() {
		deltas = append(deltas, fmt.Sprintf(`{"type":"text","text":%q}`, w))
	}
	return append(steps, interactionStep{
		whole:  fmt.Sprintf(`{"type":"model_output","content":[{"type":"text","text":%q}]}`, Text),
		start:  `{"type":"model_output"}`,
		deltas: deltas,
		usage:  interactionUsage{output: whole.output, audioOutput: whole.audioOutput}.plus(input),
	})
}
