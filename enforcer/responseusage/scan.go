package responseusage

import (
	"math"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
	"github.com/tollgate-dev/tollgate/pkg/saturate"
)

// The scanner is an incremental, push-driven JSON reader. It checks the
// syntax exactly as encoding/json does (RFC 8259, nesting up to MaxDepth)
// and, instead of building values, records the few fields usage lives in
// (see classify) into a docFields. It keeps the path of the current value
// only down to maxPath levels; deeper values are checked and skipped.
//
// Within one document, a "type", "object" or "model" that occurs twice
// takes its last value; a count takes the largest valid value reported for
// it, by every usage object at a usage position and every repetition of its
// key. A value of the wrong type (a string where a count is expected, a
// non-integer count, a model that is not a string) reports nothing. The one
// count that may have a fraction is a duration's usage.seconds, read as
// milliseconds (msByte).
//
// It also counts the output text the document carries (textTarget): the
// bytes of the strings at the text paths as encoding/json would decode them
// (escapes resolved, each byte that is not part of valid UTF-8 read as
// U+FFFD), and the raw JSON bytes of the container at a raw path.

const (
	maxPath        = 8  // deepest path that holds a field we read: choices[].delta.tool_calls[].function.arguments
	maxKeyBytes    = 32 // longer keys are none of ours
	maxSmallBytes  = 64 // longest "type" value kept (response.code_interpreter_call_code.delta)
	maxObjectBytes = 32 // longest "object" value kept (chat.completion.chunk is the longest compared)
	maxTierBytes   = 9  // longest service_tier or speed value kept (priority, ultrafast, default, flex, fast)
)

// Key ids of the object keys we look for.
const (
	kOther uint8 = iota
	kArr         // the "key" of an array element
	kModel
	kType
	kObject
	kUsage
	kMessage
	kResponse
	kPromptDetails
	kInputDetails
	kCachedTokens
	kCacheWriteTokens // OpenAI: usage.{prompt,input}_tokens_details.cache_write_tokens (GPT-5.6 on)
	kCacheCreation    // Anthropic: usage.cache_creation (the cache writes by lifetime)
	kEphemeral1h      // Anthropic: usage.cache_creation.ephemeral_1h_input_tokens
	kServerToolUse    // Anthropic: usage.server_tool_use (the server tools' uses)
	kWebSearches      // Anthropic: usage.server_tool_use.web_search_requests
	kAudioTokens      // OpenAI: usage.*_details.audio_tokens (the audio part of a count)
	kCompletionDetails
	kInputTokenDetails // OpenAI transcriptions: usage.input_token_details (singular "token")
	kPromptModalities  // Gemini: usageMetadata.promptTokensDetails[] ({modality, tokenCount})
	kOutputModalities  // Gemini: usageMetadata.candidatesTokensDetails[]
	kCacheModalities   // Gemini: usageMetadata.cacheTokensDetails[] (the cached content's)
	kModality          // Gemini: a *TokensDetails[] entry's modality
	kIterations        // Anthropic: usage.iterations[] (its sampling iterations, some billed apart)
	kCacheDetails      // Bedrock Converse: usage.cacheDetails[] (the cache writes by TTL)
	kTTL               // Bedrock Converse: a cacheDetails[] entry's ttl ("5m", "1h")
	kTrafficType       // Vertex AI: usageMetadata.trafficType (ON_DEMAND_PRIORITY: its priority tier)
	kInferenceGeo      // Anthropic: usage.inference_geo (where inference ran: "global", "us")
	kToolUsePrompt     // Gemini: usageMetadata.toolUsePromptTokenCount (tokGeminiToolUse)
	kServiceTierCamel  // the Gemini API's usageMetadata.serviceTier ("priority"), Bedrock Converse's serviceTier ({"type": "priority"})
	kPerformance       // Bedrock Converse: performanceConfig ({"latency": "optimized"}: its latency-optimized inference)
	kLatency           // its latency
	kTokenCount        // Gemini: a *TokensDetails[] entry's tokenCount
	// Amazon Bedrock's Converse usage (camelCase), read into Anthropic's counts:
	// inputTokens (without the cache), outputTokens, cacheReadInputTokens,
	// cacheWriteInputTokens (Amazon Nova's InvokeModel answer: cacheReadInputTokenCount,
	// cacheWriteInputTokenCount).
	kConverseInput
	kConverseOutput
	kConverseCacheRead
	kConverseCacheWrite
	kCost // OpenRouter: usage.cost, what the request cost in USD
	kChoices
	kDelta
	kContent
	kText
	kRefusal
	kReasoning
	kReasoningContent
	kToolCalls
	kFunction
	kFunctionCall
	kArguments
	kOutput
	kSummary
	kPartialJSON
	kThinking
	kInput
	kCandidates   // Gemini: candidates[]
	kParts        // Gemini: candidates[].content.parts[]
	kFinishReason // Gemini: candidates[].finishReason
	kServiceTier  // OpenAI: service_tier (the processing tier the request ran at)
	kSpeed        // Anthropic: usage.speed (its fast mode)
	kGrounding    // Gemini: candidates[].groundingMetadata
	kSearchQuery  // Gemini: candidates[].groundingMetadata.webSearchQueries and imageSearchQueries
	kChunks       // Gemini: candidates[].groundingMetadata.groundingChunks
	kMaps         // Gemini: a grounding chunk's maps source (groundingChunks[].maps)
	kBlock        // Anthropic: a content_block_start event's content_block
	kTotalCost    // Perplexity: usage.cost.total_cost (its cost as an object of parts)
	kCostTicks    // xAI: usage.cost_in_usd_ticks (its cost in ticks of 1e-10 USD)
	kPages        // Mistral's OCR: usage_info.pages_processed (tokPages)
	kCacheHit     // DeepSeek: usage.prompt_cache_hit_tokens (tokCacheHit)
	kContainerID  // OpenAI: a code interpreter call's (a shell call's environment's) container_id
	kEnvironment  // OpenAI: a shell call's environment
	kItem         // OpenAI: an output item event's item
	kAction       // OpenAI: a web_search_call item's action (its type: "search", "open_page", "find_in_page")
	kContainer    // Anthropic: a message's (a message_delta's delta's) container
	kID           // its id
	// Gemini's promptFeedback.blockReason: a prompt it refused, answered with no
	// candidate (the whole answer).
	kPromptFeedback
	kBlockReason
	// OpenRouter's "bring your own key": usage.is_byok says the provider billed the
	// operator's own key, usage.cost_details.upstream_inference_cost what it billed (USD).
	kIsByok
	kCostDetails
	kUpstreamCost
	// Groq's x_groq: a chat completions stream's last chunk carries its usage in
	// x_groq.usage, whether or not the request asked for stream_options.include_usage
	// (asked, a top-level usage too, the same counts): read as a top-level usage's
	// counts (groqTarget).
	kXGroq
	// The text of the models' own events in Amazon Bedrock's InvokeModelWithResponseStream
	// (textTarget): Meta Llama's generation, Amazon Titan's outputText, Amazon Nova's
	// contentBlockDelta.delta.text, .reasoningContent.text and .toolUse.input (Mistral's
	// outputs[].text: kOutputs).
	kGeneration
	kOutputText
	kContentBlockDelta
	// Amazon Bedrock Converse's reasoning and tool calls (textTarget): ConverseStream's
	// delta.reasoningContent.text and delta.toolUse.input, Converse's
	// output.message.content[].reasoningContent.reasoningText.text and
	// output.message.content[].toolUse.input.
	kReasoningContentCamel
	kReasoningText
	kToolUse
	// Gemini's function calls and code (textTarget): a part's functionCall.args (its
	// functionCall shares kFunctionCall, OpenAI's function_call) and executableCode.code.
	kArgs
	kExecutableCode
	kCode
	// OpenAI chat's answer in audio: choices[].delta.audio.transcript (streamed) and
	// choices[].message.audio.transcript, the text of what it says.
	kAudio
	kTranscript
	kData // its audio's data (base64 PCM16, streamed: txAudio)
	// OpenAI Responses: a Response's tool_usage.image_gen, its image generation tool's
	// usage (imageToolTarget).
	kToolUsage
	kImageGen
	// The Gemini API's Interactions API: usage.grounding_tool_count[] ({type, count}), the
	// grounding tools' uses, of which Google Search's are billed per query.
	kGroundingTools
	kGroundingCount
	// Amazon Bedrock's guardrail traces (guardrailTarget): Converse's
	// trace.guardrail.{inputAssessment,outputAssessments}, InvokeModel's
	// amazon-bedrock-trace.guardrail.{input,outputs}; an assessment's
	// invocationMetrics.usage; and the billed counts of that usage (kGuard0+guard*).
	kTrace
	kBedrockTrace
	kGuardrail
	kInputAssessment
	kOutputAssessments
	kOutputs
	kInvocationMetrics
	// The detect-only guardrail checks (InvokeGuardrailChecks): their usage's
	// {contentFilter,promptAttack,sensitiveInformation}.textUnits.
	kContentFilter
	kPromptAttack
	kSensitiveInformation
	kTextUnits
	kGuard0
	kTok0 = kGuard0 + nGuard // kTok0+tok for the counts tokPrompt..tokAudioSeconds
)

// Token counts read from a usage object.
const (
	tokPrompt           = iota // prompt_tokens (OpenAI chat)
	tokCompletion              // completion_tokens (OpenAI chat)
	tokInput                   // input_tokens (OpenAI Responses, Anthropic)
	tokOutput                  // output_tokens (OpenAI Responses, Anthropic)
	tokCacheRead               // cache_read_input_tokens (Anthropic)
	tokCacheCreation           // cache_creation_input_tokens (Anthropic)
	tokGeminiPrompt            // promptTokenCount (Gemini usageMetadata; cached ones included)
	tokGeminiCandidates        // candidatesTokenCount (Gemini)
	tokGeminiThoughts          // thoughtsTokenCount (Gemini: thinking, billed as output)
	tokGeminiCached            // cachedContentTokenCount (Gemini)
	tokAudioSeconds            // seconds (OpenAI whisper-1's duration usage), read as milliseconds (see msByte)
	tokTotal                   // total_tokens (OpenAI chat; xAI's counts the thinking its completion_tokens leaves out)
	tokCachedPrompt            // prompt_tokens_details.cached_tokens (OpenAI chat)
	tokCachedInput             // input_tokens_details.cached_tokens (OpenAI Responses)
	// tokCacheWritePart is a part of the cache writes, by family: Anthropic's
	// cache_creation.ephemeral_1h_input_tokens (the writes made for an hour, a part of
	// cache_creation_input_tokens), OpenAI's prompt_tokens_details.cache_write_tokens
	// (chat) and input_tokens_details.cache_write_tokens (Responses): its cache writes,
	// billed from GPT-5.6 on, a part of the input. One slot for both: a usage reports
	// one or the other, and a slot costs a word in each of the Extractor's four copies
	// of the counts (it must stay in its heap size class: TestExtractorSize).
	tokCacheWritePart
	tokWebSearches // server_tool_use.web_search_requests (Anthropic: billed per search)
	// tokAudioIn and tokAudioOut are the audio parts of the input and output counts,
	// which some models price above text: OpenAI's prompt_tokens_details.audio_tokens
	// and completion_tokens_details.audio_tokens (chat), input_token_details.audio_tokens
	// (transcriptions), Gemini's AUDIO entries of promptTokensDetails and
	// candidatesTokensDetails. Reported (its bit in has) when the details were there:
	// Gemini lists only the modalities it counted, so its list reports 0 audio when it
	// has no AUDIO entry. The audio part of Gemini's cached count (cacheTokensDetails)
	// is no count slot here but docFields.cachedAudio (see there why).
	tokAudioIn
	tokAudioOut
	nTok
	// tokGeminiToolUse is Gemini's usageMetadata.toolUsePromptTokenCount: the results of
	// its tools (URL context, code execution, Search) given back to the model, input it
	// bills that promptTokenCount leaves out. It shares the slot of Anthropic's
	// cache_creation_input_tokens, which no Gemini usage has and which only the
	// Anthropic and Converse families read (a slot's cost: tokCacheWritePart).
	tokGeminiToolUse = tokCacheCreation
	// tokPages is Mistral's OCR usage_info.pages_processed: the pages its model read,
	// billed apiece. It shares the slot of the web searches (Anthropic's count, OpenAI's
	// and Gemini's calls), which no OCR answer has (a slot's cost: tokCacheWritePart): an
	// answer that reported both would be read as the larger, charged as whichever its
	// family bills, never below either.
	tokPages = tokWebSearches
	// tokCacheHit is DeepSeek's usage.prompt_cache_hit_tokens: the part of prompt_tokens
	// read from its cache, which a chat usage without prompt_tokens_details.cached_tokens
	// bills as cached input (accumulator.fill). It shares the slot of OpenAI Responses'
	// input_tokens_details.cached_tokens, which no chat usage reads (a slot's cost:
	// tokCacheWritePart).
	tokCacheHit = tokCachedInput
)

