package fakellm

// Amazon Bedrock Runtime's model invocation, answered as Bedrock answers for an Anthropic
// Claude model:
//
//   - POST /model/{modelId}/invoke: the Anthropic Messages response (anthropicJSON),
//     with the token counts in the response headers X-Amzn-Bedrock-Input-Token-Count and
//     -Output-Token-Count (and -Cache-Read- / -Cache-Write-Input-Token-Count when not 0).
//   - POST /model/{modelId}/invoke-with-response-stream: an AWS event stream
//     (application/vnd.amazon.eventstream) of "chunk" events, each carrying one Anthropic
//     stream event's JSON in base64 ({"bytes": ..., "p": padding}): message_start (the
//     input usage), content_block_start, one text delta per word, content_block_stop,
//     message_delta (the output tokens), message_stop, which Bedrock extends with
//     "amazon-bedrock-invocationMetrics" (input and output token counts, cache counts
//     when not 0, latencies). No ping: Bedrock does not pass Anthropic's on.
//   - POST /model/{modelId}/converse: Bedrock's own shape, output.message.content
//     [{text}], stopReason, usage {inputTokens, outputTokens, totalTokens,
//     cacheReadInputTokens, cacheWriteInputTokens}, metrics.
//   - POST /model/{modelId}/converse-stream: an event stream of messageStart, one
//     contentBlockDelta per word, contentBlockStop, messageStop and metadata (the
//     serviceTier the request asked for, {"type": "default"} when none, and the usage
//     and metrics as converse reports them); each event's payload is its JSON, with the
//     "p" padding Bedrock adds.
//
// A latency asked for (Converse's performanceConfig.latency, InvokeModel's
// X-Amzn-Bedrock-PerformanceConfig-Latency header) is served: the answer says it, in its
// performanceConfig (the stream's metadata event's) or in that header; so is
// InvokeModel's service tier (X-Amzn-Bedrock-Service-Tier).
//
// A guardrail (Converse's guardrailConfig {guardrailIdentifier, guardrailVersion, trace},
// InvokeModel's X-Amzn-Bedrock-GuardrailIdentifier and X-Amzn-Bedrock-Trace headers)
// whose trace was asked for ("enabled", "enabled_full"; ENABLED, ENABLED_FULL) is
// answered with it, its usage as Usage.GuardrailInputUnits and GuardrailOutputUnits say
// (bedrockGuardrail): Converse's trace.guardrail (its stream's metadata event's),
// InvokeModel's amazon-bedrock-trace.guardrail (its stream's last chunk's) with
// amazon-bedrock-guardrailAction. The guardrail "gr-blocks-all" refuses every prompt:
// the model does not run (no text of its own, no tokens), stopReason
// "guardrail_intervened", the prompt's assessment alone.
//
// Bedrock's inputTokens (and inputTokenCount, X-Amzn-Bedrock-Input-Token-Count) leave
// out the cache reads and writes, as Anthropic's input_tokens does: Usage.InputTokens is
// reported as it is, CachedInputTokens as the cache reads, CacheCreationInputTokens as
// the cache writes. totalTokens is the sum of the four.
//
// The model id is the path's segment, percent-decoded ("anthropic.claude-sonnet-4-5-
// 20250929-v1%3A0", an inference profile "us.anthropic...", or an ARN with its slashes
// encoded): Call.Model. The Anthropic events' "model" is the Claude model it names, as
// Bedrock answers ("claude-sonnet-4-5-20250929").

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
)

// Bedrock Runtime's API names.
const (
	BedrockInvoke         = "bedrock.invokeModel"
	BedrockInvokeStream   = "bedrock.invokeModelWithResponseStream"
	BedrockConverse       = "bedrock.converse"
	BedrockConverseStream = "bedrock.converseStream"
	// BedrockApplyGuardrail is a guardrail called on its own (POST
	// /guardrail/{guardrailIdentifier}/version/{version}/apply; Call.Model is the
	// guardrail): answered with its usage, Usage.GuardrailInputUnits of its content filter
	// and of its denied topics, and its assessment's own.
	BedrockApplyGuardrail = "bedrock.applyGuardrail"
	// BedrockCountTokens counts a request's input (POST /model/{modelId}/count-tokens),
	// free: answered {"inputTokens": Usage.InputTokens}.
	BedrockCountTokens = "bedrock.countTokens"
	// BedrockGuardrailChecks runs the detect-only checks (POST /guardrail-checks/invoke):
	// answered with the usage of each check the request asked for, Usage.GuardrailInputUnits
	// text units each.
	BedrockGuardrailChecks = "bedrock.invokeGuardrailChecks"
)

