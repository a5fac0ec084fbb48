package responseusage

import (
	"errors"
	"math"
	"net/http"
	"strings"

	"github.com/tollgate-dev/tollgate/enforcer/audiolength"
	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
)

// Format names the shape a response was recognised as (Usage.Format).
const (
	FormatOpenAIChat          = "openai-chat"
	FormatOpenAIResponses     = "openai-responses"
	FormatAnthropicMessages   = "anthropic-messages"
	FormatOpenAIEmbeddings    = "openai-embeddings"
	FormatGemini              = "gemini"
	FormatGeminiSSE           = "gemini-sse"
	FormatOpenAIChatSSE       = "openai-chat-sse"
	FormatOpenAIResponsesSSE  = "openai-responses-sse"
	FormatAnthropicSSE        = "anthropic-sse"
	FormatUnsupportedEncoding = "unsupported-encoding"

	// FormatOpenAIAudioDuration is OpenAI's transcription or translation JSON
	// billed by the duration of its input audio (whisper-1): usage
	// {"type":"duration","seconds":N}, read into Usage.AudioInputMillis. It is
	// never streamed.
	FormatOpenAIAudioDuration = "openai-audio-duration"
	// FormatOpenAIConversation is OpenAI's conversation object (object
	// "conversation", without usage), the answer of its conversations' create and
	// update (POST /v1/conversations, /v1/conversations/{id}): they store items and
	// generate nothing, and OpenAI bills nothing for them. It reports no count and is
	// Complete when the body was one well-formed JSON value; the settlement takes it
	// for an unbilled request's answer (inflight.FromResponse). Mistral's start and
	// continuation of a conversation, at the same paths, answer
	// "conversation.response" with their usage, read as openai-chat.
	FormatOpenAIConversation = "openai-conversation"
	// FormatOpenAITranscriptionSSE is OpenAI's streamed transcription
	// (gpt-4o-transcribe and the like with stream=true): transcript.text.delta
	// events, then transcript.text.done with the token usage.
	FormatOpenAITranscriptionSSE = "openai-transcription-sse"
	// FormatOpenAISpeechSSE is OpenAI's speech in SSE (gpt-4o-mini-tts with
	// stream_format "sse"): speech.audio.delta events of base64 audio, then
	// speech.audio.done with the token usage (its audio output counted in
	// output_tokens). A speech answer in audio reports nothing.
	FormatOpenAISpeechSSE = "openai-speech-sse"
	// FormatOpenAIImageSSE is OpenAI's streamed image (gpt-image-1 with
	// stream=true): image_generation.partial_image events (image_edit.* for an edit),
	// then image_generation.completed with the token usage. A non-streamed image's
	// JSON reports the same usage and is read as FormatOpenAIResponses.
	FormatOpenAIImageSSE = "openai-image-sse"
	// FormatGeminiJSONStream is Gemini's streamGenerateContent without alt=sse: a JSON
	// array of the chunks its event stream would carry, streamed element by element, and
	// read as that event stream is (FormatGeminiSSE).
	FormatGeminiJSONStream = "gemini-json-stream"
	// FormatAudio is an answer in audio (an audio/* media type: OpenAI's speech in
	// its default shape), which reports no usage: the audio's duration is read from
	// its container's headers (package audiolength) into Usage.AudioOutputMillis.
	FormatAudio = "audio"
	// FormatBedrockConverse is Amazon Bedrock's Converse JSON, and
	// FormatBedrockConverseStream its ConverseStream (AWS's binary event stream);
	// FormatBedrockInvoke an InvokeModel answer read from its token count headers alone,
	// FormatBedrockInvokeStream an InvokeModelWithResponseStream answer read from its
	// last chunk's amazon-bedrock-invocationMetrics alone (bedrock.go).
	FormatBedrockConverse       = "bedrock-converse"
	FormatBedrockConverseStream = "bedrock-converse-stream"
	FormatBedrockInvoke         = "bedrock-invoke"
	FormatBedrockInvokeStream   = "bedrock-invoke-stream"
	// FormatMistralOCR is Mistral's OCR answer (POST /v1/ocr): the pages read, in
	// usage_info.pages_processed (Usage.OCRPages), billed by the page. It is never
	// streamed.
	FormatMistralOCR = "mistral-ocr"
)

