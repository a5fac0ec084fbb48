package e2e_test

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/realtimeusage"
	"github.com/tollgate-dev/tollgate/enforcer/responseusage"
)

// sdkUsageRoot is a usage type an official SDK declares: the file (under node_modules)
// and the type's name there. Its fields are decided under its reader's name: the SDK's,
// or "openai-realtime" for the Realtime API's usage, which package realtimeusage reads
// (the others, package responseusage).
type sdkUsageRoot struct{ reader, file, typ string }

// sdkUsageRoots are the usage types of the answers the enforcer charges from: chat,
// Responses, embeddings, images, transcriptions and Realtime (OpenAI), Messages
// (Anthropic, and its beta), generateContent, the Live API and the Interactions API
// (Google), Converse (Amazon Bedrock), chat, Conversations and OCR (Mistral).
var sdkUsageRoots = []sdkUsageRoot{
	{"openai", "openai/resources/completions.d.ts", "CompletionUsage"},
	{"openai", "openai/resources/responses/responses.d.ts", "ResponseUsage"},
	// The hosted tools' usage beside it (response.tool_usage, openai 7).
	{"openai-tools", "openai/resources/responses/responses.d.ts", "Response.ToolUsage"},
	{"openai", "openai/resources/embeddings.d.ts", "CreateEmbeddingResponse.Usage"},
	{"openai", "openai/resources/images.d.ts", "ImagesResponse.Usage"},
	{"openai", "openai/resources/images.d.ts", "ImageGenCompletedEvent.Usage"},
	{"openai", "openai/resources/audio/transcriptions.d.ts", "Transcription.Tokens"},
	{"openai", "openai/resources/audio/transcriptions.d.ts", "Transcription.Duration"},
	{"openai", "openai/resources/audio/transcriptions.d.ts", "TranscriptionTextDoneEvent.Usage"},
	{"openai-realtime", "openai/resources/realtime/realtime.d.ts", "RealtimeResponseUsage"},
	// A GPT-Live session's time (session.usage.updated, session.closed).
	{"openai-live", "openai/resources/live/live.d.ts", "SessionUsage"},
	// A GPT-Live session's Decision API evaluations (decision.event's Decision): handed
	// whole by realtimeusage.GPTLive to the reader of POST /v1/decisions's answer.
	{"openai-live-decision", "openai/resources/decisions.d.ts", "Decision.Usage"},
	{"anthropic", "@anthropic-ai/sdk/resources/messages/messages.d.ts", "Usage"},
	{"anthropic", "@anthropic-ai/sdk/resources/messages/messages.d.ts", "MessageDeltaUsage"},
	{"anthropic", "@anthropic-ai/sdk/resources/beta/messages/messages.d.ts", "BetaUsage"},
	{"anthropic", "@anthropic-ai/sdk/resources/beta/messages/messages.d.ts", "BetaMessageDeltaUsage"},
	{"genai", "@google/genai/dist/genai.d.ts", "GenerateContentResponseUsageMetadata"},
	// A Live API session's turns (LiveServerMessage.usageMetadata).
	{"genai-live", "@google/genai/dist/genai.d.ts", "UsageMetadata"},
	// The Interactions API's usage (an Interaction's, a stream's interaction.completed's
	// and step.stop's): the top-level `declare type Usage = {...}`, snake_case.
	{"genai-interactions", "@google/genai/dist/genai.d.ts", "Usage"},
	{"bedrock", "@aws-sdk/client-bedrock-runtime/dist-types/models/models_0.d.ts", "TokenUsage"},
	// A guardrail's trace: each assessment's invocationMetrics.usage (Converse, InvokeModel).
	{"bedrock", "@aws-sdk/client-bedrock-runtime/dist-types/models/models_0.d.ts", "GuardrailUsage"},
	// The detect-only guardrail checks (InvokeGuardrailChecks).
	{"bedrock", "@aws-sdk/client-bedrock-runtime/dist-types/models/models_0.d.ts", "GuardrailChecksUsageResults"},
	// Mistral's SDK names the fields in camelCase; its API, in snake_case (snakeCase).
	{"mistral", "@mistralai/mistralai/esm/models/components/usageinfo.d.ts", "UsageInfo"},
	{"mistral", "@mistralai/mistralai/esm/models/components/conversationusageinfo.d.ts", "ConversationUsageInfo"},
	{"mistral", "@mistralai/mistralai/esm/models/components/ocrusageinfo.d.ts", "OCRUsageInfo"},
}