// bedrockPadding is the "p" member Bedrock adds to every event, padding it to hide the
// length of its content.
const bedrockPadding = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"

// bedrockRoute is the API and the model id of a Bedrock Runtime path
// (/model/{modelId}/{operation}, escaped as the request sent it); "" for another path.
func bedrockRoute(escapedPath string) (api, modelID string) {
	if escapedPath == "/guardrail-checks/invoke" {
		return BedrockGuardrailChecks, "guardrail-checks" // no model: Call.Model names the API
	}
	if rest, ok := strings.CutPrefix(escapedPath, "/guardrail/"); ok {
		id, version, ok := strings.Cut(rest, "/version/")
		if v, apply := strings.CutSuffix(version, "/apply"); ok && apply && id != "" && v != "" {
			if id, err := url.PathUnescape(id); err == nil {
				return BedrockApplyGuardrail, id
			}
		}
		return "", ""
	}
	rest, ok := strings.CutPrefix(escapedPath, "/model/")
	if !ok {
		return "", ""
	}
	id, op, ok := strings.Cut(rest, "/")
	if !ok || id == "" {
		return "", ""
	}
	switch op {
	case "invoke":
		api = BedrockInvoke
	case "invoke-with-response-stream":
		api = BedrockInvokeStream
	case "converse":
		api = BedrockConverse
	case "converse-stream":
		api = BedrockConverseStream
	case "count-tokens":
		api = BedrockCountTokens
	default:
		return "", ""
	}
	modelID, err := url.PathUnescape(id)
	if err != nil || modelID == "" {
		return "", ""
	}
	return api, modelID
}

// bedrockStreaming reports whether a Bedrock API answers an event stream.
func bedrockStreaming(api string) bool {
	return api == BedrockInvokeStream || api == BedrockConverseStream
}

// bedrockClaudeModel is the Anthropic model a Bedrock model id names, as the Anthropic
// events' "model" gives it: the id without an ARN's prefix, a cross-region inference
// profile's geography (us., eu., apac., global., ...), "anthropic." and the version
// suffix ("-v1:0"). An id that is not an Anthropic model's is answered as it is.
func bedrockClaudeModel(id string) string {
	if i := strings.LastIndex(id, "/"); i >= 0 {
		id = id[i+1:] // arn:aws:bedrock:...:inference-profile/us.anthropic...
	}
	i := strings.Index(id, "anthropic.")
	if i < 0 {
		return id
	}
	m := id[i+len("anthropic."):]
	if j := strings.LastIndex(m, "-v"); j > 0 {
		m = m[:j]
	}
	return m
}

// BlockingGuardrail is the guardrail that refuses every prompt.
const BlockingGuardrail = "gr-blocks-all"

// bedrockGuardrail is the guardrail of a Bedrock call and whether its trace was asked for
// ("" when it has none).
func bedrockGuardrail(c Call) (id string, traced bool) {
	if id = c.Header.Get("X-Amzn-Bedrock-GuardrailIdentifier"); id != "" {
		t := strings.ToUpper(c.Header.Get("X-Amzn-Bedrock-Trace"))
		return id, t == "ENABLED" || t == "ENABLED_FULL"
	}
	var req struct {
		GuardrailConfig *struct {
			GuardrailIdentifier string `json:"guardrailIdentifier"`
			Trace               string `json:"trace"`
		} `json:"guardrailConfig"`
	}
	if json.Unmarshal(c.Body, &req) != nil || req.GuardrailConfig == nil {
		return "", false
	}
	return req.GuardrailConfig.GuardrailIdentifier, req.GuardrailConfig.Trace == "enabled" || req.GuardrailConfig.Trace == "enabled_full"
}