// Response headers (lower-cased) through which an upstream reports its cost.
const (
	// HeaderCostMicroUSD holds a non-negative integer number of micro-USD.
	HeaderCostMicroUSD = "x-upstream-cost-micro-usd"
	// HeaderCostUSD holds a non-negative decimal amount of USD.
	HeaderCostUSD = "x-upstream-cost-usd"
	// HeaderLiteLLMCost is LiteLLM proxy's: the request's cost in USD, a decimal.
	HeaderLiteLLMCost = "x-litellm-response-cost"
)

// HeaderGeminiServiceTier is the response header through which the Gemini API says the
// tier it served a request at ("priority" or "standard": its priority inference, asked by
// a request's "service_tier", falls back to standard when capacity is short), as its
// usageMetadata.serviceTier does; a body read no further (an unsupported encoding)
// keeps the header's say.
const HeaderGeminiServiceTier = "x-gemini-service-tier"

// HeaderBedrockServiceTier is the response header through which Amazon Bedrock's
// InvokeModel (and its streamed form) says the tier it served a request at ("priority",
// "default", "flex", "reserved": its priority tier is the fast one, the others cost no
// more than standard), as a Converse answer's serviceTier.type does.
const HeaderBedrockServiceTier = "x-amzn-bedrock-service-tier"

// HeaderBedrockLatency is the response header through which Amazon Bedrock's
// InvokeModel (and its streamed form) says the latency it served a request at
// ("optimized": its latency-optimized inference, pricecatalog.LatencyNames; "standard",
// also when the model's quota of optimized requests was spent), as a Converse answer's
// performanceConfig.latency does.
const HeaderBedrockLatency = "x-amzn-bedrock-performanceconfig-latency"

// Default limits, used for the zero fields of Limits.
const (
	DefaultMaxModelBytes = 256
	DefaultMaxDepth      = 10000
)

// ErrFinished is returned by Write after Finish.
var ErrFinished = errors.New("usage: write after finish")