// usageFields.has holds a bit per count.
var _ [32 - nTok]struct{} // nTok <= 32

func keyID(b []byte) uint8 {
	switch string(b) {
	case "model", "modelVersion": // modelVersion: Gemini's
		return kModel
	case "type":
		return kType
	case "object":
		return kObject
	case "usage", "usageMetadata", "usage_info": // usageMetadata: Gemini's; usage_info: Mistral's OCR
		return kUsage
	case "message":
		return kMessage
	case "response", "interaction": // interaction: the Interactions API's lifecycle events'
		return kResponse
	case "event_type": // the Interactions API's events' type
		return kType
	case "prompt_tokens_details":
		return kPromptDetails
	case "input_tokens_details":
		return kInputDetails
	case "cached_tokens":
		return kCachedTokens
	case "cache_write_tokens":
		return kCacheWriteTokens
	case "cache_creation":
		return kCacheCreation
	case "ephemeral_1h_input_tokens":
		return kEphemeral1h
	case "server_tool_use":
		return kServerToolUse
	case "web_search_requests":
		return kWebSearches
	case "choices":
		return kChoices
	case "delta":
		return kDelta
	case "content":
		return kContent
	case "text":
		return kText
	case "refusal":
		return kRefusal
	case "reasoning":
		return kReasoning
	case "reasoning_content":
		return kReasoningContent
	case "tool_calls":
		return kToolCalls
	case "function":
		return kFunction
	case "function_call", "functionCall": // functionCall: a Gemini part's
		return kFunctionCall
	case "args":
		return kArgs
	case "executableCode":
		return kExecutableCode
	case "code":
		return kCode
	case "arguments":
		return kArguments
	case "output":
		return kOutput
	case "summary":
		return kSummary
	case "partial_json":
		return kPartialJSON
	case "thinking":
		return kThinking
	case "input":
		return kInput
	case "candidates":
		return kCandidates
	case "parts":
		return kParts
	case "finishReason":
		return kFinishReason
	case "promptFeedback":
		return kPromptFeedback
	case "blockReason":
		return kBlockReason
	case "service_tier":
		return kServiceTier
	case "speed":
		return kSpeed
	case "groundingMetadata":
		return kGrounding
	case "webSearchQueries", "imageSearchQueries": // Google bills an image search query as a web search query
		return kSearchQuery
	case "groundingChunks":
		return kChunks
	case "maps":
		return kMaps
	case "content_block":
		return kBlock
	case "prompt_tokens":
		return kTok0 + tokPrompt
	case "completion_tokens":
		return kTok0 + tokCompletion
	case "total_tokens":
		return kTok0 + tokTotal
	case "input_tokens":
		return kTok0 + tokInput
	case "output_tokens":
		return kTok0 + tokOutput
	case "cache_read_input_tokens":
		return kTok0 + tokCacheRead
	case "cache_creation_input_tokens":
		return kTok0 + tokCacheCreation
	case "prompt_cache_hit_tokens":
		return kCacheHit
	// Gemini's counts, by generateContent's names and by the Interactions API's
	// (usage.total_*_tokens: the same counts, each apart from the others).
	case "promptTokenCount", "total_input_tokens":
		return kTok0 + tokGeminiPrompt
	case "candidatesTokenCount", "total_output_tokens":
		return kTok0 + tokGeminiCandidates
	case "thoughtsTokenCount", "total_thought_tokens":
		return kTok0 + tokGeminiThoughts
	case "cachedContentTokenCount", "total_cached_tokens":
		return kTok0 + tokGeminiCached
	case "toolUsePromptTokenCount", "total_tool_use_tokens":
		return kToolUsePrompt
	case "inference_geo":
		return kInferenceGeo
	case "seconds":
		return kTok0 + tokAudioSeconds
	case "audio_tokens":
		return kAudioTokens
	case "completion_tokens_details":
		return kCompletionDetails
	case "input_token_details":
		return kInputTokenDetails
	case "promptTokensDetails", "input_tokens_by_modality": // the Interactions API's names
		return kPromptModalities
	case "candidatesTokensDetails", "output_tokens_by_modality":
		return kOutputModalities
	case "cacheTokensDetails", "cached_tokens_by_modality":
		return kCacheModalities
	case "modality":
		return kModality
	case "trafficType":
		return kTrafficType
	case "cacheDetails":
		return kCacheDetails
	case "iterations":
		return kIterations
	case "ttl":
		return kTTL
	case "serviceTier":
		return kServiceTierCamel
	case "performanceConfig":
		return kPerformance
	case "latency":
		return kLatency
	case "tokenCount", "tokens": // tokens: an Interactions API modality entry's
		return kTokenCount
	case "grounding_tool_count":
		return kGroundingTools
	case "count":
		return kGroundingCount
	case "inputTokens":
		return kConverseInput
	case "outputTokens":
		return kConverseOutput
	case "cacheReadInputTokens", "cacheReadInputTokenCount": // Converse's; Amazon Nova's InvokeModel
		return kConverseCacheRead
	case "cacheWriteInputTokens", "cacheWriteInputTokenCount":
		return kConverseCacheWrite
	case "cost":
		return kCost
	case "total_cost":
		return kTotalCost
	case "cost_in_usd_ticks":
		return kCostTicks
	case "is_byok":
		return kIsByok
	case "cost_details":
		return kCostDetails
	case "upstream_inference_cost":
		return kUpstreamCost
	case "x_groq":
		return kXGroq
	case "generation":
		return kGeneration
	case "outputText":
		return kOutputText
	case "contentBlockDelta":
		return kContentBlockDelta
	case "reasoningContent":
		return kReasoningContentCamel
	case "reasoningText":
		return kReasoningText
	case "toolUse":
		return kToolUse
	case "audio":
		return kAudio
	case "transcript":
		return kTranscript
	case "data":
		return kData
	case "pages_processed":
		return kPages
	case "container_id":
		return kContainerID
	case "environment":
		return kEnvironment
	case "item":
		return kItem
	case "action":
		return kAction
	case "container":
		return kContainer
	case "id":
		return kID
	case "tool_usage":
		return kToolUsage
	case "image_gen":
		return kImageGen
	case "trace":
		return kTrace
	case "amazon-bedrock-trace":
		return kBedrockTrace
	case "guardrail":
		return kGuardrail
	case "inputAssessment":
		return kInputAssessment
	case "outputAssessments":
		return kOutputAssessments
	case "outputs":
		return kOutputs
	case "invocationMetrics":
		return kInvocationMetrics
	case "contentFilter":
		return kContentFilter
	case "promptAttack":
		return kPromptAttack
	case "sensitiveInformation":
		return kSensitiveInformation
	case "textUnits":
		return kTextUnits
	case "contentPolicyUnits":
		return kGuard0 + guardContent
	case "topicPolicyUnits":
		return kGuard0 + guardTopic
	case "sensitiveInformationPolicyUnits": // not ...FreeUnits, its free regular expressions
		return kGuard0 + guardSensitive
	case "contextualGroundingPolicyUnits":
		return kGuard0 + guardGrounding
	case "automatedReasoningPolicyUnits":
		return kGuard0 + guardReasoning
	case "automatedReasoningPolicies":
		return kGuard0 + guardReasoningPolicies
	case "contentPolicyImageUnits":
		return kGuard0 + guardImages
	}
	return kOther
}

// The billed counts of a guardrail assessment's usage (kGuard0+guard*), word filters and
// regular expressions left out: they are free.
const (
	guardContent uint8 = iota
	guardTopic
	guardSensitive
	guardGrounding
	guardReasoning
	guardReasoningPolicies // how many automated reasoning policies the units were checked by
	guardImages
	// The detect-only checks' text units (no key of their own: checksTarget).
	guardChecksContent
	guardChecksPrompt
	guardChecksSensitive
	nGuard
)

// Roots: where a usage object and a model may sit.
const (
	rootTop      = iota // {"model", "usage"}
	rootMessage         // {"message": {"model", "usage"}} (Anthropic message_start)
	rootResponse        // {"response": {"model", "usage"}} (OpenAI Responses events)
	nRoot
	// rootIterations holds, in its Anthropic counts (input_tokens, output_tokens,
	// cache_read_input_tokens, cache_creation_input_tokens), the sums of the entries of
	// Anthropic's usage.iterations[] that the top-level counts leave out (compaction,
	// advisor_message: scanner.iterApart), the top level's or message_start's
	// message's; an advisor_message entry's in the advisor's slots (iterSlot). An
	// Anthropic document has no response root, whose usage it borrows: a field of its
	// own would take the Extractor to the heap's next size class.
	rootIterations = rootResponse
	// rootImageTool holds, in its slots tokImageToolInput and tokImageToolCached, the
	// input_tokens and cached_tokens of an OpenAI Responses document's
	// tool_usage.image_gen (imageToolTarget): its image generation tool's usage, billed
	// at the image model's prices apart from the response's. A Responses document (an
	// object, an event) has no message root, whose usage it borrows: fields of their own
	// in each root would take the Extractor to the heap's next size class.
	rootImageTool = rootMessage
)

// The slots of rootImageTool that hold the image generation tool's counts: slots an
// Anthropic message_start's usage, the one other reader of that root, does not bill (a
// total and an audio part are no Anthropic counts), so that neither leaks into the other.
const (
	tokImageToolInput  = tokTotal
	tokImageToolCached = tokAudioIn
)