// guardrailAssessment is one assessment's JSON: its content filter and denied topics
// assessed units text units each (the free word filter and regular expressions too).
func guardrailAssessment(id string, units int64) string {
	return fmt.Sprintf(`{"contentPolicy":{"filters":[]},"invocationMetrics":{"guardrailProcessingLatency":3,"usage":%s,"guardrailCoverage":{"textCharacters":{"guarded":%d,"total":%d}}},"appliedGuardrailDetails":{"guardrailId":%q,"guardrailVersion":"1","guardrailOrigin":["REQUEST"],"guardrailOwnership":"SELF"}}`,
		guardrailUsage(units), units*1000, units*1000, id)
}

// guardrailUsage is a guardrail's usage (GuardrailUsage) whose content filter and denied
// topics assessed units text units each (the free word filter and regular expressions
// too).
func guardrailUsage(units int64) string {
	return fmt.Sprintf(`{"topicPolicyUnits":%d,"contentPolicyUnits":%d,"wordPolicyUnits":%d,"sensitiveInformationPolicyUnits":0,"sensitiveInformationPolicyFreeUnits":%d,"contextualGroundingPolicyUnits":0,"contentPolicyImageUnits":0}`,
		units, units, units, units)
}

// converseTrace is a Converse answer's trace member and a comma ("" without one).
func converseTrace(id string, blocked bool, u Usage) string {
	out := fmt.Sprintf(`,"outputAssessments":{%q:[%s]}`, id, guardrailAssessment(id, u.GuardrailOutputUnits))
	if blocked {
		out = `,"actionReason":"Guardrail blocked."`
	}
	return fmt.Sprintf(`"trace":{"guardrail":{"inputAssessment":{%q:%s}%s}},`, id, guardrailAssessment(id, u.GuardrailInputUnits), out)
}

// invokeTrace is an InvokeModel answer's guardrail members, each after a comma.
func invokeTrace(id string, u Usage) string {
	return fmt.Sprintf(`,"amazon-bedrock-guardrailAction":"NONE","amazon-bedrock-trace":{"guardrail":{"input":{%q:%s},"outputs":[{%q:%s}]}}`,
		id, guardrailAssessment(id, u.GuardrailInputUnits), id, guardrailAssessment(id, u.GuardrailOutputUnits))
}