// Usage is what a response reported about its own cost.
type Usage struct {
	// Model is the model the upstream says answered ("" when not reported).
	Model string
	// InputTokens counts all input tokens, cached ones included.
	InputTokens int64
	// OutputTokens counts output tokens (reasoning tokens included).
	OutputTokens int64
	// CachedInputTokens is the part of InputTokens read from a prompt cache.
	CachedInputTokens int64
	// CacheCreationInputTokens is the part of InputTokens written to a prompt
	// cache (Anthropic's cache_creation_input_tokens; 0 elsewhere).
	CacheCreationInputTokens int64
	// CacheCreation1hInputTokens is the part of CacheCreationInputTokens written to
	// Anthropic's one-hour cache (cache_creation.ephemeral_1h_input_tokens, the top
	// level's and a compaction iteration's), dearer than the default five-minute one.
	CacheCreation1hInputTokens int64
	// WebSearchRequests counts the web searches Anthropic's server tool made for the
	// request (usage.server_tool_use.web_search_requests, the largest reported; of a
	// stream cut before its last message_delta, at least its web_search_tool_result
	// blocks that are no error), which it bills apiece on top of the tokens; OpenAI's web search tool's search actions
	// (its web_search_call items but those that opened a page or searched within one);
	// Gemini's grounding search queries; 0 elsewhere.
	WebSearchRequests int64
	// FileSearchCalls counts the calls of OpenAI's file search tool a Responses answer
	// lists (output items of type file_search_call; a stream's
	// response.file_search_call.completed events, whichever counts more), which it
	// bills apiece and its usage does not count; 0 elsewhere.
	FileSearchCalls int64
	// ImageGenerationCalls counts the calls of OpenAI's image generation tool a
	// Responses answer lists (output items of type image_generation_call; a stream's
	// response.image_generation_call.in_progress events, whichever counts more), each
	// an image billed apart from the usage, as its image model's output
	// (requestbody.ImageToolCall says how many tokens).
	ImageGenerationCalls int64
	// ImageToolInputTokens is the input of the image model OpenAI's image generation tool
	// ran (a Responses answer's tool_usage.image_gen.input_tokens: the prompt the
	// response's model wrote for it and any image it edits, text and image tokens, its
	// cache reads included), billed at the image model's input price apart from the
	// response's usage; ImageToolCachedInputTokens is its cached part
	// (tool_usage.image_gen.cached_tokens), at most ImageToolInputTokens. Each is the
	// largest reported; 0 for every other shape, and when the answer did not report them.
	ImageToolInputTokens, ImageToolCachedInputTokens int64
	// MapsGroundedPrompts is 1 when a Gemini answer was grounded with Google Maps (a
	// candidate's groundingMetadata.groundingChunks[] held a maps source, in any chunk of
	// a stream), which Google bills per grounded prompt, apart from the usage; else 0.
	MapsGroundedPrompts int64
	// AdvisorResults counts the advisor_tool_result blocks an Anthropic stream began (its
	// content_block_start events): the advisor tool's consultations done, each billed.
	// Their counts come only in the stream's last message_delta (AdvisorInputTokens...);
	// a stream cut before it has them estimated from this count (package inflight).
	AdvisorResults int64
	// AdvisorInputTokens, AdvisorOutputTokens, AdvisorCachedInputTokens and
	// AdvisorCacheCreationInputTokens are the sums of the advisor_message entries of
	// Anthropic's usage.iterations[] (its advisor tool's sub-inferences), left out of
	// the other counts: they are billed at the advisor model's prices (the request's
	// tool names it). The input includes the cache reads and writes, which the other two
	// are parts of. 0 elsewhere. AdvisorCacheCreation1hInputTokens is the part of the
	// advisor's writes made for an hour (its entries' cache_creation.
	// ephemeral_1h_input_tokens: a tool whose caching's ttl is "1h"), at most them.
	AdvisorInputTokens, AdvisorOutputTokens                   int64
	AdvisorCachedInputTokens, AdvisorCacheCreationInputTokens int64
	AdvisorCacheCreation1hInputTokens                         int64
	// AudioInputTokens and AudioOutputTokens are the audio parts of InputTokens and
	// OutputTokens, which some models price above text (pricecatalog.Price.
	// AudioInputPerMillion): OpenAI's prompt_tokens_details.audio_tokens and
	// completion_tokens_details.audio_tokens (chat), input_token_details.audio_tokens (a
	// transcription), Gemini's AUDIO entries of promptTokensDetails and
	// candidatesTokensDetails. AudioInputReported and AudioOutputReported say whether the
	// response said (a Gemini list without an AUDIO entry says 0); when not, the split
	// is unknown and settlement charges such a model's tokens at the dearer price.
	AudioInputTokens, AudioOutputTokens int64
	// CachedAudioInputTokens is the audio part of CachedInputTokens (and so of
	// AudioInputTokens too, when that is reported), which some models price above cached
	// text (pricecatalog.Price.CachedAudioInputPerMillion): Gemini's AUDIO entry of
	// cacheTokensDetails, at most CachedInputTokens. CachedAudioInputReported says whether
	// the response said (a list without an AUDIO entry says 0; no other shape says);
	// when not, settlement charges such a model's cached tokens at the dearer cached price.
	CachedAudioInputTokens int64
	// AudioInputMillis is the duration of input audio the response reported, in
	// milliseconds: OpenAI's usage {"type":"duration","seconds":N} of a
	// non-streamed transcription or translation by a model billed per minute of
	// audio (whisper-1; Format FormatOpenAIAudioDuration). A fraction of a
	// millisecond rounds up. 0 for every other shape, whose usage is in tokens.
	AudioInputMillis int64
	// AudioOutputMillis is the duration of the audio an answer in audio carried
	// (Format FormatAudio), in milliseconds rounded up; 0 when its container is not one
	// package audiolength reads. Of a streamed chat answer in audio (FormatOpenAIChatSSE:
	// choices[].delta.audio.data, base64 PCM16 at 24 kHz), the duration its chunks
	// carried, from which an answer cut before its usage is estimated.
	AudioOutputMillis int64
	// OCRPages is the pages an OCR model read (Mistral's usage_info.pages_processed;
	// Format FormatMistralOCR), billed apiece; 0 for every other shape.
	OCRPages int64
	// ContainerIDs are the containers the response says its code tools ran in (OpenAI
	// Responses: a code_interpreter_call's container_id, a shell_call's
	// environment.container_id; Anthropic: the message's container.id), distinct, at most
	// four, in the order first named; nil for every other shape. Their providers bill
	// each by the time it lives (pricecatalog.Container).
	ContainerIDs []string
	// Guardrail is what the request's Amazon Bedrock guardrails assessed, by billed
	// policy, as their traces reported it (Converse's trace.guardrail, InvokeModel's
	// amazon-bedrock-trace.guardrail: the request asked for them,
	// requestbody.WithGuardrailTrace); zero when none did. Billed apart from the tokens,
	// also when the guardrail refused the prompt and the model never ran.
	Guardrail pricecatalog.GuardrailUnits
	// GuardrailReported: a guardrail's usage was read, its billed counts 0 too (a
	// guardrail of free policies alone, word filters and regular expressions): nothing
	// to estimate.
	GuardrailReported bool
	// CostMicroUSD is the cost the upstream reported, if any: in a header, or in its
	// usage (OpenRouter's usage.cost, with its usage.cost_details.upstream_inference_cost
	// added for a "bring your own key" request; Perplexity's usage.cost.total_cost).
	CostMicroUSD *int64
	// Format names the recognised shape (the Format constants), or "".
	Format string
	// TextBytes counts the output text the response carried, in bytes of
	// UTF-8 after JSON unescaping (see the package doc for where it is read),
	// so that missing counts can be estimated. It is counted whether or not
	// usage was reported.
	TextBytes int64
	// The flags are together at the end, so that they share words: an Extractor holds a
	// Usage (TestExtractorSize).
	//
	// Complete is true when the stream ended normally and its final usage
	// report, with input and output counts, was seen (see the package doc).
	Complete bool
	// Tier is the speed tier the response says it ran at, dearer than the standard
	// prices of the catalog, or Flex below them (see the package doc).
	Tier pricecatalog.Tier
	// Regional: the response says it ran in one geography rather than anywhere
	// (Anthropic's usage.inference_geo other than "global": "us"), which costs a model's
	// regional premium (pricecatalog.Entry.RegionalPremiumPercent), as a cloud's
	// regional endpoint does.
	Regional bool
	// InputReported and OutputReported say whether the response reported an
	// input (output) count: when false, InputTokens (OutputTokens) is 0
	// because nothing was reported, not because the count was 0.
	InputReported  bool
	OutputReported bool
	// AudioInputReported and AudioOutputReported: see AudioInputTokens.
	AudioInputReported, AudioOutputReported bool
	// PlainText: the body was plain text (a transcript in a text format, or an error
	// page), all of it counted in TextBytes; no usage is reported in such a body.
	PlainText bool
	// TextBytesFromRaw is set when TextBytes includes body bytes as received,
	// still encoded: all of them for an unsupported content encoding, those
	// after the point where a compressed body turned out corrupt. An estimate
	// from them is rougher.
	TextBytesFromRaw bool
	// CachedAudioInputReported: see CachedAudioInputTokens.
	CachedAudioInputReported bool
}