// Every field of the usage the official SDKs declare is either read by the enforcer's
// usage reader (responseusage) or decided not to change what a request is charged. The
// fields are read from the SDKs' own type declarations (e2e/sdk's pinned packages), and
// each must be classified in sdkUsageFields: an SDK update whose usage gains a field
// (a new billed tool's count, a new tier) fails here until someone decides whether it
// changes a charge. A field classified as read must be a key the reader looks for.
func TestEverySDKUsageFieldIsDecided(t *testing.T) {
	dir := sdkDir(t)
	modules := filepath.Join(dir, "node_modules")
	found := map[string]bool{}
	for _, root := range sdkUsageRoots {
		src, err := os.ReadFile(filepath.Join(modules, root.file))
		if err != nil {
			t.Fatal(err)
		}
		types := tsTypes(string(src))
		if _, ok := types[root.typ]; !ok {
			t.Errorf("%s: no type %s in %s", root.reader, root.typ, root.file)
			continue
		}
		for _, leaf := range tsLeaves(types, root.typ, root.typ, 0) {
			if root.reader == "mistral" {
				leaf = snakeCase(leaf)
			}
			found[root.reader+" "+leaf] = true
		}
	}
	for _, f := range checkDecided(t, found, sdkUsageFields, 60, "sdkUsageFields", "does it change what a request costs?") {
		if sdkUsageFields[f] == read && !reads(f) {
			t.Errorf("%s: decided as read, but its reader does not read it", f)
		}
	}
}

// checkDecided holds what a contract test read from the SDKs (found: at least `least` of
// them, else their code's shape changed) to its table of decisions (named table): each
// found must be decided (else question is asked), and each decision found. It returns the
// found that are decided, sorted.
func checkDecided(t *testing.T, found map[string]bool, decisions map[string]string, least int, table, question string) []string {
	t.Helper()
	if len(found) < least {
		t.Fatalf("read only %d from the SDKs, want %d or more: has their code's shape changed?", len(found), least)
	}
	var decided []string
	for f := range found {
		if _, ok := decisions[f]; ok {
			decided = append(decided, f)
		} else {
			t.Errorf("%s: not decided in %s: %s", f, table, question)
		}
	}
	for f := range decisions {
		if !found[f] {
			t.Errorf("%s: decided, but no SDK declares it any more", f)
		}
	}
	sort.Strings(decided)
	return decided
}

// read is sdkUsageFields' decision for a field the usage reader reads.
const read = "read"

// reads tells whether the reader of field ("openai prompt_tokens_details.cached_tokens")
// reads it: package realtimeusage the Realtime API's and the Live API's by their path,
// package responseusage the others (the Interactions API's, "genai-interactions", too) by
// every key on the path (it reads an answer as a stream of keys).
func reads(field string) bool {
	reader, path, _ := strings.Cut(field, " ")
	path = strings.ReplaceAll(path, "[]", "")
	switch reader {
	case "openai-realtime":
		return realtimeusage.ReadsField(path)
	case "genai-live":
		return realtimeusage.ReadsGeminiLiveField(path)
	case "openai-live":
		return realtimeusage.ReadsGPTLiveField(path)
	case "openai-live-decision":
		// The Decision a decision.event carries goes whole to responseusage (the
		// gateway's liveSession), which reads it by its keys as below.
		if !realtimeusage.HandsOverGPTLiveDecisions() {
			return false
		}
	}
	for _, key := range strings.Split(path, ".") {
		if !responseusage.ReadsKey(key) {
			return false
		}
	}
	return true
}