// bedrockAnswer answers a Bedrock call (c.API one of the Bedrock APIs) with usage u.
func bedrockAnswer(w http.ResponseWriter, ew *eventWriter, c Call, n int, u Usage) {
	guardrail, traced := bedrockGuardrail(c)
	blocked := guardrail == BlockingGuardrail
	if blocked {
		u = Usage{GuardrailInputUnits: u.GuardrailInputUnits}
	}
	trace := "" // the trace member and a comma, Converse's
	if traced {
		trace = converseTrace(guardrail, blocked, u)
	}
	stop := "end_turn"
	if blocked {
		stop = "guardrail_intervened"
	}
	h := w.Header()
	h.Set("X-Amzn-Requestid", fmt.Sprintf("00000000-0000-4000-8000-%012d", n))
	for _, name := range []string{headerServiceTier, headerLatency} {
		if v := c.Header.Get(name); v != "" {
			h.Set(name, v) // InvokeModel's tier and latency, served as asked
		}
	}
	switch c.API {
	case BedrockGuardrailChecks:
		var req struct {
			Checks map[string]json.RawMessage `json:"checks"`
		}
		_ = json.Unmarshal(c.Body, &req)
		var usage []string
		for _, check := range []string{"contentFilter", "promptAttack", "sensitiveInformation"} {
			if req.Checks[check] != nil {
				usage = append(usage, fmt.Sprintf(`%q:{"textUnits":%d}`, check, u.GuardrailInputUnits))
			}
		}
		ew.start("application/json", http.StatusOK)
		ew.write(`{"results":{},"usage":{` + strings.Join(usage, ",") + `}}`)
	case BedrockCountTokens:
		ew.start("application/json", http.StatusOK)
		ew.write(fmt.Sprintf(`{"inputTokens":%d}`, u.InputTokens))
	case BedrockApplyGuardrail:
		action := "NONE"
		if c.Model == BlockingGuardrail {
			action = "GUARDRAIL_INTERVENED"
		}
		ew.start("application/json", http.StatusOK)
		ew.write(fmt.Sprintf(`{"usage":%s,"action":%q,"actionReason":"No action.","outputs":[],"assessments":[%s],"guardrailCoverage":{"textCharacters":{"guarded":%d,"total":%d}}}`,
			guardrailUsage(u.GuardrailInputUnits), action, guardrailAssessment(c.Model, u.GuardrailInputUnits),
			u.GuardrailInputUnits*1000, u.GuardrailInputUnits*1000))
	case BedrockInvoke:
		h.Set("X-Amzn-Bedrock-Invocation-Latency", "1")
		h.Set("X-Amzn-Bedrock-Input-Token-Count", fmt.Sprint(u.InputTokens))
		h.Set("X-Amzn-Bedrock-Output-Token-Count", fmt.Sprint(u.OutputTokens))
		if u.CachedInputTokens != 0 {
			h.Set("X-Amzn-Bedrock-Cache-Read-Input-Token-Count", fmt.Sprint(u.CachedInputTokens))
		}
		if u.CacheCreationInputTokens != 0 {
			h.Set("X-Amzn-Bedrock-Cache-Write-Input-Token-Count", fmt.Sprint(u.CacheCreationInputTokens))
		}
		ew.start("application/json", http.StatusOK)
		msg := anthropicJSON(bedrockMessageID(n), bedrockClaudeModel(c.Model), u, "")
		if traced {
			msg = strings.TrimSuffix(msg, "}") + invokeTrace(guardrail, u) + "}"
		}
		ew.write(msg)
	case BedrockInvokeStream:
		h.Set("X-Amzn-Bedrock-Content-Type", "application/json")
		ew.start("application/vnd.amazon.eventstream", http.StatusOK)
		events := bedrockAnthropicEvents(bedrockMessageID(n), bedrockClaudeModel(c.Model), u)
		if traced { // the last chunk carries the trace
			last := len(events) - 1
			events[last] = strings.TrimSuffix(events[last], "}") + invokeTrace(guardrail, u) + "}"
		}
		for _, e := range events {
			payload := fmt.Sprintf(`{"bytes":%q,"p":%q}`, base64.StdEncoding.EncodeToString([]byte(e)), bedrockPadding)
			ew.write(bedrockFrame("chunk", payload))
		}
	case BedrockConverse:
		ew.start("application/json", http.StatusOK)
		ew.write(fmt.Sprintf(`{"output":{"message":{"role":"assistant","content":[{"text":%q}]}},"stopReason":%q,%s"usage":%s,"metrics":{"latencyMs":1},%s}`,
			Text, stop, trace, converseUsage(u), converseServed(c.Body)))
	case BedrockConverseStream:
		ew.start("application/vnd.amazon.eventstream", http.StatusOK)
		p := fmt.Sprintf(`,"p":%q}`, bedrockPadding)
		ew.write(bedrockFrame("messageStart", `{"role":"assistant"`+p))
		for _, word := range words() {
			ew.write(bedrockFrame("contentBlockDelta", fmt.Sprintf(`{"contentBlockIndex":0,"delta":{"text":%q}`, word)+p))
		}
		ew.write(bedrockFrame("contentBlockStop", `{"contentBlockIndex":0`+p))
		ew.write(bedrockFrame("messageStop", fmt.Sprintf(`{"stopReason":%q`, stop)+p))
		ew.write(bedrockFrame("metadata", `{`+trace+`"usage":`+converseUsage(u)+`,"metrics":{"latencyMs":1},`+converseServed(c.Body)+p))
	}
}

// converseServed is how a Converse answer says it was served: its serviceTier member,
// the tier the request asked for ({"type": "priority"}, "flex", ...), else {"type":
// "default"}; then, when the request asked for a latency ("optimized", "standard"), its
// performanceConfig member, served as asked.
func converseServed(body []byte) string {
	var req struct {
		ServiceTier struct {
			Type string `json:"type"`
		} `json:"serviceTier"`
		PerformanceConfig struct {
			Latency string `json:"latency"`
		} `json:"performanceConfig"`
	}
	_ = json.Unmarshal(body, &req)
	if req.ServiceTier.Type == "" {
		req.ServiceTier.Type = "default"
	}
	served := fmt.Sprintf(`"serviceTier":{"type":%q}`, req.ServiceTier.Type)
	if req.PerformanceConfig.Latency != "" {
		served += fmt.Sprintf(`,"performanceConfig":{"latency":%q}`, req.PerformanceConfig.Latency)
	}
	return served
}