// Limits bound the little state an Extractor keeps. Zero fields take the
// defaults. Bodies and events are never buffered, so there is no limit on
// their size: a multi-megabyte response.completed event is read like any
// other.
type Limits struct {
	// MaxModelBytes is the longest model name kept, in bytes after JSON
	// unescaping; a longer one is reported as "". Default 256, at most 65,535.
	MaxModelBytes int
	// MaxDepth is the deepest JSON nesting accepted; a deeper document is
	// treated as malformed, as encoding/json does. Default 10000.
	MaxDepth int
}

func (l Limits) withDefaults() Limits {
	if l.MaxModelBytes <= 0 {
		l.MaxModelBytes = DefaultMaxModelBytes
	}
	l.MaxModelBytes = min(l.MaxModelBytes, math.MaxUint16)
	if l.MaxDepth <= 0 {
		l.MaxDepth = DefaultMaxDepth
	}
	return l
}

type mode uint8

const (
	modeSniff mode = iota // content type unknown: decide on the first non-space byte
	modeJSON
	modeSSE
	modeIgnore // unsupported content encoding
	modeAudio  // an audio/* media type: measured by audio when it reads the container
	// modeEventStream: AWS's binary event stream (Amazon Bedrock's streamed answers),
	// each frame's event read as an SSE event (bedrock.go).
	modeEventStream
	// modeArray: a JSON body that is a top-level array, each element read as a
	// document as it completes (writeArray): Gemini's streamGenerateContent without
	// alt=sse streams its chunks so.
	modeArray
)