// sdkUsageFields decides each usage field of the SDKs ("reader path"): read, or why it
// does not change a charge.
var sdkUsageFields = map[string]string{
	// OpenAI: chat completions, Responses, embeddings, images, transcriptions.
	"openai prompt_tokens":                                                  read,
	"openai completion_tokens":                                              read,
	"openai total_tokens":                                                   read, // xAI's thinking: total_tokens beyond prompt and completion
	"openai prompt_tokens_details.cached_tokens":                            read,
	"openai prompt_tokens_details.cache_write_tokens":                       read,
	"openai prompt_tokens_details.audio_tokens":                             read,
	"openai completion_tokens_details.audio_tokens":                         read,
	"openai completion_tokens_details.reasoning_tokens":                     "a part of completion_tokens, which is charged",
	"openai completion_tokens_details.text_tokens":                          "a part of completion_tokens, which is charged",
	"openai prompt_tokens_details.text_tokens":                              "a part of prompt_tokens, which is charged",
	"openai prompt_tokens_details.image_tokens":                             "a part of prompt_tokens: a chat model's image input is charged at its input price",
	"openai completion_tokens_details.accepted_prediction_tokens":           "a part of completion_tokens, which is charged",
	"openai completion_tokens_details.rejected_prediction_tokens":           "counted in completion_tokens, and billed with them",
	"openai input_tokens":                                                   read,
	"openai output_tokens":                                                  read,
	"openai input_tokens_details.cached_tokens":                             read,
	"openai input_tokens_details.cache_write_tokens":                        read,
	"openai input_tokens_details.cache_write_tokens_details.ttl_30m_tokens": "a part of cache_write_tokens, charged at the cache-write price",
	"openai input_tokens_details.cache_write_tokens_details.ttl_12h_tokens": "a part of cache_write_tokens, charged at the (30-minute) cache-write price: " +
		"OpenAI bills a 12-hour write twice that, which no catalog entry prices yet (docs/prices.md, \"Left out\")",
	"openai input_tokens_details.image_tokens":      "an image model's input split: the catalog prices all its input at the image input price, the dearer",
	"openai input_tokens_details.text_tokens":       "an image model's input split: the catalog prices all its input at the image input price, the dearer",
	"openai output_tokens_details.reasoning_tokens": "a part of output_tokens, which is charged",
	"openai output_tokens_details.image_tokens":     "an image model's output split: the catalog prices all its output at the image output price, the dearer",
	"openai output_tokens_details.text_tokens":      "an image model's output split: the catalog prices all its output at the image output price, the dearer",
	"openai input_token_details.audio_tokens":       read, // a transcription's audio input
	"openai input_token_details.text_tokens":        "a transcription's text input: the rest of input_tokens, charged at the text price",
	"openai type":                                   read, // a transcription's usage by "tokens" or "duration"
	"openai seconds":                                read, // whisper-1's billed duration
	// OpenAI's hosted tools' usage (response.tool_usage, openai 7), beside the model's.
	"openai-tools image_gen.output_tokens": "not read: each image generation call is charged its size and quality's tokens " +
		"(docs/prices.md, \"OpenAI's image generation tool\"); OpenAI's sum may skip calls whose usage it has not recorded",
	"openai-tools image_gen.output_tokens_details.image_tokens": "a part of image_gen.output_tokens",
	"openai-tools image_gen.output_tokens_details.text_tokens":  "a part of image_gen.output_tokens",
	"openai-tools image_gen.total_tokens":                       "image_gen.input_tokens plus image_gen.output_tokens",
	// The image model's input, charged at its input prices (its catalog entry's are its
	// image input's, the dearer: docs/prices.md, "OpenAI's image generation tool").
	"openai-tools image_gen.input_tokens":                              read,
	"openai-tools image_gen.input_tokens_details.image_tokens":         "a part of image_gen.input_tokens, charged at the image input price",
	"openai-tools image_gen.input_tokens_details.text_tokens":          "a part of image_gen.input_tokens, charged at the image input price",
	"openai-tools image_gen.cached_tokens":                             read, // the cache reads among image_gen.input_tokens
	"openai-tools image_gen.cached_tokens_details.cached_image_tokens": "a part of image_gen.cached_tokens",
	"openai-tools image_gen.cached_tokens_details.cached_text_tokens":  "a part of image_gen.cached_tokens",
	"openai-tools web_search.num_requests": "not read: the answer's web_search_call items of a search action are counted, each a search charged " +
		"(docs/prices.md, \"Web searches\"); OpenAI's count leaves out discounted searches and page opens, so it is never above them",
	// OpenAI's GPT-Live (package realtimeusage): the session's cumulative seconds.
	"openai-live seconds":                                          read,
	"openai-live-decision input_tokens":                            read,
	"openai-live-decision output_tokens":                           read,
	"openai-live-decision total_tokens":                            read,
	"openai-live-decision input_tokens_details.cached_tokens":      read,
	"openai-live-decision input_tokens_details.cache_write_tokens": read,
	"openai-live-decision output_tokens_details.reasoning_tokens":  "a part of output_tokens, which is charged",
	// OpenAI's Realtime API (package realtimeusage).
	"openai-realtime input_tokens":                                           read,
	"openai-realtime output_tokens":                                          read,
	"openai-realtime total_tokens":                                           "input_tokens plus output_tokens, each read",
	"openai-realtime input_token_details.cached_tokens":                      read,
	"openai-realtime input_token_details.audio_tokens":                       read,
	"openai-realtime input_token_details.image_tokens":                       read,
	"openai-realtime input_token_details.text_tokens":                        "the rest of input_tokens, charged at the text price",
	"openai-realtime input_token_details.cached_tokens_details.audio_tokens": read,
	"openai-realtime input_token_details.cached_tokens_details.image_tokens": read,
	"openai-realtime input_token_details.cached_tokens_details.text_tokens":  "the rest of cached_tokens, charged at the cached text price",
	"openai-realtime output_token_details.audio_tokens":                      read,
	"openai-realtime output_token_details.text_tokens":                       "the rest of output_tokens, charged at the text price",
	// Anthropic's Messages (and its beta's).
	"anthropic input_tokens":                             read,
	"anthropic output_tokens":                            read,
	"anthropic cache_read_input_tokens":                  read,
	"anthropic cache_creation_input_tokens":              read,
	"anthropic cache_creation.ephemeral_1h_input_tokens": read,
	"anthropic cache_creation.ephemeral_5m_input_tokens": "the rest of cache_creation_input_tokens, charged at the five-minute write price",
	"anthropic output_tokens_details.thinking_tokens":    "a part of output_tokens, which is charged",
	"anthropic server_tool_use.web_search_requests":      read,
	"anthropic server_tool_use.web_fetch_requests":       "web fetch has no fee: the pages it fetches are billed as the input tokens they add, which input_tokens counts",
	"anthropic service_tier":                             read,
	"anthropic speed":                                    read,
	"anthropic inference_geo":                            read,
	"anthropic iterations":                               read, // the advisor's sub-inferences, billed at its model's prices
	"anthropic fallback_credit.status.type":              "a fallback credit lowers what Anthropic bills for an earlier refused call; a charge here is never lowered after the fact (the retry is charged its own usage)",
	"anthropic fallback_credit.status.reason":            "why a fallback credit was not applied: nothing billed",
	"anthropic fallback_credit.status.remove_to_redeem":  "what a request must drop to redeem a fallback credit: nothing billed",
	// Google's generateContent (the Gemini API and Vertex AI).
	"genai promptTokenCount":                        read,
	"genai candidatesTokenCount":                    read,
	"genai thoughtsTokenCount":                      read,
	"genai cachedContentTokenCount":                 read,
	"genai toolUsePromptTokenCount":                 read,
	"genai totalTokenCount":                         "the sum of the prompt's, the candidates', the thoughts' and the tool results' counts, each read",
	"genai initialPromptTokenCount":                 "the first continuation hop's part of promptTokenCount, which sums every hop's",
	"genai trafficType":                             read, // Vertex AI's priority tier
	"genai promptTokensDetails[].modality":          read,
	"genai promptTokensDetails[].tokenCount":        read,
	"genai candidatesTokensDetails[].modality":      read,
	"genai candidatesTokensDetails[].tokenCount":    read,
	"genai cacheTokensDetails[].modality":           read,
	"genai cacheTokensDetails[].tokenCount":         read,
	"genai toolUsePromptTokensDetails[].modality":   "the modalities of toolUsePromptTokenCount, whose tokens are charged at the text input price (audio among a tool's results, rare, below its own)",
	"genai toolUsePromptTokensDetails[].tokenCount": "the modalities of toolUsePromptTokenCount, whose tokens are charged at the text input price (audio among a tool's results, rare, below its own)",
	// Gemini's Live API: each turn's usage (realtimeusage.GeminiLive).
	"genai-live promptTokenCount":                        read,
	"genai-live responseTokenCount":                      read,
	"genai-live thoughtsTokenCount":                      read,
	"genai-live cachedContentTokenCount":                 read,
	"genai-live toolUsePromptTokenCount":                 read,
	"genai-live totalTokenCount":                         read, // the output is at least what it leaves beyond the input
	"genai-live promptTokensDetails[].modality":          read,
	"genai-live promptTokensDetails[].tokenCount":        read,
	"genai-live responseTokensDetails[].modality":        read,
	"genai-live responseTokensDetails[].tokenCount":      read,
	"genai-live cacheTokensDetails[].modality":           read,
	"genai-live cacheTokensDetails[].tokenCount":         read,
	"genai-live toolUsePromptTokensDetails[].modality":   "the modalities of toolUsePromptTokenCount, whose tokens are charged at the text input price, as generateContent's",
	"genai-live toolUsePromptTokensDetails[].tokenCount": "the modalities of toolUsePromptTokenCount, whose tokens are charged at the text input price, as generateContent's",
	"genai-live trafficType":                             "Vertex AI's traffic type: no Live model is priced apart by it (docs/prices.md, \"Gemini's Live API\")",
	"genai-live serviceTier":                             "the Gemini API's service tier: no Live model is priced apart by it (docs/prices.md, \"Gemini's Live API\")",
	// Gemini's Interactions API (POST /v1beta/interactions): an Interaction's usage, read as
	// generateContent's counts (docs/enforcer.md, "The Interactions API").
	"genai-interactions total_input_tokens":                     read,
	"genai-interactions total_cached_tokens":                    read,
	"genai-interactions total_output_tokens":                    read,
	"genai-interactions total_thought_tokens":                   read,
	"genai-interactions total_tool_use_tokens":                  read,
	"genai-interactions total_tokens":                           "the sum of the counts, each read",
	"genai-interactions initial_input_tokens":                   "the first hop's part, a multi-hop call's SDK sums hops client-side: each POST's usage is its own",
	"genai-interactions input_tokens_by_modality[].modality":    read,
	"genai-interactions input_tokens_by_modality[].tokens":      read,
	"genai-interactions cached_tokens_by_modality[].modality":   read,
	"genai-interactions cached_tokens_by_modality[].tokens":     read,
	"genai-interactions output_tokens_by_modality[].modality":   read,
	"genai-interactions output_tokens_by_modality[].tokens":     read,
	"genai-interactions tool_use_tokens_by_modality[].modality": "the modalities of total_tool_use_tokens, whose tokens are charged at the text input price, as generateContent's toolUsePromptTokensDetails",
	"genai-interactions tool_use_tokens_by_modality[].tokens":   "the modalities of total_tool_use_tokens, whose tokens are charged at the text input price, as generateContent's toolUsePromptTokensDetails",
	"genai-interactions grounding_tool_count[].type":            read,
	"genai-interactions grounding_tool_count[].count":           read,
	// Amazon Bedrock's Converse and ConverseStream.
	"bedrock inputTokens":                read,
	"bedrock outputTokens":               read,
	"bedrock totalTokens":                "inputTokens plus outputTokens (and the cache's), each read",
	"bedrock cacheReadInputTokens":       read,
	"bedrock cacheWriteInputTokens":      read,
	"bedrock cacheDetails[].ttl":         read,
	"bedrock cacheDetails[].inputTokens": read,
	// Amazon Bedrock's guardrails, billed by the text units each policy assessed.
	"bedrock contentPolicyUnits":                  read,
	"bedrock topicPolicyUnits":                    read,
	"bedrock sensitiveInformationPolicyUnits":     read,
	"bedrock contextualGroundingPolicyUnits":      read,
	"bedrock automatedReasoningPolicyUnits":       read,
	"bedrock automatedReasoningPolicies":          read,
	"bedrock contentPolicyImageUnits":             read,
	"bedrock wordPolicyUnits":                     "word filters, free",
	"bedrock sensitiveInformationPolicyFreeUnits": "the sensitive-information filters' regular expressions, free",
	"bedrock contentFilter.textUnits":             read,
	"bedrock promptAttack.textUnits":              read,
	"bedrock sensitiveInformation.textUnits":      read,
	// Mistral's chat, Conversations and OCR (camelCase in its SDK, snake_case on the wire).
	"mistral prompt_tokens":        read,
	"mistral completion_tokens":    read,
	"mistral total_tokens":         read,
	"mistral connector_tokens":     "counted in total_tokens beyond prompt and completion, which the reader charges as output (the dearer class)",
	"mistral connectors":           "the connectors' calls, billed apiece by Mistral: one secondary source prices them, not charged (docs/prices.md, \"Billed items not charged yet\")",
	"mistral pages_processed":      read,
	"mistral doc_size_bytes":       "the document's size: OCR is billed by the page",
	"mistral prompt_audio_seconds": "a Voxtral transcription's audio, billed by the minute (one source prices it): its tokens are charged the fallback price instead, above the bill",
	"mistral service_tier":         "Mistral's priority tier: no source prices it apart, charged the standard price (docs/prices.md)",
}