// The slots of the sums of Anthropic's advisor_message entries, in rootIterations and
// in the accumulator: an Anthropic usage has no OpenAI chat counts, whose slots they
// take (as the other iterations' sums take Gemini's: tokIterInput).
const (
	tokAdvisorInput      = tokPrompt
	tokAdvisorOutput     = tokCompletion
	tokAdvisorCacheRead  = tokCachedPrompt
	tokAdvisorCacheWrite = tokCachedInput
	// tokAdvisorCacheWrite1h is the part of the advisor's cache writes made for an hour
	// (its entries' cache_creation.ephemeral_1h_input_tokens: a tool whose caching's ttl
	// is "1h"), in a slot no Anthropic usage has either; a compaction's is in
	// tokCacheWritePart, as the top level's.
	tokAdvisorCacheWrite1h = tokAudioOut
)

// iterSlot is the slot of rootIterations an iterations entry's count tok adds to: the
// advisor's (advisor says the entry is an advisor_message), else tok's own.
func iterSlot(tok int, advisor bool) int {
	if !advisor {
		return tok
	}
	switch tok {
	case tokInput:
		return tokAdvisorInput
	case tokOutput:
		return tokAdvisorOutput
	case tokCacheRead:
		return tokAdvisorCacheRead
	case tokCacheCreation:
		return tokAdvisorCacheWrite
	case tokCacheWritePart:
		return tokAdvisorCacheWrite1h
	}
	return tok
}

// usageFields are the counts of one usage object.
type usageFields struct {
	obj bool   // the usage value was an object (not null or absent)
	has uint32 // bit tok set: tok[tok] was a valid count
	tok [nTok]int64
}

// get returns a count and whether it was reported (0 when not).
func (u *usageFields) get(t int) (int64, bool) {
	if u.has&(1<<t) == 0 {
		return 0, false
	}
	return u.tok[t], true
}

// add adds v to count t (saturating): the sum of the usage.iterations[] entries billed
// apart (rootIterations).
func (u *usageFields) add(t int, v int64) {
	cur, _ := u.get(t)
	u.tok[t] = saturate.Add(cur, v)
	u.has |= 1 << t
}

// setMax records a reported count: the largest one reported wins.
func (u *usageFields) setMax(t int, v int64) {
	if u.has&(1<<t) == 0 || v > u.tok[t] {
		u.tok[t] = v
		u.has |= 1 << t
	}
}

// merge takes in the counts of another report, each keeping the largest.
func (u *usageFields) merge(o *usageFields) {
	u.obj = u.obj || o.obj
	for t := range nTok {
		if v, ok := o.get(t); ok {
			u.setMax(t, v)
		}
	}
}

// docFields are the fields of one JSON document that usage is read from.
type docFields struct {
	typ, object capture
	model       [nRoot]capture
	// tier is OpenAI's service_tier of root: the top level (chat, a Responses object)
	// or a Responses event's response; or, where the document has no service_tier of
	// root (tierSeen), Anthropic's usage.speed of root: the top level (a message, a
	// message_delta event) or a message_start event's message. Of each, the last
	// occurrence wins.
	tier [nRoot]capture
	// usage is each root's usage; rootIterations's also sums Anthropic's iterations
	// billed apart.
	usage [nRoot]usageFields
	// text counts the output text at the text paths (textTarget), delta
	// the bytes of top-level "delta" strings, which are output text only
	// in the events whose type says so (isTextDelta).
	text, delta int64
	// finished: a Gemini candidate gave its finishReason (the last chunk of a
	// stream carries it), or its promptFeedback a blockReason (a prompt Gemini refused,
	// answered with no candidate: the stream's one chunk).
	finished bool
	// converse: a usage count had a Bedrock Converse name (tgConverseTok).
	converse bool
	// hasCost: a usage reported cost, the cost the upstream billed in USD (OpenRouter's
	// usage.cost), the largest reported, in micro-USD rounded up.
	hasCost bool
	// hasUpstream: a usage reported OpenRouter's cost_details.upstream_inference_cost,
	// the largest reported in upstream (as cost); byok: a usage's is_byok was true
	// (billedCost). With the other flags, they take no word of their own.
	hasUpstream, byok bool
	// hasCachedAudio: see cachedAudio. With the other flags, it takes no word of its own.
	hasCachedAudio bool
	// tierSeen has bit 1<<root set once a service_tier of root began: a usage.speed
	// of root no longer goes to tier (the one speaks for OpenAI, the other for
	// Anthropic, and no document is both).
	tierSeen uint8
	// traffic: Fast where Vertex AI's usageMetadata.trafficType said ON_DEMAND_PRIORITY,
	// the Gemini API's usageMetadata.serviceTier or Bedrock Converse's serviceTier.type
	// "priority": their priority tier; Flex where it said ON_DEMAND_FLEX or "flex"
	// (pricecatalog.FlexNames; Bedrock's is read as standard); else Standard (the last
	// of these fields counts). trafficSaid: one of these fields was there, whatever it
	// said (a Vertex AI chunk before its last has a usageMetadata of its trafficType
	// alone: sseFamily).
	traffic     pricecatalog.Tier
	trafficSaid bool
	// latency: Bedrock Converse's performanceConfig.latency said "optimized", its
	// latency-optimized inference, LatencyOptimized (pricecatalog.LatencyNames; the last
	// one counts), else Standard.
	latency pricecatalog.Tier
	// geoPinned: a usage's inference_geo (Anthropic's) named a geography, not "global"
	// (the last one counts, of any root).
	geoPinned bool
	// mapsGrounded: a Gemini candidate's grounding cites a Google Maps source (an object
	// at candidates[].groundingMetadata.groundingChunks[].maps): the prompt was grounded
	// with Google Maps, which Google bills per grounded prompt, however many places it
	// cites.
	mapsGrounded bool
	// searches counts the web searches the document lists, which the provider bills
	// and its usage does not count: OpenAI Responses output items of type
	// "web_search_call" (output[] of a Responses object, response.output[] of an
	// event, an output item event's item) whose action is a search or that have no
	// action, Gemini's search queries (candidates[].groundingMetadata.
	// webSearchQueries[], each a string). pageActions counts the web_search_call items
	// whose action is another (a reasoning model's "open_page" and "find_in_page"),
	// which OpenAI bills no call for (scanner.pageAction). fileSearches counts OpenAI's
	// "file_search_call" output items alike (its file search tool, billed per call),
	// and imageCalls its "image_generation_call" items (its image generation tool,
	// billed per image). Each saturates at 65,535, more than any response makes;
	// imageCalls fills the padding before cachedAudio (TestExtractorSize).
	searches, pageActions, fileSearches, imageCalls uint16
	// advisorResult: the document is a content_block_start event that begins
	// an advisor_tool_result block (Anthropic's advisor tool: a consultation done), which
	// a stream cut before its last message_delta reports no count of.
	advisorResult bool
	// webSearchResult: the document is a content_block_start event that begins a
	// web_search_tool_result block (Anthropic's web search server tool: a search done,
	// billed, which only the last message_delta's usage counts); resultFailed: the
	// block's content is an error (web_search_tool_result_error, a search Anthropic bills
	// not; advisor_tool_result_error, a consultation that did not run: its max_uses
	// reached, the advisor overloaded...), no search or consultation.
	webSearchResult, resultFailed bool
	// cachedAudio is the audio part of Gemini's cached count (cachedContentTokenCount):
	// the AUDIO entry of usageMetadata.cacheTokensDetails, reported (hasCachedAudio) when
	// the list was there, 0 when it has no AUDIO entry. The largest reported wins, as for
	// a count of usage. It is no slot of usageFields.tok for the size class
	// (TestExtractorSize): a slot takes 8 bytes in each of the four usageFields an
	// Extractor holds (the three roots here, the accumulator's), where Gemini reports at
	// the top level only; this field and the accumulator's take 16.
	//
	// In a chat completions chunk, which has no such count, it counts the base64
	// characters of its answer's audio instead (choices[].delta.audio.data: txAudio),
	// whose length is the audio's duration (accumulator.hasCachedAudio): a field of its
	// own would take the Extractor past its size class. A document with both (none an
	// API sends) keeps Gemini's count alone, whichever came first.
	cachedAudio int64
	cost        int64
	upstream    int64
	// container is the container id being read (tgContainer), containers the distinct
	// ones the document named, at most maxContainers: the containers its code tools ran
	// in, billed by the time each lives. container's buffer is allocated by the first id
	// read, so that an Extractor that never meets one holds none (TestExtractorSize).
	container  capture
	containers []string
	// guard is what the document's guardrail assessments billed (guardrailTarget),
	// allocated by the first count read, so that an Extractor that never meets one holds
	// none (TestExtractorSize).
	guard *guardReading
}

// guardReading sums the billed counts of a document's guardrail assessments; seen says
// one was read (0 too: a guardrail of free policies alone reports its billed counts as 0).
type guardReading struct {
	seen  bool
	units pricecatalog.GuardrailUnits
	// reasoning and policies are the automated reasoning counts of the usage being read:
	// its units are checked by each of its policies, and priced per policy (endGuardUsage).
	reasoning, policies int64
}

// addGuard takes in count g of a guardrail assessment's usage.
func (d *docFields) addGuard(g uint8, n int64) {
	if d.guard == nil {
		d.guard = &guardReading{}
	}
	d.guard.seen = true
	u := &d.guard.units
	switch g {
	case guardContent:
		u.ContentText = saturate.Add(u.ContentText, n)
	case guardTopic:
		u.DeniedTopics = saturate.Add(u.DeniedTopics, n)
	case guardSensitive:
		u.SensitiveInformation = saturate.Add(u.SensitiveInformation, n)
	case guardGrounding:
		u.ContextualGrounding = saturate.Add(u.ContextualGrounding, n)
	case guardReasoning:
		d.guard.reasoning = n
	case guardReasoningPolicies:
		d.guard.policies = n
	case guardImages:
		u.ContentImages = saturate.Add(u.ContentImages, n)
	case guardChecksContent:
		u.ChecksContentFilter = saturate.Add(u.ChecksContentFilter, n)
	case guardChecksPrompt:
		u.ChecksPromptAttack = saturate.Add(u.ChecksPromptAttack, n)
	case guardChecksSensitive:
		u.ChecksSensitiveInformation = saturate.Add(u.ChecksSensitiveInformation, n)
	}
}

// endGuardUsage closes a guardrail assessment's usage: its automated reasoning units
// count once for each policy that checked them. AWS prices them "per 1,000 text units
// per policy" and reports the units and the policies apart; whether the units are
// already multiplied no source says, and multiplying is never below the bill (a
// guardrail has at most two such policies). docs/prices.md, "Amazon Bedrock's
// guardrails".
func (d *docFields) endGuardUsage() {
	if g := d.guard; g != nil && g.reasoning > 0 {
		g.units.AutomatedReasoning = saturate.Add(g.units.AutomatedReasoning, saturate.Mul(g.reasoning, max(g.policies, 1)))
	}
	if d.guard != nil {
		d.guard.reasoning, d.guard.policies = 0, 0
	}
}

// maxContainers bounds the distinct containers a response's ids are kept of: a request
// opens one container per code tool (OpenAI's code interpreter and hosted shell), so a
// response names one or two; more are not charged (docs/prices.md, "Containers").
const maxContainers = 4