// Where a top-level array's reading is (Extractor.arr, modeArray): the scanner reads
// each element as a top-level value, writeArray the brackets and commas around them.
const (
	arrFirst  uint8 = iota // after '[': an element or ']'
	arrNext                // after ',': an element
	arrIn                  // in an element
	arrAfter               // after an element: ',' or ']'
	arrClosed              // after ']': white space only
	arrBad                 // malformed: nothing more is read
)

// ContainerProvider is the provider whose containers ContainerIDs names ("openai" for a
// Responses answer, "anthropic" for a Messages one), "" for any other shape.
func (u Usage) ContainerProvider() string {
	switch u.Format {
	case FormatOpenAIResponses, FormatOpenAIResponsesSSE:
		return "openai"
	case FormatAnthropicMessages, FormatAnthropicSSE:
		return "anthropic"
	}
	return ""
}

// Extractor reads the usage of one response. It is not safe for concurrent
// use; create one per response with New (it must not be copied).
type Extractor struct {
	mode    mode
	hasCost bool
	// headerTier is the tier a response header said the request ran at
	// (HeaderGeminiServiceTier, HeaderBedrockServiceTier, HeaderBedrockLatency).
	headerTier pricecatalog.Tier
	finished   bool
	// plainType: the content type is plain text (isPlainText); rawBytes then counts
	// its decoded bytes.
	plainType bool
	// JSON mode: a top-level value was completed.
	jsonDone bool
	arr      uint8 // modeArray: where the array's reading is (arrFirst...); a byte cost's alignment left free
	// sse and tierArr are made of bytes: beside the small fields above, the three share
	// their words, where apart each took one more (TestExtractorSize).
	sse     sseReader
	tierArr [nRoot][maxTierBytes]byte
	cost    int64
	// result is what Finish returned, for a later call: a pointer, so that the Usage
	// (about 250 bytes) is allocated once, at the end, not held by every stream the
	// gateway keeps (TestExtractorSize).
	result *Usage

	dec      *decoder // a supported content encoding is being decoded
	audio    *audiolength.Meter
	bedrock  *bedrockState // Amazon Bedrock's event stream or token count headers (bedrock.go)
	rawBytes int64         // body bytes of an unsupported encoding, or of a plain-text one

	scan scanner
	acc  accumulator

	// Backing store for the captured strings, so that capturing does not
	// allocate. A model name longer than inlineModelBytes (up to
	// MaxModelBytes) grows its buffer once. In line, the four model buffers
	// take 256 bytes of the Extractor (1776 bytes, with the allocator's 8-byte header in size class 1792: TestExtractorSize), where
	// buffers of MaxModelBytes took 1 KiB more, which a response held however
	// short its model's name (an idle stream of the gateway too).
	keyArr   [maxKeyBytes]byte
	typArr   [maxSmallBytes]byte
	objArr   [maxObjectBytes]byte
	modelArr [nRoot + 1][inlineModelBytes]byte
	stackAr  [4]uint64
}

// inlineModelBytes is the longest model name captured without an allocation:
// longer than the names providers use ("anthropic.claude-3-5-sonnet-20241022-v2:0"
// is 41 bytes).
const inlineModelBytes = 64

// Headers is the map New reads, from a response's header: the fields New reads and no
// other, named in lower case, each field's lines joined once with ", ", as RFC 9110
// (5.3) combines a field sent on several lines. Two Content-Encoding lines, "gzip" and
// "gzip", mean what one "gzip, gzip" does; keeping either line alone would decode one
// layer of two and lose the usage. A field that must be single (a cost) sent twice
// reads as the two joined, which does not parse: it is not trusted.
//
// Its work is linear in the lines it joins, and nothing for the fields it does not read
// (since 2026-12-02: a line joined to the ones before it, one at a time, copied them
// all again, and 60,000 lines of one header, 500 KB, took 13 s of CPU before a byte was
// relayed).
func Headers(h http.Header) map[string]string {
	m := make(map[string]string, 2)
	for _, name := range readHeaders {
		switch vs := h.Values(name); len(vs) {
		case 0:
		case 1:
			m[name] = vs[0]
		default:
			m[name] = strings.Join(vs, ", ")
		}
	}
	return m
}