// tsType is one interface, class or object type of a TypeScript declaration file: its
// fields' types by name.
type tsType map[string]string

var (
	tsComment   = regexp.MustCompile(`(?s)/\*.*?\*/|//[^\n]*`)
	tsNamespace = regexp.MustCompile(`^(?:export\s+)?(?:declare\s+)?namespace\s+([\w$]+)\s*\{$`)
	tsInterface = regexp.MustCompile(`^(?:export\s+)?(?:declare\s+)?(?:interface|class|type)\s+([\w$]+)(?:<[^>]*>)?(?:\s+(?:extends|implements)\s+[^{=]+)?\s*=?\s*\{$`)
	tsField     = regexp.MustCompile(`^(?:readonly\s+)?([\w$]+)\??:\s*(.+?);?$`)
)

// tsTypes reads the interfaces, classes and object types of a declaration file, each by
// its name within its namespaces ("CompletionUsage.CompletionTokensDetails"). It is a
// line reader for the SDKs' generated declarations (one member a line, braces at line
// ends), not a TypeScript parser: a member whose type is an object literal is a leaf.
func tsTypes(src string) map[string]tsType {
	src = tsComment.ReplaceAllString(src, "")
	types := map[string]tsType{}
	type scope struct {
		name string // a namespace's or type's name; "" for any other brace
		typ  tsType // the type's fields, nil for a namespace or another brace
	}
	var stack []scope
	path := func(name string) string {
		var parts []string
		for _, s := range stack {
			if s.name != "" {
				parts = append(parts, s.name)
			}
		}
		return strings.Join(append(parts, name), ".")
	}
	for _, line := range strings.Split(src, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "":
		case tsNamespace.MatchString(line):
			stack = append(stack, scope{name: tsNamespace.FindStringSubmatch(line)[1]})
		case tsInterface.MatchString(line):
			t := tsType{}
			name := tsInterface.FindStringSubmatch(line)[1]
			types[path(name)] = t
			stack = append(stack, scope{name: name, typ: t})
		default:
			if len(stack) > 0 && stack[len(stack)-1].typ != nil {
				if m := tsField.FindStringSubmatch(line); m != nil {
					// A member whose type is an object literal (Mistral's connectors,
					// a map of counts) is a leaf: its members are not read.
					stack[len(stack)-1].typ[m[1]] = m[2]
				}
			}
			for _, c := range line {
				switch c {
				case '{':
					stack = append(stack, scope{})
				case '}':
					if len(stack) > 0 {
						stack = stack[:len(stack)-1]
					}
				}
			}
		}
	}
	return types
}