// maxContainerIDBytes bounds a container id kept: OpenAI's cntr_ ids are 53 bytes,
// Anthropic's container_ ids about 40. A longer one is not kept.
const maxContainerIDBytes = 128

// keepContainer keeps the container id just read (container) among the document's.
func (d *docFields) keepContainer() {
	if !d.container.ok || len(d.container.b) == 0 || len(d.containers) >= maxContainers {
		return
	}
	for _, id := range d.containers {
		if id == string(d.container.b) {
			return
		}
	}
	d.containers = append(d.containers, string(d.container.b))
}

func (d *docFields) reset() {
	d.typ.reset()
	d.object.reset()
	for i := range d.model {
		d.model[i].reset()
		d.tier[i].reset()
	}
	d.usage = [nRoot]usageFields{}
	d.text, d.delta = 0, 0
	d.finished, d.converse, d.hasCost, d.cost = false, false, false, 0
	d.hasUpstream, d.upstream, d.byok = false, 0, false
	d.searches, d.pageActions, d.fileSearches, d.imageCalls, d.advisorResult = 0, 0, 0, 0, false
	d.webSearchResult, d.resultFailed = false, false
	d.hasCachedAudio, d.cachedAudio = false, 0
	d.tierSeen, d.traffic, d.trafficSaid, d.geoPinned, d.mapsGrounded = 0, pricecatalog.Standard, false, false, false
	d.latency = pricecatalog.Standard
	d.container.reset()
	d.containers = d.containers[:0]
	if d.guard != nil {
		*d.guard = guardReading{}
	}
}

// setListAudio records the audio count a Gemini *TokensDetails list (list: its key)
// reported: of the input (promptTokensDetails), of the output (candidatesTokensDetails),
// of the cached input (cacheTokensDetails). Like any count, the largest reported wins.
func (d *docFields) setListAudio(root, list uint8, n int64) {
	switch list {
	case kPromptModalities:
		d.usage[root].setMax(tokAudioIn, n)
	case kOutputModalities:
		d.usage[root].setMax(tokAudioOut, n)
	case kCacheModalities:
		keepLargest(&d.cachedAudio, &d.hasCachedAudio, n)
	}
}

// keepLargest records a reported count kept outside usageFields (the cached audio, see
// docFields.cachedAudio) by usageFields.setMax's rule: the largest reported wins. The
// count and its flag stay apart, each where the size class has room for it.
func keepLargest(v *int64, has *bool, n int64) {
	if !*has || n > *v {
		*v, *has = n, true
	}
}

// billedCost is the cost the document's usage says the request was billed, in
// micro-USD, and whether it said one. OpenRouter's usage.cost is what it charged its own
// credits; with "bring your own key" (usage.is_byok true) that is only its fee (0 for a
// month's first million such requests, 5% of the provider's cost after), while the
// provider billed the operator's key usage.cost_details.upstream_inference_cost: the two
// together are what the request cost. Without is_byok, OpenRouter reports the upstream
// cost equal to its cost (it passes the provider's price on), so the larger of the two is
// the cost, never below either. docs/prices.md, "An upstream cost".
func (d *docFields) billedCost() (int64, bool) {
	switch {
	case !d.hasUpstream:
		return d.cost, d.hasCost
	case d.byok:
		return saturate.Add(d.cost, d.upstream), true
	}
	return max(d.cost, d.upstream), true
}

// countSearch counts one web search the document lists (searches).
func (d *docFields) countSearch() {
	if d.searches < math.MaxUint16 {
		d.searches++
	}
}

// countPageAction counts one web_search_call item whose action is no search
// (pageActions).
func (d *docFields) countPageAction() {
	if d.pageActions < math.MaxUint16 {
		d.pageActions++
	}
}

func (d *docFields) countFileSearch() {
	if d.fileSearches < math.MaxUint16 {
		d.fileSearches++
	}
}

func (d *docFields) countImageCall() {
	if d.imageCalls < math.MaxUint16 {
		d.imageCalls++
	}
}

// capture collects a decoded string into a buffer whose capacity is its
// limit, so it never allocates; a longer string sets over.
type capture struct {
	b []byte
	// limit is a uint16 so that limit, over and ok share one word: the Extractor holds
	// ten captures (TestExtractorSize). No capture keeps more than 65,535 bytes.
	limit uint16
	over  bool
	ok    bool // a complete string that fits
}

func (c *capture) reset() {
	c.b = c.b[:0]
	c.over = false
	c.ok = false
}

func (c *capture) add(p []byte) {
	if c.over {
		return
	}
	if len(c.b)+len(p) > int(c.limit) {
		c.over = true
		return
	}
	c.b = append(c.b, p...)
}

func (c *capture) addByte(b byte) {
	if c.over {
		return
	}
	if len(c.b) >= int(c.limit) {
		c.over = true
		return
	}
	c.b = append(c.b, b)
}

func (c *capture) addRune(r rune) {
	var a [utf8.UTFMax]byte
	c.add(a[:utf8.EncodeRune(a[:], r)])
}

// commit marks a completed string. Like encoding/json, each byte that is not
// part of valid UTF-8 becomes U+FFFD; the string is kept only if the result
// fits the limit.
func (c *capture) commit() {
	if c.over {
		return
	}
	if !utf8.Valid(c.b) {
		fixed := make([]byte, 0, len(c.b)+8)
		for p := c.b; len(p) > 0; {
			r, n := utf8.DecodeRune(p)
			fixed = utf8.AppendRune(fixed, r) // RuneError for an invalid byte
			p = p[n:]
		}
		if len(fixed) > int(c.limit) {
			c.over = true
			return
		}
		c.b = append(c.b[:0], fixed...)
	}
	c.ok = true
}

func (c *capture) is(s string) bool { return c.ok && string(c.b) == s }

// set stores a whole string (used by tests' reference decoder).
func (c *capture) set(s string) {
	c.reset()
	c.add([]byte(s))
	c.commit()
}

// Scanner states.
const (
	stTop      uint8 = iota // before a top-level value
	stTopEnd                // after a top-level value
	stValue                 // a value is required (after ':' or ',' in an array)
	stArrFirst              // after '[': a value or ']'
	stObjFirst              // after '{': a key or '}'
	stObjKey                // after ',' in an object: a key
	stColon                 // after a key
	stAfterVal              // after a value in a container: ',' or the close
	stStr                   // in a string
	stEsc                   // after '\'
	stHex                   // in \uXXXX
	stSurr1                 // after a surrogate escape, expecting '\' of its pair
	stSurr2                 // expecting 'u' of the pair
	stSurrHex               // in the pair's XXXX
	stNumMinus
	stNumZero
	stNumInt
	stNumDot
	stNumFrac
	stNumE
	stNumESign
	stNumExp
	stLit
	stError
)

// What a string read into the scanner's keyCap is (scanner.capFor).
const (
	capItemType uint8 = iota
	capModality
	capTraffic
	capLatency
	capGeo
	capTTL
	capIterType
	capBlockType
	capGroundingType
	capEventItemType
	capActionType
)

// keyCapFor is what a string of target kind read into keyCap is.
func keyCapFor(kind uint8) uint8 {
	switch kind {
	case tgModality:
		return capModality
	case tgTraffic:
		return capTraffic
	case tgLatency:
		return capLatency
	case tgGeo:
		return capGeo
	case tgTTL:
		return capTTL
	case tgIterType:
		return capIterType
	case tgBlockType:
		return capBlockType
	case tgGroundingType:
		return capGroundingType
	case tgEventItemType:
		return capEventItemType
	case tgActionType:
		return capActionType
	}
	return capItemType
}

// Targets: what the value being read means to us.
const (
	tgNone          uint8 = iota
	tgModel               // a model string of root
	tgType                // the top-level "type"
	tgObject              // the top-level "object"
	tgUsage               // a usage value of root
	tgRoot                // the "message" or "response" value
	tgDetail              // a *_tokens_details value of root (tok: its cached count)
	tgTok                 // a count of root
	tgFinish              // a Gemini candidate's finishReason
	tgTier                // a service_tier string of root
	tgSpeed               // Anthropic's usage.speed string of root (kept in tier unless a service_tier of root was seen)
	tgItemType            // the "type" of an OpenAI Responses output item (output[].type, response.output[].type)
	tgSearchQuery         // a Gemini search query (candidates[].groundingMetadata.webSearchQueries[])
	tgMapsSource          // a Gemini grounding chunk's maps source (candidates[].groundingMetadata.groundingChunks[].maps)
	tgBlockType           // the type of an Anthropic content_block_start event's content_block
	tgModalities          // a Gemini *TokensDetails list (its key names the count its AUDIO entries report: setListAudio)
	tgModEntry            // an entry of that list
	tgModality            // an entry's modality string
	tgGeo                 // Anthropic's usage.inference_geo
	tgTTL                 // a Bedrock Converse cacheDetails[] entry's ttl string
	tgIterEntry           // an entry of Anthropic's usage.iterations[]
	tgIterType            // that entry's type
	tgIterTok             // that entry's count (tok: the Anthropic count it is)
	tgTraffic             // Vertex AI's usageMetadata.trafficType, the Gemini API's usageMetadata.serviceTier
	tgLatency             // Bedrock Converse's performanceConfig.latency
	tgModCount            // an entry's tokenCount
	tgConverseTok         // a count of root by a Bedrock Converse name (tok: the Anthropic count it is)
	tgCost                // a usage's cost in USD, or in xAI's ticks (tok costInTicks); its number's text goes to keyCap
	tgContainer           // a container's id (containerTarget)
	tgGuard               // a billed count of a guardrail assessment's usage (tok: guard*; guardrailTarget)
	tgGroundingType       // an Interactions API usage.grounding_tool_count[] entry's type
	tgByok                // OpenRouter's usage.is_byok (a literal: true sets docFields.byok)
	tgOutputItem          // an OpenAI Responses output item (an element of output[], response.output[]; an event's item)
	tgEventItemType       // the type of an output item event's item (only a web_search_call is counted from it)
	tgActionType          // the type of an output item's action (a web_search_call's: "search", "open_page"...)
)

// A tgCost target's tok: costInTicks, the cost is in xAI's ticks (1e-10 USD), not USD;
// costUpstream, the cost is OpenRouter's usage.cost_details.upstream_inference_cost (USD),
// kept apart from usage.cost (docFields.billedCost).
const (
	costInTicks  = 1
	costUpstream = 2
)

type target struct{ kind, root, tok uint8 }