// readHeaders are the response headers New reads (lower-cased).
var readHeaders = [...]string{
	"content-encoding",
	HeaderCostMicroUSD, HeaderCostUSD, HeaderLiteLLMCost,
	HeaderGeminiServiceTier, HeaderBedrockServiceTier, HeaderBedrockLatency,
	headerBedrockInput, headerBedrockOutput, headerBedrockCacheRead, headerBedrockCacheWrite,
}

// New returns an Extractor for a response with the given Content-Type and
// headers. Header names must be lower-case (as Envoy passes them, and Headers
// makes them); only the
// content encoding, the cost headers, Bedrock's and the Gemini API's service tier
// (HeaderGeminiServiceTier, HeaderBedrockServiceTier) and Bedrock's latency
// (HeaderBedrockLatency) are read.
func New(contentType string, headers map[string]string, limits Limits) *Extractor {
	limits = limits.withDefaults()
	e := &Extractor{}
	e.cost, e.hasCost = costFromHeaders(headers)
	if headers[HeaderGeminiServiceTier] == "priority" || headers[HeaderBedrockServiceTier] == "priority" {
		e.headerTier = pricecatalog.Fast
	}
	e.headerTier = max(e.headerTier, pricecatalog.TierNamed(pricecatalog.LatencyNames[:], headers[HeaderBedrockLatency]))

	m := uint16(limits.MaxModelBytes)
	e.scan.init(limits.MaxDepth, e.stackAr[:0], e.keyArr[:0], e.typArr[:0], e.objArr[:0],
		[nRoot][]byte{e.modelArr[0][:0], e.modelArr[1][:0], e.modelArr[2][:0]},
		[nRoot][]byte{e.tierArr[0][:0], e.tierArr[1][:0], e.tierArr[2][:0]}, m)
	e.acc.model = capture{b: e.modelArr[nRoot][:0], limit: m}

	mt := mediaType(contentType)
	codings, n, supported := parseEncoding(headers["content-encoding"])
	switch {
	case !supported:
		e.mode = modeIgnore
	case mt == "text/event-stream":
		e.mode = modeSSE
	case strings.HasSuffix(mt, "/json") || strings.HasSuffix(mt, "+json"):
		e.mode = modeJSON
	case strings.HasPrefix(mt, "audio/"):
		e.mode, e.audio = modeAudio, audiolength.New(contentType)
	default:
		e.mode = modeSniff
	}
	if e.bedrock = newBedrock(mt, headers); e.bedrock != nil && e.bedrock.dec != nil && supported {
		e.mode = modeEventStream
	}
	e.scan.multi = e.mode == modeSSE || e.mode == modeEventStream
	e.plainType = isPlainText(mt)
	if supported && n > 0 {
		e.dec = newDecoder(e, codings, n)
	}
	return e
}

// isPlainText tells the media types of an answer that is its text and nothing else:
// OpenAI's transcriptions and translations in the text formats (response_format text,
// srt and vtt, sent as text/plain), which report no usage. Their bytes are output text,
// so that the tokens can be estimated (Usage.PlainText); an error page is plain text too,
// and the settlement does not take its text for output (inflight.FromResponse). Such a
// body is still sniffed: a stream or a JSON body sent as text/plain is read as one.
func isPlainText(mt string) bool {
	switch mt {
	case "text/plain", "text/vtt", "application/x-subrip", "text/srt":
		return true
	}
	return false
}

// mediaType returns the lower-cased media type of a Content-Type value,
// without parameters.
func mediaType(ct string) string {
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return strings.ToLower(strings.TrimSpace(ct))
}

// Write feeds the next body chunk, as received (still encoded). Chunks may
// be split anywhere, including inside a UTF-8 sequence, an SSE line, a JSON
// token or a compressed block. The chunk is not retained. Malformed content
// is not an error (it only makes the usage incomplete); the only error is
// ErrFinished.
func (e *Extractor) Write(chunk []byte) error {
	if e.finished {
		return ErrFinished
	}
	switch {
	case e.dec != nil:
		e.dec.write(chunk)
	case e.mode == modeIgnore:
		e.rawBytes += int64(len(chunk))
	default:
		e.writePlain(chunk)
	}
	return nil
}