// headerServiceTier and headerLatency ask InvokeModel for a service tier and a latency,
// and its answer says the ones it served.
const (
	headerServiceTier = "X-Amzn-Bedrock-Service-Tier"
	headerLatency     = "X-Amzn-Bedrock-PerformanceConfig-Latency"
)

func bedrockMessageID(n int) string { return fmt.Sprintf("msg_bdrk_fake%06d", n) }

// converseUsage is the Converse API's usage: inputTokens without the cache reads and
// writes, which are counted apart; totalTokens all of them and the output; the writes by
// TTL (cacheDetails, the hour's first) when some were made for an hour.
func converseUsage(u Usage) string {
	details := ""
	if u.CacheCreation1hInputTokens > 0 {
		details = fmt.Sprintf(`,"cacheDetails":[{"ttl":"1h","inputTokens":%d},{"ttl":"5m","inputTokens":%d}]`,
			u.CacheCreation1hInputTokens, u.CacheCreationInputTokens-u.CacheCreation1hInputTokens)
	}
	return fmt.Sprintf(`{"inputTokens":%d,"outputTokens":%d,"totalTokens":%d,"cacheReadInputTokens":%d,"cacheWriteInputTokens":%d%s}`,
		u.InputTokens, u.OutputTokens, u.InputTokens+u.OutputTokens+u.CachedInputTokens+u.CacheCreationInputTokens,
		u.CachedInputTokens, u.CacheCreationInputTokens, details)
}

// bedrockAnthropicEvents are the Anthropic stream events InvokeModelWithResponseStream
// carries, each an event's JSON (its type inside, as Anthropic's data lines have it):
// anthropicStream's, without the ping, and message_stop with Bedrock's invocation
// metrics.
func bedrockAnthropicEvents(id, model string, u Usage) []string {
	events := []string{
		fmt.Sprintf(`{"type":"message_start","message":{"id":%q,"type":"message","role":"assistant","model":%q,"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":%d,"cache_creation_input_tokens":%d,"cache_read_input_tokens":%d,%s"output_tokens":1}}}`,
			id, model, u.InputTokens, u.CacheCreationInputTokens, u.CachedInputTokens, cacheCreation(u)),
		`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
	}
	for _, w := range words() {
		events = append(events, fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":%q}}`, w))
	}
	var cache strings.Builder
	if u.CachedInputTokens != 0 {
		fmt.Fprintf(&cache, `,"cacheReadInputTokenCount":%d`, u.CachedInputTokens)
	}
	if u.CacheCreationInputTokens != 0 {
		fmt.Fprintf(&cache, `,"cacheWriteInputTokenCount":%d`, u.CacheCreationInputTokens)
	}
	return append(events,
		`{"type":"content_block_stop","index":0}`,
		fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{%s"output_tokens":%d}}`, serverToolUse(u), u.OutputTokens),
		fmt.Sprintf(`{"type":"message_stop","amazon-bedrock-invocationMetrics":{"inputTokenCount":%d,"outputTokenCount":%d,"invocationLatency":1,"firstByteLatency":1%s}}`,
			u.InputTokens, u.OutputTokens, cache.String()),
	)
}

// bedrockFrame is one event stream message: an event of the type given, its payload
// JSON.
func bedrockFrame(eventType, payload string) string {
	var headers eventstream.Headers
	headers.Set(":event-type", eventstream.StringValue(eventType))
	headers.Set(":content-type", eventstream.StringValue("application/json"))
	headers.Set(":message-type", eventstream.StringValue("event"))
	var b bytes.Buffer
	if err := eventstream.NewEncoder().Encode(&b, eventstream.Message{Headers: headers, Payload: []byte(payload)}); err != nil {
		panic(err) // only a header too long to encode fails, and these are short
	}
	return b.String()
}