// snakeCase is a camelCase path ("usageInfo.pagesProcessed") in snake_case
// ("usage_info.pages_processed"), the names Mistral's API sends.
func snakeCase(path string) string {
	var b strings.Builder
	for i, r := range path {
		if 'A' <= r && r <= 'Z' {
			if i > 0 && path[i-1] != '.' {
				b.WriteByte('_')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// tsTypeName matches the names a field's type is made of.
var tsTypeName = regexp.MustCompile(`[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)*`)

// tsLeaves lists the paths of typ's fields that are not themselves object types
// ("prompt_tokens_details.cached_tokens"; an array's elements add "[]"), as seen from
// the type named scope (whose namespaces resolve a relative name).
func tsLeaves(types map[string]tsType, scope, typ string, depth int) []string {
	var out []string
	for field, ftype := range types[typ] {
		elem := ""
		if strings.Contains(ftype, "[]") || strings.Contains(ftype, "Array<") {
			elem = "[]"
		}
		var nested []string
		for _, name := range tsTypeName.FindAllString(ftype, -1) {
			if full := tsResolve(types, typ, name); full != "" && depth < 6 {
				for _, l := range tsLeaves(types, full, full, depth+1) {
					nested = append(nested, field+elem+"."+l)
				}
			}
		}
		if len(nested) == 0 {
			out = append(out, field)
		}
		out = append(out, nested...)
	}
	return out
}

// tsResolve finds the type a name used inside type from names: from the innermost
// namespace around it outwards, as TypeScript does.
func tsResolve(types map[string]tsType, from, name string) string {
	for scope := from; ; {
		full := name
		if scope != "" {
			full = scope + "." + name
		}
		if _, ok := types[full]; ok {
			return full
		}
		if scope == "" {
			return ""
		}
		if i := strings.LastIndexByte(scope, '.'); i >= 0 {
			scope = scope[:i]
		} else {
			scope = ""
		}
	}
}