// The scanner's small fields are together at its end, so that they share words: the
// Extractor holds a scanner (TestExtractorSize).
type scanner struct {
	maxDepth int
	depth    int
	stack    []uint64       // bit i: the container at depth i+1 is an object
	keys     [maxPath]uint8 // key id of the current value at depths 1..maxPath
	doc      docFields

	str    *capture // where the string being read goes, or nil
	keyCap capture
	num    int64
	// entryCount is the tokenCount of the Gemini *TokensDetails[] entry being read
	// (Gemini leaves a count of 0 out), entryMatch whether its modality is AUDIO; or the
	// inputTokens of the Bedrock Converse cacheDetails[] entry being read, and whether
	// its ttl is "1h". They are the scanner's, not the document's: entryMatch sits with
	// the small fields below.
	entryCount int64

	rawDepth int   // depth outside the container counted raw (raw)
	rawFrom  int   // index in the current input where the count goes on
	rawN     int64 // its bytes so far; added to the text when it closes

	hex  rune
	surr rune // a surrogate waiting for its pair

	multi  bool // a sequence of top-level values (SSE data), not exactly one
	state  uint8
	strKey bool // the string being read is an object key
	// capFor says what the string being read into keyCap is: an output item's type
	// (capItemType), a Gemini entry's modality (capModality), Gemini's traffic type or
	// service tier and Bedrock's service tier (capTraffic), Anthropic's inference_geo
	// (capGeo), a Bedrock cacheDetails entry's ttl (capTTL) or an Anthropic iterations
	// entry's type (capIterType).
	capFor     uint8
	entryMatch bool // see entryCount
	// itemWeb: the output item being read (tgOutputItem) is a web_search_call, counted
	// in the document's searches or pageActions; itemPage: its action's type said
	// something other than "search". An item's members come in any order (webItem,
	// pageAction).
	itemWeb, itemPage bool
	// iterApart: the usage.iterations[] entry being read is billed apart from the
	// top-level counts (its type is neither "message" nor "fallback_message", or not
	// read yet: an entry whose counts come before its type is taken as apart, the
	// dearer reading). iterAdvisor: its type said "advisor_message", an advisor model's
	// sub-inference, billed at that model's prices: its counts go to the advisor's sums.
	iterApart, iterAdvisor bool
	hexN                   uint8
	numOK                  bool // the number so far is a non-negative integer that fits int64 (in ms mode: its milliseconds do)
	numTok                 target
	lit                    uint8 // the literal being read: its index in literals
	litPos                 uint8

	// ms mode, for usage.seconds alone (numTok's tok is tokAudioSeconds): the
	// number is a decimal of seconds, read as milliseconds. num takes the digits
	// down to the third after the point; numFrac counts those after the point,
	// numUp says a digit below them was not 0 (the milliseconds round up).
	numMs   bool
	numFrac uint8
	numUp   bool

	txt uint8     // what the string being read adds to: txNone, txText or txDelta
	u8  utf8Count // UTF-8 state of that string
	raw bool      // counting the raw bytes of a container at a raw path
}

// literals are JSON's literals (scanner.lit).
var literals = [...]string{"true", "false", "null"}

// What a value at a text path adds to the document's text.
const (
	txNone  uint8 = iota
	txText        // a string: its decoded bytes go to text
	txDelta       // a top-level "delta" string: its decoded bytes go to delta
	txRaw         // an object or array: its raw bytes go to text
	// txAudio: a streamed chat answer's audio (choices[].delta.audio.data, base64 of
	// PCM16 at 24 kHz, as OpenAI streams it): its bytes go to audio.
	txAudio
)