// writePlain reads decoded body bytes.
func (e *Extractor) writePlain(chunk []byte) {
	if e.mode == modeAudio {
		if e.audio != nil {
			e.audio.Write(chunk)
		}
		return
	}
	if e.plainType {
		e.rawBytes += int64(len(chunk))
	}
	if e.sse.bomPos != bomDone && (e.mode == modeSniff || e.mode == modeJSON) {
		// One UTF-8 BOM at the start of a body sniffed or read as JSON is dropped, as the
		// SSE reader drops it (and fetch().json(), Python's json.loads of bytes): read
		// with it, the body was no JSON and its answer read as nothing. A partial one,
		// split across writes too, is read as it came once a byte shows it is none.
		var partial []byte
		if chunk, partial = e.skipBOM(chunk); partial != nil {
			e.readPlain(partial)
		}
		if len(chunk) == 0 {
			return
		}
	}
	e.readPlain(chunk)
}

// skipBOM drops the bytes of a leading UTF-8 BOM from the start of chunk; partial is
// the part of one matched before a byte that ends it (to be read as it came), nil when
// there is none. It keeps its place in the SSE reader's (sseReader.bomPos: the body has
// one start, and a byte more in the Extractor would take it past its size class,
// TestExtractorSize): a body it sniffs as an event stream then has had its BOM dropped.
func (e *Extractor) skipBOM(chunk []byte) (rest, partial []byte) {
	r := &e.sse
	for len(chunk) > 0 && r.bomPos != bomDone {
		if int(r.bomPos) < len(bom) && chunk[0] == bom[r.bomPos] {
			chunk = chunk[1:]
			if r.bomPos++; int(r.bomPos) == len(bom) {
				r.bomPos = bomDone
			}
			continue
		}
		if r.bomPos > 0 {
			partial = []byte(bom[:r.bomPos])
		}
		r.bomPos = bomDone
	}
	return chunk, partial
}

// readPlain reads decoded body bytes of a body that is not audio, past a leading BOM.
func (e *Extractor) readPlain(chunk []byte) {
	if e.mode == modeSniff {
		i := 0
		for i < len(chunk) && isSpace(chunk[i]) {
			i++
		}
		if i == len(chunk) {
			return
		}
		chunk = chunk[i:]
		if chunk[0] == '{' || chunk[0] == '[' {
			e.mode = modeJSON
		} else {
			e.mode = modeSSE
		}
		e.scan.multi = e.mode == modeSSE
	}
	switch e.mode {
	case modeJSON:
		if e.scan.state == stTop {
			// Before the body's value: a top-level array is read element by element.
			i := 0
			for i < len(chunk) && isSpace(chunk[i]) {
				i++
			}
			if i < len(chunk) && chunk[i] == '[' {
				e.startArray()
				e.writeArray(chunk[i+1:])
				return
			}
		}
		for len(chunk) > 0 {
			n, done := e.scan.feed(chunk)
			if done {
				e.jsonDone = true
			}
			chunk = chunk[n:]
		}
	case modeSSE:
		e.sse.write(chunk, e)
	case modeArray:
		e.writeArray(chunk)
	case modeEventStream:
		e.bedrock.write(chunk, e)
	}
}

// startArray begins the reading of a JSON body that is a top-level array, its '['
// consumed. Its elements are read as the documents of a stream are, one after another;
// the scanner's nesting limit leaves a level for the array, as encoding/json counts it.
func (e *Extractor) startArray() {
	e.mode, e.arr = modeArray, arrFirst
	e.scan.multi = true
	e.scan.maxDepth--
}

// writeArray reads the body of a top-level JSON array: white space, commas and the
// closing bracket here, each element by the scanner, taken in when it completes
// (onElement). A malformed array is read no further; what its elements reported stands.
func (e *Extractor) writeArray(p []byte) {
	for i := 0; i < len(p); {
		if e.arr == arrIn {
			n, done := e.scan.feed(p[i:])
			i += n
			if done {
				e.acc.applyElement(&e.scan.doc)
				e.arr = arrAfter
			}
			continue
		}
		c := p[i]
		if isSpace(c) {
			i++
			continue
		}
		switch e.arr {
		case arrFirst, arrNext:
			if c == ']' && e.arr == arrFirst {
				e.arr = arrClosed
				i++
			} else {
				e.arr = arrIn // c starts the element (the scanner fails on one that cannot)
			}
		case arrAfter:
			i++
			switch c {
			case ',':
				e.arr = arrNext
			case ']':
				e.arr = arrClosed
			default:
				e.arr = arrBad
			}
		default: // arrClosed (anything after the array), arrBad
			e.arr = arrBad
			return
		}
	}
}