func (s *scanner) init(maxDepth int, stack []uint64, key, typ, obj []byte, models, tiers [nRoot][]byte, modelLimit uint16) {
	s.maxDepth = maxDepth
	s.stack = stack
	s.keyCap = capture{b: key, limit: maxKeyBytes}
	s.doc.typ = capture{b: typ, limit: maxSmallBytes}
	s.doc.object = capture{b: obj, limit: maxObjectBytes}
	s.doc.container = capture{limit: maxContainerIDBytes}
	for i := range s.doc.model {
		s.doc.model[i] = capture{b: models[i], limit: modelLimit}
		s.doc.tier[i] = capture{b: tiers[i], limit: maxTierBytes}
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// feed reads p until its end or until a top-level value is complete, and
// returns how many bytes it consumed and whether a value was completed (the
// document is then in s.doc until the next top-level value starts). A number
// at the top level ends with the byte after it, which is then not consumed.
func (s *scanner) feed(p []byte) (int, bool) {
	n, done := s.feedTokens(p)
	if s.raw {
		s.rawN += int64(n - s.rawFrom)
		s.rawFrom = 0
	}
	return n, done
}

func (s *scanner) feedTokens(p []byte) (int, bool) {
	for i := 0; i < len(p); {
		c := p[i]
		switch s.state {
		case stError:
			return len(p), false

		case stTop, stTopEnd:
			if isSpace(c) {
				i++
				continue
			}
			if s.state == stTopEnd && !s.multi {
				s.fail()
				return len(p), false
			}
			s.doc.reset()
			s.valueStart(c, i)
			i++

		case stValue, stArrFirst:
			if isSpace(c) {
				i++
				continue
			}
			i++
			if c == ']' && s.state == stArrFirst {
				if s.pop(i) {
					return i, true
				}
				continue
			}
			s.valueStart(c, i-1)

		case stObjFirst, stObjKey:
			if isSpace(c) {
				i++
				continue
			}
			i++
			switch {
			case c == '"':
				s.strKey = true
				s.keyCap.reset()
				s.str = &s.keyCap
				s.state = stStr
			case c == '}' && s.state == stObjFirst:
				if s.pop(i) {
					return i, true
				}
			default:
				s.fail()
			}

		case stColon:
			if isSpace(c) {
				i++
				continue
			}
			i++
			if c != ':' {
				s.fail()
				continue
			}
			s.state = stValue

		case stAfterVal:
			if isSpace(c) {
				i++
				continue
			}
			i++
			obj := s.isObject()
			switch {
			case c == ',' && obj:
				s.state = stObjKey
			case c == ',':
				s.state = stValue
			case (c == '}' && obj) || (c == ']' && !obj):
				if s.pop(i) {
					return i, true
				}
			default:
				s.fail()
			}

		case stStr:
			j := i
			for j < len(p) {
				b := p[j]
				if b == '"' || b == '\\' || b < 0x20 {
					break
				}
				j++
			}
			if j > i {
				if s.str != nil {
					s.str.add(p[i:j])
				}
				if s.txt != txNone {
					s.addText(s.u8.count(p[i:j]))
				}
			}
			if j == len(p) {
				return len(p), false
			}
			i = j + 1
			if s.txt != txNone {
				s.addText(s.u8.end())
			}
			switch p[j] {
			case '"':
				if s.endString() {
					return i, true
				}
			case '\\':
				s.state = stEsc
			default:
				s.fail() // control character
			}

		case stEsc:
			i++
			var r byte
			switch c {
			case '"', '\\', '/':
				r = c
			case 'b':
				r = '\b'
			case 'f':
				r = '\f'
			case 'n':
				r = '\n'
			case 'r':
				r = '\r'
			case 't':
				r = '\t'
			case 'u':
				s.state, s.hex, s.hexN = stHex, 0, 0
				continue
			default:
				s.fail()
				continue
			}
			if s.str != nil {
				s.str.addByte(r)
			}
			if s.txt != txNone {
				s.addText(1)
			}
			s.state = stStr

		case stHex, stSurrHex:
			i++
			h := hexVal(c)
			if h < 0 {
				s.fail()
				continue
			}
			s.hex = s.hex<<4 | h
			if s.hexN++; s.hexN < 4 {
				continue
			}
			if s.state == stSurrHex {
				// As encoding/json: a surrogate followed by an escape that
				// does not complete a pair is U+FFFD, and the escape after it
				// is read on its own.
				if r := utf16.DecodeRune(s.surr, s.hex); r != utf8.RuneError {
					s.addRune(r)
					s.state = stStr
					continue
				}
				s.addRune(utf8.RuneError)
			}
			if utf16.IsSurrogate(s.hex) {
				s.surr = s.hex
				s.state = stSurr1
			} else {
				s.addRune(s.hex)
				s.state = stStr
			}

		case stSurr1:
			if c == '\\' {
				i++
				s.state = stSurr2
				continue
			}
			s.addRune(utf8.RuneError)
			s.state = stStr // c is read as part of the string

		case stSurr2:
			if c == 'u' {
				i++
				s.state, s.hex, s.hexN = stSurrHex, 0, 0
				continue
			}
			s.addRune(utf8.RuneError)
			s.state = stEsc // c is the escape after the backslash

		case stNumMinus, stNumZero, stNumInt, stNumDot, stNumFrac, stNumE, stNumESign, stNumExp:
			if s.passesDigits() {
				// A run of digits leaves this number's state as it is: passed over at
				// once, not byte by byte (an embedding's floats are most of its
				// answer's bytes).
				j := i
				for j < len(p) && '0' <= p[j] && p[j] <= '9' {
					j++
				}
				if j > i {
					i = j
					continue
				}
			}
			if s.numByte(c) {
				if s.numTok.kind == tgCost {
					s.keyCap.addByte(c)
				}
				i++
				continue
			}
			if !s.numTerminal() {
				s.fail()
				continue
			}
			if s.endNumber() {
				return i, true // c belongs to what follows
			}

		case stLit:
			i++
			if c != literals[s.lit][s.litPos] {
				s.fail()
				continue
			}
			if s.litPos++; int(s.litPos) == len(literals[s.lit]) {
				if s.endValue() {
					return i, true
				}
			}
		}
	}
	return len(p), false
}

// flush ends the input (end of body, or of an SSE event): a top-level number
// that was waiting for a delimiter is complete. It reports whether that
// completed a document.
func (s *scanner) flush() bool {
	if s.depth == 0 && s.numTerminal() {
		return s.endNumber()
	}
	return false
}

// restart forgets any partial value and expects a new top-level value.
func (s *scanner) restart() {
	s.state = stTop
	s.depth = 0
	s.strKey = false
	s.str = nil
	s.numTok = target{}
	s.stopText()
}

func (s *scanner) fail() {
	s.state = stError
	s.str = nil
	s.stopText()
}

// stopText drops the text of a string or raw value that will not complete.
func (s *scanner) stopText() {
	s.txt = txNone
	s.u8 = utf8Count{}
	s.raw, s.rawN = false, 0
}

func (s *scanner) addText(n int64) {
	if s.txt == txDelta {
		s.doc.delta += n
	} else if s.txt == txAudio {
		if !s.doc.hasCachedAudio { // docFields.cachedAudio says why there; a Gemini count wins
			s.doc.cachedAudio = saturate.Add(s.doc.cachedAudio, n)
		}
	} else {
		s.doc.text += n
	}
}

func hexVal(c byte) rune {
	switch {
	case '0' <= c && c <= '9':
		return rune(c - '0')
	case 'a' <= c && c <= 'f':
		return rune(c - 'a' + 10)
	case 'A' <= c && c <= 'F':
		return rune(c - 'A' + 10)
	}
	return -1
}

func (s *scanner) addRune(r rune) {
	if s.str != nil {
		s.str.addRune(r)
	}
	if s.txt != txNone {
		s.addText(int64(utf8.RuneLen(r)))
	}
}

func (s *scanner) isObject() bool {
	i := s.depth - 1
	return s.stack[i/64]&(1<<(i%64)) != 0
}

func (s *scanner) push(obj bool) {
	if s.depth >= s.maxDepth {
		s.fail()
		return
	}
	i := s.depth
	if i/64 == len(s.stack) {
		s.stack = append(s.stack, 0)
	}
	if obj {
		s.stack[i/64] |= 1 << (i % 64)
		s.state = stObjFirst
	} else {
		s.stack[i/64] &^= 1 << (i % 64)
		s.state = stArrFirst
	}
	s.depth++
	if s.depth <= maxPath {
		if obj {
			s.keys[s.depth-1] = kOther
		} else {
			s.keys[s.depth-1] = kArr
		}
	}
}

// pop closes the current container, whose last byte ends before p[end]; it
// reports whether that completed a top-level value.
func (s *scanner) pop(end int) bool {
	s.depth--
	if s.raw && s.depth == s.rawDepth {
		s.doc.text += s.rawN + int64(end-s.rawFrom)
		s.raw, s.rawN = false, 0
	}
	if (s.depth == 6 || s.depth == 7) && s.keys[s.depth-1] == kUsage && s.keys[s.depth-2] == kInvocationMetrics ||
		s.depth == 1 && s.keys[0] == kUsage {
		s.doc.endGuardUsage() // a guardrail's usage closed (or another: nothing read)
	}
	if s.depth == 3 && s.keys[2] == kArr && s.keys[0] == kUsage {
		s.entryClosed(rootTop, s.keys[1])
		// An entry of Bedrock Converse's cacheDetails closed: its inputTokens are the
		// writes made for an hour when its ttl said "1h" (tokCacheWritePart, as
		// Anthropic's ephemeral_1h_input_tokens).
		if s.keys[1] == kCacheDetails && s.entryMatch {
			s.doc.usage[rootTop].setMax(tokCacheWritePart, s.entryCount)
		}
	} else if s.depth == 4 && s.keys[3] == kArr && s.keys[1] == kUsage && s.keys[0] == kResponse {
		s.entryClosed(rootResponse, s.keys[2]) // the Interactions API's interaction.usage
	}
	return s.endValue()
}

// entryClosed ends an entry of a list of root's Gemini usage (list: its key): of a
// *TokensDetails list (the Interactions API's *_tokens_by_modality), whose tokens are
// audio ones when its modality said so (Gemini lists each modality once; like any count,
// the largest reported wins); of the Interactions API's grounding_tool_count, whose count
// is Google Search's queries when its type said so, billed as generateContent's search
// queries are.
func (s *scanner) entryClosed(root, list uint8) {
	switch {
	case !s.entryMatch:
	case isModalities(list):
		s.doc.setListAudio(root, list, s.entryCount)
	case list == kGroundingTools:
		s.doc.usage[root].setMax(tokWebSearches, s.entryCount)
	}
}

func (s *scanner) endValue() bool {
	if s.depth == 0 {
		s.state = stTopEnd
		return true
	}
	s.state = stAfterVal
	return false
}

func (s *scanner) endString() bool {
	str := s.str
	s.str = nil
	if s.strKey {
		s.strKey = false
		if s.depth <= maxPath {
			k := kOther
			if !s.keyCap.over {
				k = keyID(s.keyCap.b)
			}
			s.keys[s.depth-1] = k
		}
		s.state = stColon
		return false
	}
	if str != nil {
		str.commit()
		if str == &s.doc.container {
			s.doc.keepContainer()
		}
		// keyCap takes a value only at an output item's type (tgItemType).
		if str == &s.keyCap {
			switch {
			case s.capFor == capModality:
				// generateContent's modalities are upper case, the Interactions API's lower.
				s.entryMatch = s.keyCap.is("AUDIO") || s.keyCap.is("audio")
			case s.capFor == capGroundingType:
				s.entryMatch = s.keyCap.is("google_search")
			case s.capFor == capTraffic:
				switch {
				case s.keyCap.is("ON_DEMAND_PRIORITY") || s.keyCap.is("priority"):
					s.doc.traffic = pricecatalog.Fast
				case isFlex(&s.keyCap):
					s.doc.traffic = pricecatalog.Flex
				}
			case s.capFor == capLatency:
				s.doc.latency = pricecatalog.Standard
				for _, n := range pricecatalog.LatencyNames {
					if s.keyCap.is(n.Name) {
						s.doc.latency = n.Tier
					}
				}
			case s.capFor == capTTL:
				s.entryMatch = s.keyCap.is("1h")
			case s.capFor == capIterType:
				// A "message" entry (or the fallback model's serving one) is in the
				// top-level counts; any other (compaction, advisor_message) is not.
				s.iterApart = !s.keyCap.is("message") && !s.keyCap.is("fallback_message")
				s.iterAdvisor = s.keyCap.is("advisor_message")
			case s.capFor == capGeo:
				s.doc.geoPinned = !s.keyCap.is("global")
			case s.capFor == capBlockType:
				switch {
				case s.keyCap.is("advisor_tool_result"):
					s.doc.advisorResult = true
				case s.keyCap.is("web_search_tool_result"):
					s.doc.webSearchResult = true
				case s.keyCap.is("web_search_tool_result_error"), s.keyCap.is("advisor_tool_result_error"): // the block's content's type
					s.doc.resultFailed = true
				}
			case s.capFor == capActionType:
				s.pageAction()
			case s.keyCap.is("web_search_call"):
				s.webItem()
			case s.capFor == capEventItemType:
				// An output item event's other items are counted from their own events.
			case s.keyCap.is("file_search_call"):
				s.doc.countFileSearch()
			case s.keyCap.is("image_generation_call"):
				s.doc.countImageCall()
			}
		}
		s.capFor = capItemType
	}
	s.txt = txNone
	return s.endValue()
}

// webItem takes in an output item's type "web_search_call": the item is one call of
// OpenAI's web search tool, counted once, as a search unless its action said otherwise.
func (s *scanner) webItem() {
	if s.itemWeb {
		return
	}
	s.itemWeb = true
	if s.itemPage {
		s.doc.countPageAction()
	} else {
		s.doc.countSearch()
	}
}

// pageAction takes in the type of an output item's action (in keyCap). OpenAI bills its
// web search tool per search action ("Search actions incur a tool call cost", its web
// search guide); a reasoning model's web_search_call items also record the pages it
// opened ("open_page") and searched within ("find_in_page"), which are no billed call.
// A web_search_call counted as a search before its action said otherwise moves to
// pageActions. An item with no action (the older shape) stays a search.
func (s *scanner) pageAction() {
	if s.keyCap.is("search") || s.itemPage {
		return
	}
	s.itemPage = true
	if s.itemWeb && s.doc.searches > 0 {
		s.doc.searches--
		s.doc.countPageAction()
	}
}

// valueStart begins the value whose first byte is c, at p[at] of the
// current input.
func (s *scanner) valueStart(c byte, at int) {
	t := s.classify()
	d := &s.doc
	// A string field that occurs again starts over, so its last occurrence
	// wins; counts keep the largest value (endNumber).
	switch t.kind {
	case tgModel:
		d.model[t.root].reset()
	case tgTier:
		d.tier[t.root].reset()
		d.tierSeen |= 1 << t.root
	case tgSpeed:
		if d.tierSeen&(1<<t.root) == 0 {
			d.tier[t.root].reset()
		}
	case tgTraffic:
		d.traffic, d.trafficSaid = pricecatalog.Standard, true // the last one counts
	case tgLatency:
		d.latency = pricecatalog.Standard // the last one counts
	case tgGeo:
		d.geoPinned = false // the last one counts
	case tgByok:
		// Any true counts (the dearer reading: billedCost adds the upstream cost). The
		// literal's grammar is checked as it is read; a malformed one ends the document.
		d.byok = d.byok || c == 't'
	case tgType:
		d.typ.reset()
	case tgObject:
		d.object.reset()
	case tgUsage:
		if c == '{' {
			d.usage[t.root].obj = true
		}
	case tgRoot:
		d.model[t.root].reset()
	case tgModalities:
		if c == '[' {
			// The list says which modalities were counted: no AUDIO entry is no audio.
			d.setListAudio(t.root, s.keys[s.depth-1], 0) // the list's key
		}
	case tgModEntry:
		s.entryMatch, s.entryCount = false, 0
	case tgIterEntry:
		// Billed apart until its type says it is not (see docFields.usage).
		s.iterApart, s.iterAdvisor = true, false
	case tgOutputItem:
		s.itemWeb, s.itemPage = false, false
	case tgMapsSource:
		// A source is an object: its contents (uri, title, placeId) do not matter.
		d.mapsGrounded = d.mapsGrounded || c == '{'
	}
	switch {
	case c == '{' || c == '[':
		if t.kind == tgNone && !s.raw && s.textTarget() == txRaw {
			s.raw, s.rawDepth, s.rawFrom, s.rawN = true, s.depth, at, 0
		}
		s.push(c == '{')
	case c == '"':
		s.str = nil
		switch t.kind {
		case tgModel:
			s.str = &d.model[t.root]
		case tgTier:
			s.str = &d.tier[t.root]
		case tgSpeed:
			if d.tierSeen&(1<<t.root) == 0 {
				s.str = &d.tier[t.root]
			}
		case tgType:
			s.str = &d.typ
		case tgObject:
			s.str = &d.object
		case tgFinish:
			d.finished = true
		case tgItemType:
			// An object key is never read inside a string, so the key buffer is
			// free to take this short value.
			s.keyCap.reset()
			s.str = &s.keyCap
		case tgSearchQuery:
			d.countSearch() // the string is a query: its text does not matter
		case tgContainer:
			d.container.reset()
			s.str = &d.container
		case tgModality, tgTraffic, tgLatency, tgGeo, tgTTL, tgIterType, tgBlockType, tgGroundingType, tgEventItemType, tgActionType:
			// A short value compared on its end (endString), in the key buffer too.
			s.keyCap.reset()
			s.str, s.capFor = &s.keyCap, keyCapFor(t.kind)
		case tgNone:
			if tx := s.textTarget(); tx == txText || tx == txDelta || tx == txAudio {
				s.txt = tx
			}
		}
		s.state = stStr
	case c == '-':
		s.startNumber(t, 0, false, c)
		s.state = stNumMinus
	case c == '0':
		s.startNumber(t, 0, true, c)
		s.state = stNumZero
	case '1' <= c && c <= '9':
		s.startNumber(t, int64(c-'0'), true, c)
		s.state = stNumInt
	case c == 't':
		s.lit, s.litPos, s.state = 0, 1, stLit
	case c == 'f':
		s.lit, s.litPos, s.state = 1, 1, stLit
	case c == 'n':
		s.lit, s.litPos, s.state = 2, 1, stLit
	default:
		s.fail()
	}
}

// startNumber begins a number whose first byte is c (its value so far first).
func (s *scanner) startNumber(t target, first int64, ok bool, c byte) {
	s.num, s.numOK, s.numTok = first, ok, t
	s.numMs, s.numFrac, s.numUp = t.kind == tgTok && t.tok == tokAudioSeconds, 0, false
	if t.kind == tgCost {
		// No string is being read: the key buffer is free to take the number's text.
		s.keyCap.reset()
		s.keyCap.addByte(c)
	}
}

// numByte advances the number grammar by c, reporting whether c continues
// the number.
func (s *scanner) numByte(c byte) bool {
	digit := '0' <= c && c <= '9'
	exp := c == 'e' || c == 'E'
	switch s.state {
	case stNumMinus:
		switch {
		case c == '0':
			s.state = stNumZero
		case digit:
			s.state = stNumInt
		default:
			return false
		}
	case stNumZero, stNumInt:
		switch {
		case digit && s.state == stNumInt:
			if s.numOK {
				d := int64(c - '0')
				if s.num > (math.MaxInt64-d)/10 {
					s.numOK = false
				} else {
					s.num = s.num*10 + d
				}
			}
		case c == '.':
			// A count has no fraction; a duration in seconds may (ms mode).
			s.state, s.numOK = stNumDot, s.numOK && s.numMs
		case exp:
			s.state, s.numOK = stNumE, false
		default:
			return false
		}
	case stNumDot:
		if !digit {
			return false
		}
		s.state = stNumFrac
		s.msByte(c)
	case stNumFrac:
		switch {
		case digit:
			s.msByte(c)
		case exp:
			// An exponent is not read, even in ms mode: no provider writes a
			// duration with one, and reading 9.5e-1 exactly would take
			// parseUSDCeil's shifting of digits. The number reports nothing.
			s.state, s.numOK = stNumE, false
		default:
			return false
		}
	case stNumE:
		switch {
		case c == '+' || c == '-':
			s.state = stNumESign
		case digit:
			s.state = stNumExp
		default:
			return false
		}
	case stNumESign, stNumExp:
		if !digit {
			return false
		}
		s.state = stNumExp
	}
	return true
}

// passesDigits tells whether a digit would leave the number being read as it is: in its
// integer part, fraction or exponent, once nothing of its value is read any more
// (numOK false: not a count, or one past reading; a cost's text is kept whole).
func (s *scanner) passesDigits() bool {
	return !s.numOK && s.numTok.kind != tgCost && (s.state == stNumInt || s.state == stNumFrac || s.state == stNumExp)
}

func (s *scanner) numTerminal() bool {
	switch s.state {
	case stNumZero, stNumInt, stNumFrac, stNumExp:
		return true
	}
	return false
}

// msByte takes in a digit after the point of a number in ms mode (numOK is
// only still true in ms mode there): the first three are milliseconds, the
// rest only say whether to round up.
func (s *scanner) msByte(c byte) {
	if !s.numOK {
		return
	}
	d := int64(c - '0')
	switch {
	case s.numFrac == 3:
		s.numUp = s.numUp || d != 0
	case s.num > (math.MaxInt64-d)/10:
		s.numOK = false
	default:
		s.num = s.num*10 + d
		s.numFrac++
	}
}

func (s *scanner) endNumber() bool {
	if t := s.numTok; t.kind == tgTok && s.numOK {
		v, ok := s.num, true
		if s.numMs {
			v, ok = millis(v, s.numFrac, s.numUp)
		}
		if ok {
			s.doc.usage[t.root].setMax(int(t.tok), v)
		}
	} else if t.kind == tgCost {
		// A decimal amount of USD, maybe with a fraction or an exponent: read exactly
		// from its text (parseUSDCeil), a longer one than keyCap holds not at all.
		read := costOf
		if t.tok == costInTicks {
			read = ticksOf
		}
		v, ok := read(&s.keyCap)
		switch {
		case !ok:
		case t.tok == costUpstream:
			keepLargest(&s.doc.upstream, &s.doc.hasUpstream, v)
		default:
			keepLargest(&s.doc.cost, &s.doc.hasCost, v)
		}
	} else if t.kind == tgConverseTok && s.numOK {
		s.doc.usage[t.root].setMax(int(t.tok), s.num)
		s.doc.converse = true
	} else if t.kind == tgModCount && s.numOK {
		s.entryCount = s.num
	} else if t.kind == tgGuard && s.numOK {
		s.doc.addGuard(t.tok, s.num)
	} else if t.kind == tgIterTok && s.numOK && s.iterApart {
		s.doc.usage[rootIterations].add(iterSlot(int(t.tok), s.iterAdvisor), s.num)
	}
	s.numTok = target{}
	return s.endValue()
}

// millis is the milliseconds of a number of seconds read in ms mode: its
// digits down to the frac-th after the point, rounded up when a digit below
// them was not 0. It is not reported (false) when it overflows int64, like an
// overflowing count.
func millis(v int64, frac uint8, up bool) (int64, bool) {
	for ; frac < 3; frac++ {
		if v > math.MaxInt64/10 {
			return 0, false
		}
		v *= 10
	}
	if up {
		if v == math.MaxInt64 {
			return 0, false
		}
		v++
	}
	return v, true
}

// classify names the value about to start from the keys above it.
func (s *scanner) classify() target {
	k := &s.keys
	if s.containerTarget() {
		return target{kind: tgContainer}
	}
	if s.depth >= 7 { // the depth test here: most values are shallower, and need no call
		if g, ok := s.guardrailTarget(); ok {
			return target{kind: tgGuard, tok: g}
		}
	}
	switch s.depth {
	case 1:
		switch k[0] {
		case kModel:
			return target{kind: tgModel, root: rootTop}
		case kServiceTier:
			return target{kind: tgTier, root: rootTop}
		case kType:
			return target{kind: tgType}
		case kObject:
			return target{kind: tgObject}
		case kUsage:
			return target{kind: tgUsage, root: rootTop}
		case kMessage:
			return target{kind: tgRoot, root: rootMessage}
		case kResponse:
			return target{kind: tgRoot, root: rootResponse}
		case kItem:
			return target{kind: tgOutputItem}
		}
	case 2:
		if k[0] == kOutput && k[1] == kArr {
			return target{kind: tgOutputItem}
		}
		if k[0] == kPromptFeedback && k[1] == kBlockReason {
			return target{kind: tgFinish} // a blocked prompt's answer: no candidate to come
		}
		if k[0] == kItem && k[1] == kType {
			return target{kind: tgEventItemType}
		}
		if k[0] == kUsage {
			return usageMember(rootTop, k[1])
		}
		if k[0] == kXGroq && k[1] == kUsage {
			return target{kind: tgUsage, root: rootTop}
		}
		if k[0] == kBlock && k[1] == kType {
			return target{kind: tgBlockType}
		}
		if k[0] == kServiceTierCamel && k[1] == kType {
			// Bedrock Converse's serviceTier.type (its answer's, its stream's metadata
			// event's): kept as Gemini's priority is.
			return target{kind: tgTraffic, root: rootTop}
		}
		if k[0] == kPerformance && k[1] == kLatency {
			// Bedrock Converse's performanceConfig.latency (its answer's, its stream's
			// metadata event's): the latency it served the request at.
			return target{kind: tgLatency, root: rootTop}
		}
		if r, ok := rootOf(k[0]); ok {
			switch k[1] {
			case kModel:
				return target{kind: tgModel, root: r}
			case kServiceTier:
				return target{kind: tgTier, root: r}
			case kUsage:
				return target{kind: tgUsage, root: r}
			}
		}
	case 3:
		if k[0] == kBlock && k[1] == kContent && k[2] == kType {
			// An Anthropic content_block_start's block's content, when it is one object:
			// a web_search_tool_result's error (web_search_tool_result_error).
			return target{kind: tgBlockType}
		}
		if k[0] == kOutputs && k[1] == kArr && k[2] == kModel {
			// Mistral's Conversations answer names its model in its entries alone
			// (outputs[].model): a continuation's or an agent's request names none.
			return target{kind: tgModel, root: rootTop}
		}
		if k[0] == kUsage && k[2] == kTextUnits {
			// InvokeGuardrailChecks' usage: each check's text units.
			switch k[1] {
			case kContentFilter:
				return target{kind: tgGuard, tok: guardChecksContent}
			case kPromptAttack:
				return target{kind: tgGuard, tok: guardChecksPrompt}
			case kSensitiveInformation:
				return target{kind: tgGuard, tok: guardChecksSensitive}
			}
		}
		if k[0] == kUsage {
			if t, ok := detailTok(k[1], k[2]); ok {
				return target{kind: tgTok, root: rootTop, tok: t}
			}
			if (isModalities(k[1]) || k[1] == kCacheDetails || k[1] == kGroundingTools) && k[2] == kArr {
				return target{kind: tgModEntry, root: rootTop}
			}
			if k[1] == kIterations && k[2] == kArr {
				return target{kind: tgIterEntry}
			}
			if k[1] == kCost && k[2] == kTotalCost {
				// Perplexity's usage.cost is an object of the cost's parts (tokens, its
				// request fee): its total_cost is the usage's cost, as OpenRouter's number is.
				return target{kind: tgCost, root: rootTop}
			}
			if k[1] == kCostDetails && k[2] == kUpstreamCost {
				return target{kind: tgCost, root: rootTop, tok: costUpstream}
			}
		} else if k[0] == kCandidates && k[1] == kArr && k[2] == kFinishReason {
			return target{kind: tgFinish}
		} else if k[0] == kOutput && k[1] == kArr && k[2] == kType {
			return target{kind: tgItemType}
		} else if k[0] == kResponse && k[1] == kOutput && k[2] == kArr {
			return target{kind: tgOutputItem}
		} else if k[0] == kItem && k[1] == kAction && k[2] == kType {
			return target{kind: tgActionType}
		} else if r, ok := rootOf(k[0]); ok && k[1] == kUsage {
			return usageMember(r, k[2])
		} else if k[0] == kXGroq && k[1] == kUsage {
			return groqTarget(k[2])
		} else if k[0] == kToolUsage && k[1] == kImageGen && !s.multi {
			// A Responses object's (a JSON body's) tool_usage.
			return imageToolTarget(k[2])
		}
	case 4:
		if k[0] == kResponse && k[1] == kOutput && k[2] == kArr && k[3] == kType {
			return target{kind: tgItemType}
		}
		if k[0] == kOutput && k[1] == kArr && k[2] == kAction && k[3] == kType {
			return target{kind: tgActionType}
		}
		if k[0] == kXGroq && k[1] == kUsage {
			return groqDetail(k[2], k[3])
		}
		if r, ok := rootOf(k[0]); ok && k[1] == kUsage {
			if t, ok := detailTok(k[2], k[3]); ok {
				return target{kind: tgTok, root: r, tok: t}
			}
			if k[2] == kCostDetails && k[3] == kUpstreamCost {
				// As usage.cost is read in a root's usage too (OpenRouter's Responses API).
				return target{kind: tgCost, root: r, tok: costUpstream}
			}
		}
		if k[0] == kResponse && k[1] == kToolUsage && k[2] == kImageGen && s.multi {
			// A Responses event's (a stream's, a WebSocket message's) response.tool_usage.
			return imageToolTarget(k[3])
		}
		if k[0] == kUsage && k[2] == kArr {
			if t := listEntryMember(rootTop, k[1], k[3]); t.kind != tgNone {
				return t
			}
		}
		if k[0] == kResponse && k[1] == kUsage && k[3] == kArr && (isModalities(k[2]) || k[2] == kGroundingTools) {
			// An entry of a list of the Interactions API's interaction.usage.
			return target{kind: tgModEntry, root: rootResponse}
		}
		if k[0] == kUsage && k[1] == kIterations && k[2] == kArr {
			return iterationMember(k[3])
		}
		if k[0] == kMessage && k[1] == kUsage && k[2] == kIterations && k[3] == kArr {
			return target{kind: tgIterEntry}
		}
		if k[0] == kUsage && k[1] == kCacheDetails && k[2] == kArr {
			switch k[3] {
			case kTTL:
				return target{kind: tgTTL, root: rootTop}
			case kConverseInput:
				return target{kind: tgModCount, root: rootTop}
			}
		}
	case 5:
		if k[0] == kMessage && k[1] == kUsage && k[2] == kIterations && k[3] == kArr {
			return iterationMember(k[4])
		}
		if k[0] == kUsage && k[1] == kIterations && k[2] == kArr && k[3] == kCacheCreation && k[4] == kEphemeral1h {
			return iterationHour
		}
		if k[0] == kResponse && k[1] == kOutput && k[2] == kArr && k[3] == kAction && k[4] == kType {
			return target{kind: tgActionType}
		}
		if k[0] == kResponse && k[1] == kUsage && k[3] == kArr {
			return listEntryMember(rootResponse, k[2], k[4])
		}
		if k[0] == kCandidates && k[1] == kArr && k[2] == kGrounding && k[3] == kSearchQuery && k[4] == kArr {
			return target{kind: tgSearchQuery}
		}
	case 6:
		if k[0] == kMessage && k[1] == kUsage && k[2] == kIterations && k[3] == kArr && k[4] == kCacheCreation && k[5] == kEphemeral1h {
			return iterationHour
		}
		if k[0] == kCandidates && k[1] == kArr && k[2] == kGrounding && k[3] == kChunks && k[4] == kArr && k[5] == kMaps {
			return target{kind: tgMapsSource}
		}
	}
	return target{}
}

// containerTarget: the value about to start is the id of a container a code tool ran
// in, which its provider bills by the time it lives: an OpenAI Responses output item's
// container_id (a code_interpreter_call's) or environment.container_id (a shell_call's),
// the item being an element of a Responses object's output[], of an event's
// response.output[], or an output item event's item; Anthropic's container.id (a
// message's), message.container.id (message_start's) or delta.container.id
// (message_delta's). Only these paths: a tool's arguments may name anything. Where the
// document's shape is not one of theirs, the ids are not read (noteContainers).
func (s *scanner) containerTarget() bool {
	d := s.depth
	if d < 2 || d > 5 {
		return false
	}
	k := s.keys[:d]
	switch last := k[d-1]; {
	case last == kID:
		return d == 2 && k[0] == kContainer || d == 3 && (k[0] == kMessage || k[0] == kDelta) && k[1] == kContainer
	case last != kContainerID:
		return false
	}
	item := k[:d-1] // the path of the item's member that holds it
	if item[len(item)-1] == kEnvironment {
		item = item[:len(item)-1]
	}
	switch len(item) {
	case 1:
		return item[0] == kItem
	case 2:
		return item[0] == kOutput && item[1] == kArr
	case 3:
		return item[0] == kResponse && item[1] == kOutput && item[2] == kArr
	}
	return false
}

// guardrailTarget: the value about to start is a billed count (guard*) of the usage of an
// Amazon Bedrock guardrail's assessment, at the paths its trace puts them (the request
// asked for it: trace "enabled", requestbody.WithGuardrailTrace):
//
//	trace.guardrail.inputAssessment.<guardrail>.invocationMetrics.usage.<count>        (Converse, ConverseStream's metadata event)
//	trace.guardrail.outputAssessments.<guardrail>[].invocationMetrics.usage.<count>
//	amazon-bedrock-trace.guardrail.input.<guardrail>.invocationMetrics.usage.<count>   (InvokeModel, its stream's last chunk)
//	amazon-bedrock-trace.guardrail.outputs[].<guardrail>.invocationMetrics.usage.<count>
//
// The guardrail's id may be any key.
func (s *scanner) guardrailTarget() (uint8, bool) {
	d := s.depth
	if d != 7 && d != 8 {
		return 0, false
	}
	k := s.keys[:d]
	g := k[d-1] - kGuard0
	if k[d-1] < kGuard0 || g >= nGuard || k[d-2] != kUsage || k[d-3] != kInvocationMetrics || k[1] != kGuardrail {
		return 0, false
	}
	switch {
	case k[0] == kTrace && d == 7:
		return g, k[2] == kInputAssessment
	case k[0] == kTrace:
		return g, k[2] == kOutputAssessments && k[4] == kArr
	case k[0] == kBedrockTrace && d == 7:
		return g, k[2] == kInput
	case k[0] == kBedrockTrace:
		return g, k[2] == kOutputs && k[3] == kArr
	}
	return 0, false
}

// imageToolTarget is the target of key k of an OpenAI Responses document's
// tool_usage.image_gen, the usage of its image generation tool: its input_tokens and
// cached_tokens (the cached part of the input), in rootImageTool. Nothing else of
// tool_usage is read. classify reads it where the Response is: at the top level of a JSON
// body, in the response of a stream's event (as the response's usage is read, and no
// other document's).
func imageToolTarget(k uint8) target {
	switch k {
	case kTok0 + tokInput:
		return target{kind: tgTok, root: rootImageTool, tok: tokImageToolInput}
	case kCachedTokens:
		return target{kind: tgTok, root: rootImageTool, tok: tokImageToolCached}
	}
	return target{}
}

// iterationMember is the target of key k of an entry of Anthropic's usage.iterations[]
// (the top level's: a message, message_delta; or message_start's message's).
func iterationMember(k uint8) target {
	switch k {
	case kType:
		return target{kind: tgIterType}
	case kTok0 + tokInput, kTok0 + tokOutput, kTok0 + tokCacheRead, kTok0 + tokCacheCreation:
		return target{kind: tgIterTok, tok: k - kTok0}
	}
	return target{}
}

// iterationHour is the target of an entry's cache_creation.ephemeral_1h_input_tokens in
// Anthropic's usage.iterations[]: the part of the entry's cache writes made for an hour
// (a compaction's, an advisor's whose tool caches for an hour), dearer than the
// five-minute ones, as the top level's is.
var iterationHour = target{kind: tgIterTok, tok: tokCacheWritePart}

// listEntryMember is the target of key k of an entry of a list of root's Gemini usage
// (list: the list's key): a *TokensDetails entry's modality and count, a
// grounding_tool_count entry's type and count.
func listEntryMember(root, list, k uint8) target {
	switch {
	case isModalities(list) && k == kModality:
		return target{kind: tgModality, root: root}
	case isModalities(list) && k == kTokenCount:
		return target{kind: tgModCount, root: root}
	case list == kGroundingTools && k == kType:
		return target{kind: tgGroundingType, root: root}
	case list == kGroundingTools && k == kGroundingCount:
		return target{kind: tgModCount, root: root}
	}
	return target{}
}

func usageMember(root, k uint8) target {
	if k >= kTok0 && k < kTok0+tokCachedPrompt {
		return target{kind: tgTok, root: root, tok: k - kTok0}
	}
	if k == kToolUsePrompt && root != rootMessage {
		// Gemini's usage: generateContent's at the top level, the Interactions API's there
		// and in its lifecycle events' interaction (rootResponse); never in Anthropic's
		// message, whose cache writes share the slot.
		return target{kind: tgTok, root: root, tok: tokGeminiToolUse}
	}
	if k >= kGuard0 && k < kGuard0+nGuard && root == rootTop {
		// Amazon Bedrock's ApplyGuardrail (a guardrail called on its own): its top-level
		// usage is its guardrail's (GuardrailUsage), the assessments' own not read.
		return target{kind: tgGuard, tok: k - kGuard0}
	}
	if k == kPages && root == rootTop {
		// Mistral's OCR answer is one JSON document, its usage_info at the top level.
		return target{kind: tgTok, root: root, tok: tokPages}
	}
	if k == kCacheHit {
		return target{kind: tgTok, root: root, tok: tokCacheHit}
	}
	if isDetail(k) {
		return target{kind: tgDetail, root: root}
	}
	if t, ok := converseTok(k); ok {
		return target{kind: tgConverseTok, root: root, tok: t}
	}
	if k == kCost {
		return target{kind: tgCost, root: root}
	}
	if k == kCostTicks {
		return target{kind: tgCost, root: root, tok: costInTicks}
	}
	if k == kIsByok {
		return target{kind: tgByok, root: root}
	}
	if k == kSpeed {
		return target{kind: tgSpeed, root: root}
	}
	if k == kInferenceGeo {
		return target{kind: tgGeo, root: root}
	}
	if (k == kTrafficType || k == kServiceTierCamel) && root == rootTop {
		// Gemini's usage is at the top level only.
		return target{kind: tgTraffic, root: root}
	}
	if isModalities(k) && root != rootMessage {
		// Gemini's usage, as kToolUsePrompt's.
		return target{kind: tgModalities, root: root}
	}
	return target{}
}

// groqTarget is what the member k of Groq's x_groq.usage is, and groqDetail what the
// member inner of its detail object k is. It is an OpenAI chat usage, read as one at the
// top level: its counts (prompt_tokens, completion_tokens, total_tokens) and its
// prompt_tokens_details.cached_tokens, the largest of each with the top-level usage's
// (the same counts, when the request asked for them). Nothing else of it is read.
func groqTarget(k uint8) target {
	if k == kTok0+tokPrompt || k == kTok0+tokCompletion || k == kTok0+tokTotal {
		return target{kind: tgTok, root: rootTop, tok: k - kTok0}
	}
	return target{}
}

func groqDetail(k, inner uint8) target {
	if k == kPromptDetails && inner == kCachedTokens {
		return target{kind: tgTok, root: rootTop, tok: tokCachedPrompt}
	}
	return target{}
}

func rootOf(k uint8) (uint8, bool) {
	switch k {
	case kMessage:
		return rootMessage, true
	case kResponse:
		return rootResponse, true
	}
	return 0, false
}

// detailTok names the count at usage.detail.inner, where a detail object of a usage
// holds one we read.
func detailTok(detail, inner uint8) (tok uint8, ok bool) {
	switch {
	case detail == kPromptDetails && inner == kCachedTokens:
		return tokCachedPrompt, true
	case detail == kPromptDetails && inner == kAudioTokens:
		return tokAudioIn, true
	case detail == kCompletionDetails && inner == kAudioTokens:
		return tokAudioOut, true
	case detail == kInputDetails && inner == kCachedTokens:
		return tokCachedInput, true
	case (detail == kPromptDetails || detail == kInputDetails) && inner == kCacheWriteTokens:
		return tokCacheWritePart, true
	case detail == kInputTokenDetails && inner == kAudioTokens:
		return tokAudioIn, true
	case detail == kCacheCreation && inner == kEphemeral1h:
		return tokCacheWritePart, true
	case detail == kServerToolUse && inner == kWebSearches:
		return tokWebSearches, true
	}
	return 0, false
}

// isDetail: k is the key of a usage's detail object that holds a count we read.
func isDetail(k uint8) bool {
	switch k {
	case kPromptDetails, kCompletionDetails, kInputDetails, kInputTokenDetails, kCacheCreation, kServerToolUse:
		return true
	}
	return false
}

// converseTok names the Anthropic count a Bedrock Converse usage key is.
func converseTok(k uint8) (tok uint8, ok bool) {
	switch k {
	case kConverseInput:
		return tokInput, true
	case kConverseOutput:
		return tokOutput, true
	case kConverseCacheRead:
		return tokCacheRead, true
	case kConverseCacheWrite:
		return tokCacheCreation, true
	}
	return 0, false
}

// isModalities: k is the key of a Gemini *TokensDetails list, whose AUDIO entry
// reports an audio count (setListAudio).
func isModalities(k uint8) bool {
	return k == kPromptModalities || k == kOutputModalities || k == kCacheModalities
}