// Finish ends the response and returns its usage. endOfStream is true when
// the body ended normally and false when the stream broke off (reset,
// timeout, client gone); a broken-off stream is never Complete. It must be
// called once the body is over (an encoded body's decoder runs on a
// goroutine that Finish releases). Later calls return the same Usage.
func (e *Extractor) Finish(endOfStream bool) Usage {
	if e.finished {
		return *e.result
	}
	e.finished = true
	u := Usage{Tier: e.headerTier}
	if e.hasCost {
		c := e.cost
		u.CostMicroUSD = &c
	}
	if e.mode == modeIgnore {
		u.Format = FormatUnsupportedEncoding
		u.TextBytes, u.TextBytesFromRaw = e.rawBytes, true
		e.result = &u
		return u
	}
	var undecoded int64
	corrupt := false // the coding failed on the body's content (not a body cut short)
	if e.dec != nil {
		var clean bool
		corrupt = e.dec.corrupt
		clean, undecoded = e.dec.finish(endOfStream)
		endOfStream = endOfStream && clean
		e.dec = nil
	}
	switch e.mode {
	case modeAudio:
		u.Format = FormatAudio
		if e.audio != nil {
			u.AudioOutputMillis = e.audio.Millis()
		}
		e.result = &u
		return u
	case modeJSON:
		if e.scan.flush() {
			e.jsonDone = true
		}
		wellFormed := e.jsonDone && e.scan.state == stTopEnd
		e.acc.fromJSON(&e.scan.doc, wellFormed)
	}
	e.acc.fill(&u)
	if e.headerTier != pricecatalog.Standard {
		u.Tier = max(u.Tier, e.headerTier) // a header's dear tier, whatever the body's
	}
	if e.mode == modeArray && e.arr != arrClosed {
		u.Complete = false // a cut or malformed array
	}
	// A stream whose terminal event came after its final report ended by its protocol
	// (sseReader.endEvent: "data: [DONE]", response.completed, message_stop,
	// ConverseStream's metadata; InvokeModelWithResponseStream's invocation metrics; a
	// JSON array's closing bracket): a
	// client that closed as soon as it read it (openai-go does at [DONE]) cut nothing.
	// A compressed one too, since 2026-12-03, once the event decoded: what its coding
	// still owed (its last block, gzip's CRC-32 and length, zlib's Adler-32) carries no
	// byte of the answer, and a plain body has no checksum at all. Not one whose coding
	// failed on its content (corrupt data, a checksum that did not match): what it
	// decoded is not to be trusted whole.
	// A top-level JSON array (gemini-json-stream) ends by its syntax at its closing ']':
	// nothing but white space may follow.
	protocolEnded := !corrupt && (e.sse.ended() || e.bedrock.ended() || e.mode == modeArray && e.arr == arrClosed)
	e.bedrock.fillFromMetrics(&u, endOfStream || protocolEnded)
	e.bedrock.fillFromHeaders(&u, endOfStream)
	e.bedrock.unreadText(&u)
	if e.plainType && u.Format == "" && u.TextBytes == 0 {
		// A plain-text body that held no document read here is its text, byte for
		// byte (sniffed, a stream or a JSON body sent as text/plain is read as one).
		u.TextBytes, u.PlainText = e.rawBytes, true
	}
	u.Complete = u.Complete && (endOfStream || protocolEnded)
	if undecoded > 0 {
		u.TextBytes += undecoded
		u.TextBytesFromRaw = true
	}
	e.result = &u
	return u
}

// onDoc is called for every complete top-level JSON value of an SSE stream.
func (e *Extractor) onDoc() {
	fam := e.acc.fam
	e.acc.applySSE(&e.scan.doc)
	if e.acc.fam != fam {
		// The new family's final report, and its end, are to come: an end seen in this
		// event so far was the other family's.
		e.sse.done &^= doneEnded | doneTerminal
	}
	if endsStream(&e.scan.doc) {
		e.sse.done |= doneTerminal // the stream ends with this event, once it is closed
	}
}

// ReadsKey tells whether the reader looks for JSON object key name in an answer (a
// usage count, a model, a tier, a tool's trace): a contract test holds the official
// SDKs' usage fields to it (e2e, TestEverySDKUsageFieldIsDecided).
func ReadsKey(name string) bool { return keyID([]byte(name)) != kOther }
