// Package fakellm is a stand-in for two inference APIs in end-to-end tests: OpenAI's chat
// completions (POST /v1/chat/completions; its Responses API and embeddings too, below) and
// Anthropic's messages (POST /v1/messages),
// each answered as JSON or, when the request says "stream": true, as server-sent events,
// with token counts the test chooses. It behaves the way those APIs do where the
// enforcer's accounting depends on it:
//
//   - An OpenAI stream carries a usage chunk (choices [], usage {...}) only when the
//     request set stream_options.include_usage to true; its other chunks then carry
//     "usage": null. Without it, no chunk mentions usage at all.
//   - Mistral's API (a chat completion whose Host is MistralHost: through an HTTP proxy,
//     the test's fake is any host) refuses a body with a stream_options member, 422 with
//     pydantic's extra_forbidden detail as Mistral answers it, and ends every stream
//     with its usage in the last chunk, unasked.
//   - A chat completion says which service tier it ran at ("service_tier"): "priority",
//     "fast", "ultrafast" or "flex" when the request asked for it (the models after
//     GPT-5.6 answer the priority tier's new name, "fast"), "default" otherwise.
//   - The Gemini API says the tier it served in the X-Gemini-Service-Tier header and
//     its usage's serviceTier ("priority" or "flex" when the request's service_tier or
//     serviceTier asked for it, else "standard"); Vertex AI in its usage's trafficType
//     (ON_DEMAND_PRIORITY or ON_DEMAND_FLEX when the X-Vertex-AI-LLM-Shared-Request-Type
//     header asked for priority or flex, else ON_DEMAND).
//   - OpenAI answers a model with its dated snapshot when Server.Snapshots says so
//     ("gpt-4o-mini" answered as "gpt-4o-mini-2024-07-18").
//   - An Anthropic stream reports input tokens in message_start and output tokens in
//     message_delta. A request that asks for a speed ("speed": "fast", its fast mode)
//     or names an inference_geo ("us") is answered with it in its usage
//     (message_start's, streamed).
//   - OpenAI's Responses API (POST /v1/responses) answers a response object with its
//     usage (input_tokens, cached in input_tokens_details, output_tokens) or, streamed,
//     the typed events a client reads (response.created, output_text deltas, ...,
//     response.completed carrying the usage). Its service_tier is the tier it ran at (as
//     a chat completion's; "default" when Usage.PriorityShort and the request asked for
//     priority), which a stream's response.created and response.in_progress do not know
//     yet: they echo the request's ("auto" when it names none).
//   - OpenAI's embeddings (POST /v1/embeddings) answer one vector of
//     EmbeddingDimensions numbers per input (a string, or an array of them), as JSON
//     floats or, when the request's encoding_format is "base64" (what the official SDK
//     asks), as base64 of little-endian float32s, with the usage at the end (prompt_tokens
//     and total_tokens, no completion tokens): a long body before the only usage.
//   - OpenAI's audio transcription and translation (POST /v1/audio/transcriptions,
//     /v1/audio/translations) take a multipart/form-data upload (a file and its model)
//     and answer {"text": ...} with the token usage of the gpt-4o transcribe models
//     (input_tokens, of them input_token_details.audio_tokens, output_tokens; with
//     stream=true as transcript.text.* events), or whisper-1's duration usage ({"type":
//     "duration", "seconds"}; none in the text formats). Call.Body is then the upload's
//     size in decimal, not its bytes.
//   - OpenAI's speech (POST /v1/audio/speech) answers 2.5 s of real audio in the
//     response_format asked (mp3 by default; opus, aac, flac, wav, pcm: internal/testaudio's
//     files, with OpenAI's media types) and no usage, as OpenAI does (an unknown format is
//     400); with stream_format "sse", SpeechBytes of audio in speech.audio.delta events of
//     base64 and a speech.audio.done with the token usage.
//   - OpenAI's images (POST /v1/images/generations, gpt-image-1) answer one base64 PNG
//     and the token usage (no model, as OpenAI's answer has none); with stream=true, two
//     image_generation.partial_image events, then image_generation.completed with the
//     usage.
//   - OpenAI's Realtime API (GET /v1/realtime?model=..., a WebSocket): session.created,
//     then, for each response.create, a response's events ending in response.done with
//     its usage (realtime.go).
//   - OpenAI's Responses API in its WebSocket mode (GET /v1/responses, a WebSocket):
//     each response.create answered by the events of the HTTP stream, a message each
//     (responses_ws.go).
//   - OpenAI's GPT-Live over a WebSocket (GET /v1/live/sessions): session.started, then
//     for each response.create the session's seconds so far and a backend response,
//     wrapped in response.event; session.closed with its total (gpt_live.go).
//   - Google's Gemini Live API (GET /ws/google.ai.generativelanguage.{v1,v1beta,v1alpha}.
//     GenerativeService.BidiGenerateContent, a WebSocket): setupComplete, then, for each
//     clientContent, a turn's messages ending in its usageMetadata (gemini_live.go).
//   - Google's Gemini API: POST /{v1,v1beta,v1alpha}/models/{model}:generateContent answers the
//     candidates and usageMetadata (promptTokenCount, candidatesTokenCount and
//     thoughtsTokenCount, a quarter of the output tokens being thinking,
//     cachedContentTokenCount; a count of 0 left out, as Gemini does) with the
//     modelVersion; :streamGenerateContent?alt=sse streams one chunk per word, each with
//     the usage so far, the last with finishReason STOP (without alt=sse, as Google
//     does: application/json, the same chunks as the elements of a JSON array, each
//     flushed as it is written); :countTokens answers {"totalTokens": N}, free.
//   - Google's Interactions API (POST /{version}/interactions, the model in the body): the
//     Interaction with its steps and usage (total_input_tokens, total_output_tokens and
//     total_thought_tokens split as generateContent's, the lists by modality in lower
//     case, grounding_tool_count), or with "stream": true its events, step.delta per
//     word, interaction.completed with the usage, then [DONE] (interactions.go).
//   - Azure OpenAI's chat completions (POST
//     /openai/deployments/{deployment}/chat/completions?api-version=...) answer as
//     OpenAI's do; the model is the body's, else the deployment's name. Without an
//     api-version the path is unknown, as Azure has it; with one from before
//     2024-08-01, a body with stream_options is answered 400, as Azure answers it.
//   - Amazon Bedrock Runtime's model invocation for a Claude model (POST
//     /model/{modelId}/invoke, /invoke-with-response-stream, /converse,
//     /converse-stream; the model id percent-decoded from the path): Anthropic's
//     message with Bedrock's token-count headers, Anthropic's stream events in AWS event
//     stream frames, the Converse API's answer and its event stream (bedrock.go).
//   - Google Vertex AI's publisher models (POST /v1/projects/{project}/locations/
//     {location}/publishers/{anthropic,google}/models/{model}:{method}; the model from
//     the path): Claude's :rawPredict and :streamRawPredict answered as Anthropic's
//     messages, Gemini's :generateContent, :streamGenerateContent and :countTokens as
//     the Gemini API's (vertex.go).
//   - A stored response is retrieved (GET /v1/responses/{id}) as the completed
//     response object with its usage, as OpenAI shows it again (free: it was charged
//     when it was generated).
//   - Anthropic's token counting (POST /v1/messages/count_tokens) answers
//     {"input_tokens": N} with the input tokens the test chose, and no usage object:
//     the provider does not charge it.
//   - Answers are gzip-compressed (Content-Encoding: gzip) whenever the request's
//     Accept-Encoding allows gzip, streams included: each event is flushed through the
//     compressor, so a client decodes it as it arrives.
//
// It records every request it received (headers and body), so a test can assert what
// reached the provider: which credential, and never the member's own key.
//
// It is test support, imported by tests only.
package fakellm

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testaudio"
)

// Usage is what one answer reports.
type Usage struct {
	// InputTokens: OpenAI's prompt_tokens (cached ones included); Anthropic's
	// input_tokens (cache reads and writes left out, as Anthropic counts).
	InputTokens int64
	// CachedInputTokens: OpenAI's prompt_tokens_details.cached_tokens; Anthropic's
	// cache_read_input_tokens.
	CachedInputTokens int64
	// CacheCreationInputTokens: Anthropic's cache_creation_input_tokens; for OpenAI the
	// part of InputTokens written to the cache (cache_write_tokens of
	// prompt_tokens_details and input_tokens_details, reported from GPT-5.6 on, when not
	// 0). Of them CacheCreation1hInputTokens (Anthropic) were written for an hour
	// (cache_creation.ephemeral_1h_input_tokens; the rest ephemeral_5m_input_tokens).
	CacheCreationInputTokens   int64
	CacheCreation1hInputTokens int64
	// OutputTokens: completion_tokens / output_tokens.
	OutputTokens int64
	// ToolUsePromptTokens: Gemini's toolUsePromptTokenCount (sent when not 0), the
	// results of its tools given back to the model: input apart from promptTokenCount
	// (InputTokens), which the total counts too.
	ToolUsePromptTokens int64
	// CompactionInputTokens and CompactionOutputTokens: an Anthropic answer's
	// usage.iterations[] entry of type "compaction" (sent when either is not 0, with the
	// "message" entry of the top-level counts): the server-side summary of a closed
	// context, which the top-level counts leave out.
	CompactionInputTokens, CompactionOutputTokens int64
	// AdvisorInputTokens, AdvisorOutputTokens and AdvisorCachedInputTokens: an Anthropic
	// answer's usage.iterations[] entry of type "advisor_message" (sent when any is not
	// 0, with the "message" entry of the top-level counts): an advisor tool's
	// sub-inference, of the model AdvisorModel, which the top-level counts leave out.
	// The input is uncached, as Anthropic counts it (cache reads apart).
	AdvisorInputTokens, AdvisorOutputTokens, AdvisorCachedInputTokens int64
	AdvisorModel                                                      string
	// WebSearchRequests: Anthropic's usage.server_tool_use.web_search_requests (sent
	// when not 0: in the message, and in a stream's message_delta); on the Responses API,
	// that many web_search_call output items before the message (and, streamed, each
	// call's events), which is how OpenAI reports its web search tool's calls; on Gemini,
	// that many search queries in the (last) candidate's groundingMetadata.
	WebSearchRequests int64
	// ImageSearchQueries: on Gemini, that many image search queries in the (last)
	// candidate's groundingMetadata (imageSearchQueries, beside webSearchQueries), and
	// an image source, as Gemini 3.1 Flash Image's grounding with image search lists them.
	ImageSearchQueries int64
	// MapsGrounded: on Gemini, the (last) candidate's groundingMetadata cites two Google
	// Maps places (groundingChunks[].maps, and a googleMapsWidgetContextToken), as an
	// answer grounded with Google Maps does.
	MapsGrounded bool
	// OCRPages: Mistral's OCR (POST /v1/ocr) says it read that many pages
	// (usage_info.pages_processed), one markdown page each in its answer.
	OCRPages int64
	// FileSearchCalls: on the Responses API, that many file_search_call output items
	// after the web searches' (and, streamed, each call's events), which is how OpenAI
	// reports its file search tool's calls.
	FileSearchCalls int64
	// ImageGenerationCalls: on the Responses API, that many image_generation_call output
	// items after the file searches' (and, streamed, each call's events), which is how
	// OpenAI reports its image generation tool's images.
	ImageGenerationCalls int64
	// ImageToolInputTokens and ImageToolCachedInputTokens: on the Responses API, the
	// answer's tool_usage.image_gen says the image model's input was that many tokens,
	// that many of them cache reads (cached_tokens), as openai 7's Response has it; the
	// field is left out when both are 0, as OpenAI may.
	ImageToolInputTokens, ImageToolCachedInputTokens int64
	// GuardrailInputUnits and GuardrailOutputUnits: on Amazon Bedrock, a request with a
	// guardrail (Converse's guardrailConfig, InvokeModel's
	// X-Amzn-Bedrock-GuardrailIdentifier) that asked for its trace is answered with it
	// (bedrockGuardrail): its content filter and its denied topics each assessed that
	// many text units of the prompt, and of the answer. Without the trace asked for,
	// nothing says them, as Bedrock bills them all the same.
	GuardrailInputUnits, GuardrailOutputUnits int64
	// Container: the container the answer's code tools ran in: on the Responses API, a
	// code_interpreter_call output item naming it (container_id) after the images' (and,
	// streamed, its events); on Anthropic, the message's container (a stream's
	// message_delta's delta.container), as Anthropic's code execution tool reports it.
	Container string
	// ShellContainer: on the Responses API, a shell_call output item run in that hosted
	// container (environment.container_id) after the code interpreter's, as OpenAI's
	// hosted shell reports it.
	ShellContainer string
	// AudioMillis: a duration-billed transcription's (whisper-1's) usage.seconds, in
	// milliseconds (written as a decimal number of seconds).
	AudioMillis int64
	// AudioInputTokens and AudioOutputTokens: the audio parts of InputTokens and
	// OutputTokens, as the usage reports them: OpenAI chat's prompt_tokens_details and
	// completion_tokens_details.audio_tokens, the Realtime API's input_token_details and
	// output_token_details.audio_tokens, Gemini's promptTokensDetails and
	// candidatesTokensDetails (a TEXT entry for the rest, an AUDIO entry when not 0,
	// as Gemini lists the modalities it counted).
	AudioInputTokens, AudioOutputTokens int64
	// CachedAudioInputTokens: the audio part of CachedInputTokens (and of
	// AudioInputTokens), as Gemini's cacheTokensDetails (written whenever the answer has
	// cached tokens: a TEXT entry for the rest, an AUDIO entry when not 0) and the
	// Realtime API's input_token_details.cached_tokens_details report it.
	CachedAudioInputTokens int64
	// ImageInputTokens and CachedImageInputTokens: the image parts of InputTokens and
	// CachedInputTokens (images the client sent), as the Realtime API's
	// input_token_details.image_tokens and cached_tokens_details.image_tokens report them.
	ImageInputTokens, CachedImageInputTokens int64
	// CostParts: CostUSD is written as Perplexity's usage.cost, an object of the cost's
	// parts whose total_cost it is, not as OpenRouter's number.
	CostParts bool
	// ReasoningApart: reasoning tokens an OpenAI chat usage counts in total_tokens and
	// completion_tokens_details.reasoning_tokens but not in completion_tokens, as xAI's
	// does (OpenAI's completion_tokens counts them).
	ReasoningApart int64
	// CostUSD, when not "", is an OpenAI chat usage's "cost" (a JSON number of USD, as
	// OpenRouter reports what a request cost), written as given.
	CostUSD string
	// CostTicks, when not 0, is what the request cost in ticks of 1e-10 USD, as xAI
	// reports it (usage.cost_in_usd_ticks) in chat completions and the Responses API.
	CostTicks int64
	// PriorityShort: OpenAI's priority capacity is short, so a Responses API request that
	// asks for "priority" or "fast" runs, and is billed, at "default": its answer (a JSON
	// response, a stream's response.completed) says "default", while its stream's
	// response.created and response.in_progress echo the tier asked, as OpenAI's do.
	PriorityShort bool
	// askedTier and servedTier: a Responses API answer's service_tier (set by the server
	// from the request: its service_tier, "auto" when it names none): the tier its
	// stream's events before the terminal one echo, and the one it ran at.
	askedTier, servedTier string
}

// xaiCost is the cost_in_usd_ticks member of a usage (with its leading comma), "" when
// the answer reports none.
func xaiCost(u Usage) string {
	if u.CostTicks == 0 {
		return ""
	}
	return fmt.Sprintf(`,"cost_in_usd_ticks":%d`, u.CostTicks)
}

// API names the surfaces.
const (
	OpenAIChat           = "openai.chat.completions"
	OpenAIResponses      = "openai.responses"
	OpenAIEmbeddings     = "openai.embeddings"
	OpenAIRetrieve       = "openai.responses.retrieve"
	OpenAITranscription  = "openai.audio.transcriptions"
	OpenAITranslation    = "openai.audio.translations"
	OpenAISpeech         = "openai.audio.speech"
	OpenAIImages         = "openai.images.generations"
	GeminiGenerate       = "gemini.generateContent"
	GeminiStream         = "gemini.streamGenerateContent"
	GeminiCountTokens    = "gemini.countTokens"
	GeminiInteractions   = "gemini.interactions"
	AnthropicMessages    = "anthropic.messages"
	AnthropicCountTokens = "anthropic.messages.count_tokens"
	MistralOCR           = "mistral.ocr"
	// OpenAIConversations: POST /v1/conversations (create) and /v1/conversations/{id}
	// (update), answered with OpenAI's conversation object, which reports no usage.
	OpenAIConversations = "openai.conversations"
	// Administration: a POST that stores, updates or removes something and generates
	// nothing (Anthropic's memory stores and memories, skills and vaults; storedObjects),
	// answered with the object, without usage.
	Administration = "administration"
)

// storedObjects are the collections whose POSTs the fake answers as Administration, by
// the type of object it answers with.
var storedObjects = map[string]string{"/v1/memory_stores": "memory", "/v1/skills": "skill", "/v1/vaults": "vault"}

// SpeechBytes is the length of the audio of every speech answer in events (POST
// /v1/audio/speech with stream_format "sse").
const SpeechBytes = 16 << 10

// EmbeddingDimensions is the length of every embedding vector (text-embedding-3-small's).
const EmbeddingDimensions = 1536

// Text is what every answer says; streams send it one word per event.
const Text = "Tolls are paid in tokens."

// Call is one request the server received.
type Call struct {
	API          string // OpenAIChat or AnthropicMessages; "" for an unknown path
	Method, Path string
	Query        string // the raw query (Azure's api-version)
	Header       http.Header
	Body         []byte
	Model        string // as requested
	Stream       bool
	IncludeUsage bool // stream_options.include_usage was true
	Gzip         bool // the answer was gzip-compressed
	Usage        Usage
}

// NextUsage is the usage a test changes between calls, for Server.Usage (Usage:
// u.Of): the server's handlers read it on their own goroutines. When the calls come
// from another process (an official SDK's script run by node), nothing orders the
// test's write before the handler's read: go test -race orders a socket's write
// before its read inside the test binary, but not a child process's. A plain variable
// shared with a Usage func is then a data race (-race reported it in
// TestOfficialSDKsThroughTheEnforcedPath and TestBothSDKsThroughOneGatewayByRoute);
// this one is locked. The zero value answers zeros.
type NextUsage struct {
	mu sync.Mutex
	u  Usage
}

// Set makes x the usage of the calls from now on.
func (u *NextUsage) Set(x Usage) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.u = x
}

// Of is the usage of a call: the one last Set.
func (u *NextUsage) Of(Call) Usage {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.u
}

// ToolUse is a call of a client's tool the model asks for: the tool's name and its
// input, a JSON object. Then, when set, is the call asked for once a request carries
// this one's result (an agent's next tool, or the tool of the agent a handoff went to):
// a request carrying n results is asked for the chain's (n+1)th call, and answered with
// text past its end.
type ToolUse struct {
	Name, Input string
	Then        *ToolUse
}

// toolCall is the call the model asks for in a request whose body carries tools'
// results, each marked once by the JSON string result ("function_call_output",
// "tool_call_id", "tool_result", "functionResponse"), or nil when it answers with text.
func (s *Server) toolCall(body []byte, result string) *ToolUse {
	t := s.ToolUse
	for n := bytes.Count(body, []byte(`"`+result+`"`)); t != nil && n > 0; n-- {
		t = t.Then
	}
	return t
}

// Server answers both APIs; use it as an http.Handler (httptest.NewServer(s)).
type Server struct {
	// Usage chooses the usage of an answer; nil answers zeros.
	Usage func(Call) Usage
	// Snapshots maps a requested model to the name the answer carries; models not in
	// it are answered as requested.
	Snapshots map[string]string
	// ToolUse, when set, answers an Anthropic message whose request carries no tool
	// result yet with a call of that tool (stop_reason "tool_use") instead of text, and
	// so a response.create of a Responses WebSocket session whose input carries no
	// function_call_output (a function_call item, its input the arguments), and a
	// Gemini streamGenerateContent whose contents carry no functionResponse (a
	// functionCall part, its input the args), an OpenAI chat completion whose messages
	// carry no tool result (a tool_calls message) and a Responses API request over HTTP
	// whose input carries no function_call_output: an agent (Claude Code, Codex, the
	// Gemini CLI, an application's framework) runs it and calls again with its result,
	// which is answered with text, or with ToolUse.Then's call. Each answer reports the
	// usage the test chose.
	ToolUse *ToolUse

	mu    sync.Mutex
	calls []Call
	// wsAnswered counts the responses answered over the Responses WebSocket so far
	// (ResponsesAnswered).
	wsAnswered int
	seq        int
}

// record keeps call c of request r, numbered n: a valid one is answered gzip when r
// allows it, with the usage the test chose for it.
func (s *Server) record(c *Call, r *http.Request, valid bool) (n int) {
	c.Gzip = valid && acceptsGzip(r.Header.Values("Accept-Encoding"))
	if s.Usage != nil && valid {
		c.Usage = s.Usage(*c)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	s.calls = append(s.calls, *c)
	return s.seq
}

// session records a WebSocket session as one Call of api, named model by the client
// (the handshake's method, path, query and headers), its Usage asked once; it returns
// the Call's index and its Usage.
func (s *Server) session(r *http.Request, api, model string) (at int, u Usage) {
	c := Call{API: api, Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header.Clone(), Model: model, Stream: true}
	if s.Usage != nil {
		c.Usage = s.Usage(c)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, c)
	return len(s.calls) - 1, c.Usage
}

// countMessages sets the Body of session at to got, the client's messages, in decimal.
func (s *Server) countMessages(at, got int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[at].Body = []byte(fmt.Sprint(got))
}

// ResponsesAnswered is how many responses the Responses WebSocket sessions were sent
// so far, each to its end: a session's Call counts its messages only when it ends.
func (s *Server) ResponsesAnswered() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.wsAnswered
}

// Calls returns the requests received so far, in order.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// request is the part of both APIs' request bodies the server reads.
type request struct {
	Model         string `json:"model"`
	Stream        bool   `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	// Embeddings: the input (a string or an array) and how vectors are encoded.
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
	// ServiceTier is OpenAI's service_tier: a chat completion answers priority (fast,
	// ultrafast, flex) when asked, default otherwise.
	ServiceTier string `json:"service_tier"`
	// Speed is Anthropic's speed: its answer's usage says the speed it ran at (in
	// message_start's, streamed), "fast" when asked for fast.
	Speed string `json:"speed"`
	// InferenceGeo is Anthropic's inference_geo: a request that names one is answered
	// with it in its usage (message_start's, streamed).
	InferenceGeo string `json:"inference_geo"`
	// ServiceTierCamel is the Gemini API's service tier as its JSON names it
	// ("serviceTier", a string; "service_tier" is read too): "priority" is answered so
	// in the X-Gemini-Service-Tier header. Raw: Bedrock Converse's is an object
	// (converseTier reads it).
	ServiceTierCamel json.RawMessage `json:"serviceTier"`
	// StreamFormat: a speech request's "sse" (gpt-4o-mini-tts) asks for events.
	StreamFormat string `json:"stream_format"`
	// ResponseFormat: a speech request's audio container (a string; mp3 when not
	// given). Raw, since chat's response_format is an object.
	ResponseFormat json.RawMessage `json:"response_format"`
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost && (r.URL.Path == "/v1/audio/transcriptions" || r.URL.Path == "/v1/audio/translations") {
		s.transcribe(w, r)
		return
	}
	for prefix, object := range storedObjects {
		if r.Method == http.MethodPost && (r.URL.Path == prefix || strings.HasPrefix(r.URL.Path, prefix+"/")) {
			s.stored(w, r, object)
			return
		}
	}
	if r.Method == http.MethodPost && (r.URL.Path == "/v1/conversations" || strings.HasPrefix(r.URL.Path, "/v1/conversations/conv_")) {
		s.conversation(w, r)
		return
	}
	if r.Method == http.MethodGet && r.URL.Path == "/v1/realtime" {
		s.realtime(w, r)
		return
	}
	if r.Method == http.MethodGet && r.URL.Path == "/v1/responses" && strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		s.responsesWebSocket(w, r)
		return
	}
	if r.Method == http.MethodGet && r.URL.Path == "/v1/live/sessions" && strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		s.gptLive(w, r)
		return
	}
	if isGeminiLive(r) {
		s.geminiLive(w, r)
		return
	}
	if _, rest, ok := geminiVersioned(r.URL.Path); ok && r.Method == http.MethodPost && rest == "interactions" {
		s.interactions(w, r)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c := Call{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header.Clone(), Body: body}
	deployment := azureDeployment(r.URL.Path)
	bedrockAPI, bedrockModel := bedrockRoute(r.URL.EscapedPath())
	vertexAPI, vertexModel, vertexStream := vertexRoute(r.URL.Path)
	switch {
	case r.Method == http.MethodPost && bedrockAPI != "":
		c.API, c.Stream = bedrockAPI, bedrockStreaming(bedrockAPI)
	case r.Method == http.MethodPost && vertexAPI != "":
		c.API, c.Stream = vertexAPI, vertexStream
	case r.Method == http.MethodPost && (r.URL.Path == "/v1/chat/completions" || r.URL.Path == DatabricksChatPath):
		c.API = OpenAIChat
	case r.Method == http.MethodPost && deployment != "" && r.URL.Query().Get("api-version") != "":
		c.API = OpenAIChat
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages":
		c.API = AnthropicMessages
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages/count_tokens":
		c.API = AnthropicCountTokens
	case r.Method == http.MethodPost && r.URL.Path == "/v1/responses":
		c.API = OpenAIResponses
	case r.Method == http.MethodPost && r.URL.Path == "/v1/embeddings":
		c.API = OpenAIEmbeddings
	case r.Method == http.MethodPost && r.URL.Path == "/v1/audio/speech":
		c.API = OpenAISpeech
	case r.Method == http.MethodPost && r.URL.Path == "/v1/images/generations":
		c.API = OpenAIImages
	case r.Method == http.MethodPost && r.URL.Path == "/v1/ocr":
		c.API = MistralOCR
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/responses/resp_"):
		c.API = OpenAIRetrieve
	case r.Method == http.MethodPost && geminiModelPath(r.URL.Path):
		switch _, method, _ := strings.Cut(r.URL.Path, ":"); method {
		case "generateContent":
			c.API = GeminiGenerate
		case "streamGenerateContent":
			c.API, c.Stream = GeminiStream, true
		case "countTokens":
			c.API = GeminiCountTokens
		}
	}
	var req request
	jsonErr := json.Unmarshal(body, &req)
	if c.API == OpenAIRetrieve {
		req.Model, jsonErr = "gpt-4o-mini", nil // a GET has no body; the stored response's model
	}
	if c.API == OpenAIChat && deployment != "" && jsonErr == nil && req.Model == "" {
		req.Model = deployment // Azure: the deployment names the model
	}
	if bedrockModel != "" && c.API != "" {
		// Bedrock: the model is in the path, the operation says whether it streams.
		req.Model, req.Stream = bedrockModel, c.Stream
	}
	if vertexAPI != "" && c.API != "" {
		// Vertex AI: the path names the model (Claude's token counting excepted); the
		// method says whether it streams, or a Claude body's "stream".
		if vertexModel != "" {
			req.Model = vertexModel
		}
		req.Stream = req.Stream || c.Stream
	}
	geminiAPI := strings.HasPrefix(c.API, "gemini.")
	if geminiAPI && vertexAPI == "" {
		// The model is in the path: /{version}/models/{model}:{method}.
		_, rest, _ := geminiVersioned(r.URL.Path)
		req.Model, _, _ = strings.Cut(strings.TrimPrefix(rest, "models/"), ":")
		req.Stream = c.Stream
	}
	c.Model, c.Stream = req.Model, req.Stream
	c.IncludeUsage = req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	valid := c.API != "" && jsonErr == nil && req.Model != ""
	n := s.record(&c, r, valid)

	mistral := c.API == OpenAIChat && r.Host == MistralHost
	switch {
	case c.API == "":
		writeError(w, http.StatusNotFound, c.API, "no such endpoint: "+r.Method+" "+r.URL.Path)
		return
	case mistral && hasMember(body, "stream_options"):
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnprocessableEntity)
		fmt.Fprint(w, `{"object":"error","message":{"detail":[{"type":"extra_forbidden","loc":["body","stream_options"],"msg":"Extra inputs are not permitted","input":{"include_usage":true}}]},"type":"invalid_request_error","param":null,"code":null}`)
		return
	case r.URL.Path == DatabricksChatPath && strings.HasPrefix(req.Model, DatabricksBedrockModelPrefix) && hasMember(body, "stream_options"):
		databricksRefusal(w)
		return
	case deployment != "" && hasMember(body, "stream_options") && azureBeforeStreamOptions(r.URL.Query().Get("api-version")):
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"error":{"message":"Unknown parameter: 'stream_options'.","type":"invalid_request_error","param":"stream_options","code":"unknown_parameter"}}`)
		return
	case jsonErr != nil || req.Model == "":
		writeError(w, http.StatusBadRequest, c.API, "the body must be JSON with a model")
		return
	}
	model := req.Model
	if m, ok := s.Snapshots[model]; ok {
		model = m
	}
	if vertexAPI == AnthropicMessages {
		model = vertexClaudeModel(model)
	}
	ew := newEventWriter(w, c.Gzip)
	defer ew.close()
	u := c.Usage
	if c.API == AnthropicCountTokens {
		ew.start("application/json", http.StatusOK)
		ew.write(fmt.Sprintf(`{"input_tokens":%d}`, u.InputTokens))
		return
	}
	if c.API == OpenAIEmbeddings {
		w.Header().Set("X-Request-Id", fmt.Sprintf("req_fake%06d", n))
		ew.start("application/json", http.StatusOK)
		ew.write(embeddingsJSON(model, inputCount(req.Input), req.EncodingFormat == "base64", u))
		return
	}
	if geminiAPI {
		var tierField string
		if vertexAPI != "" {
			// Vertex AI says the tier it served in the usage's trafficType: its priority
			// tier when the request's header asked for it.
			traffic := "ON_DEMAND"
			switch shared := r.Header.Get("X-Vertex-AI-LLM-Shared-Request-Type"); {
			case strings.EqualFold(shared, "priority"):
				traffic = "ON_DEMAND_PRIORITY"
			case strings.EqualFold(shared, "flex"):
				traffic = "ON_DEMAND_FLEX" // its Flex PayGo
			}
			tierField = fmt.Sprintf(`"trafficType":%q`, traffic)
		} else if c.API != GeminiCountTokens {
			// The Gemini API says it in a header and in the usage's serviceTier.
			tier := "standard"
			if req.ServiceTier == "priority" || string(req.ServiceTierCamel) == `"priority"` {
				tier = "priority"
			}
			if req.ServiceTier == "flex" || string(req.ServiceTierCamel) == `"flex"` {
				tier = "flex" // its flex inference
			}
			w.Header().Set("X-Gemini-Service-Tier", tier)
			tierField = fmt.Sprintf(`"serviceTier":%q`, tier)
		}
		if t := s.toolCall(body, "functionResponse"); t != nil && c.API == GeminiStream {
			geminiFunctionCall(ew, model, *t, u, r.URL.Query().Get("alt") == "sse")
			return
		}
		geminiAnswer(ew, c.API, model, u, r.URL.Query().Get("alt") == "sse", tierField)
		return
	}
	if strings.HasPrefix(c.API, "bedrock.") {
		bedrockAnswer(w, ew, c, n, u)
		return
	}
	if c.API == OpenAISpeech {
		if req.StreamFormat == "sse" {
			// gpt-4o-mini-tts's SSE: base64 audio in four deltas, then the usage.
			ew.start("text/event-stream", http.StatusOK)
			chunk := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("\xff\xf3\x44\xc4", SpeechBytes/16)))
			for range 4 {
				ew.write(fmt.Sprintf("data: {\"type\":\"speech.audio.delta\",\"audio\":%q}\n\n", chunk))
			}
			ew.write(fmt.Sprintf("data: {\"type\":\"speech.audio.done\",\"usage\":{\"input_tokens\":%d,\"output_tokens\":%d,\"total_tokens\":%d}}\n\n",
				u.InputTokens, u.OutputTokens, u.InputTokens+u.OutputTokens))
			return
		}
		// Audio, and nothing about its cost: OpenAI's speech answers report no usage.
		var format string
		_ = json.Unmarshal(req.ResponseFormat, &format)
		audio, ok := testaudio.Speech(format)
		if !ok {
			http.Error(w, `{"error":{"message":"unknown response_format","type":"invalid_request_error"}}`, http.StatusBadRequest)
			return
		}
		ew.start(audio.ContentType, http.StatusOK)
		ew.write(string(audio.Bytes))
		return
	}
	if c.API == OpenAIImages {
		generateImage(ew, c.Stream, u)
		return
	}
	if c.API == MistralOCR {
		ew.start("application/json", http.StatusOK)
		ew.write(ocrJSON(model, u.OCRPages))
		return
	}
	if c.API == OpenAIRetrieve {
		ew.start("application/json", http.StatusOK)
		ew.write(responsesJSON(strings.TrimPrefix(r.URL.Path, "/v1/responses/"), model, "completed", u))
		return
	}
	if c.API == OpenAIResponses {
		id := fmt.Sprintf("resp_fake%06d", n)
		u.askedTier, u.servedTier = cmp.Or(req.ServiceTier, "auto"), chatTier(req.ServiceTier)
		if u.PriorityShort && (u.servedTier == "priority" || u.servedTier == "fast") {
			u.servedTier = "default"
		}
		w.Header().Set("X-Request-Id", fmt.Sprintf("req_fake%06d", n))
		if t := s.toolCall(body, "function_call_output"); t != nil {
			call := fmt.Sprintf("call_fake%06d", n)
			answerToolCall(ew, c.Stream, func() string {
				return responseObject(id, model, "completed", "["+responsesFunctionCallItem(id, call, *t, "completed")+"]", u)
			}, func() {
				responsesFunctionCallEvents(id, model, call, *t, u, func(typ, data string) { ew.write("event: " + typ + "\ndata: " + data + "\n\n") })
			})
			return
		}
		if !c.Stream {
			ew.start("application/json", http.StatusOK)
			ew.write(responsesJSON(id, model, "completed", u))
			return
		}
		ew.start("text/event-stream; charset=utf-8", http.StatusOK)
		responsesStream(ew, id, model, u)
		return
	}
	if c.API == OpenAIChat {
		id := fmt.Sprintf("chatcmpl-fake%06d", n)
		w.Header().Set("X-Request-Id", fmt.Sprintf("req_fake%06d", n))
		// A tool's result comes back as a "tool" message, which carries its call's id.
		if t := s.toolCall(body, "tool_call_id"); t != nil {
			call := fmt.Sprintf("call_fake%06d", n)
			answerToolCall(ew, c.Stream, func() string { return openAIToolCallJSON(id, model, call, *t, u) },
				func() { openAIToolCallStream(ew, id, model, call, *t, u, c.IncludeUsage) })
			return
		}
		if !c.Stream {
			ew.start("application/json", http.StatusOK)
			ew.write(openAIJSON(id, model, chatTier(req.ServiceTier), u))
			return
		}
		ew.start("text/event-stream; charset=utf-8", http.StatusOK)
		if mistral {
			mistralStream(ew, id, model, u)
			return
		}
		// OpenRouter ends every stream with its usage, asked or not.
		openAIStream(ew, id, model, chatTier(req.ServiceTier), u, c.IncludeUsage || r.Host == OpenRouterHost)
		return
	}
	id := fmt.Sprintf("msg_fake%06d", n)
	w.Header().Set("Request-Id", fmt.Sprintf("req_fake%06d", n))
	if t := s.toolCall(body, "tool_result"); t != nil {
		call := fmt.Sprintf("toolu_fake%06d", n)
		answerToolCall(ew, c.Stream, func() string { return anthropicToolUseJSON(id, model, call, *t, u) },
			func() { anthropicToolUseStream(ew, id, model, call, *t, u) })
		return
	}
	if !c.Stream {
		ew.start("application/json", http.StatusOK)
		ew.write(anthropicJSON(id, model, u, speedField(req.Speed)+geoField(req.InferenceGeo)))
		return
	}
	ew.start("text/event-stream; charset=utf-8", http.StatusOK)
	anthropicStream(ew, id, model, u, speedField(req.Speed)+geoField(req.InferenceGeo))
}

// answerToolCall answers a request with a call of the client's tool: whole (JSON) or,
// for a stream, as events writes it.
func answerToolCall(ew *eventWriter, stream bool, whole func() string, events func()) {
	if !stream {
		ew.start("application/json", http.StatusOK)
		ew.write(whole())
		return
	}
	ew.start("text/event-stream; charset=utf-8", http.StatusOK)
	events()
}

// anthropicToolUseJSON is Anthropic's message asking for a call (id call) of tool t.
func anthropicToolUseJSON(id, model, call string, t ToolUse, u Usage) string {
	return fmt.Sprintf(`{"id":%q,"type":"message","role":"assistant","model":%q,"content":[{"type":"tool_use","id":%q,"name":%q,"input":%s}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":%d,"cache_creation_input_tokens":%d,"cache_read_input_tokens":%d,%s"output_tokens":%d,"service_tier":"standard"}}`,
		id, model, call, t.Name, t.Input, u.InputTokens, u.CacheCreationInputTokens, u.CachedInputTokens, cacheCreation(u), u.OutputTokens)
}

// anthropicToolUseStream streams that message: message_start, the tool_use block with
// its input in one input_json_delta, message_delta (stop_reason tool_use, the output
// usage), message_stop.
func anthropicToolUseStream(ew *eventWriter, id, model, call string, t ToolUse, u Usage) {
	event := func(name, data string) { ew.write("event: " + name + "\ndata: " + data + "\n\n") }
	event("message_start", fmt.Sprintf(`{"type":"message_start","message":{"id":%q,"type":"message","role":"assistant","model":%q,"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":%d,"cache_creation_input_tokens":%d,"cache_read_input_tokens":%d,%s"output_tokens":1,"service_tier":"standard"}}}`,
		id, model, u.InputTokens, u.CacheCreationInputTokens, u.CachedInputTokens, cacheCreation(u)))
	event("content_block_start", fmt.Sprintf(`{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":%q,"name":%q,"input":{}}}`, call, t.Name))
	partial, _ := json.Marshal(t.Input)
	event("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":%s}}`, partial))
	event("content_block_stop", `{"type":"content_block_stop","index":0}`)
	event("message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":%d}}`, u.OutputTokens))
	event("message_stop", `{"type":"message_stop"}`)
}

// azureDeployment is the deployment an Azure OpenAI chat-completions path names
// (/openai/deployments/{deployment}/chat/completions), "" for any other path.
func azureDeployment(path string) string {
	rest, ok := strings.CutPrefix(path, "/openai/deployments/")
	if !ok {
		return ""
	}
	d, ok := strings.CutSuffix(rest, "/chat/completions")
	if !ok || strings.Contains(d, "/") {
		return ""
	}
	return d
}

// acceptsGzip reads Accept-Encoding (RFC 9110 12.5.3): gzip is allowed when listed, or
// covered by "*", with a non-zero weight.
func acceptsGzip(values []string) bool {
	gzipQ, starQ := -1.0, -1.0
	for _, v := range values {
		for _, part := range strings.Split(v, ",") {
			name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
			q := 1.0
			if k, val, ok := strings.Cut(strings.TrimSpace(params), "="); ok && strings.EqualFold(strings.TrimSpace(k), "q") {
				if f, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
					q = f
				}
			}
			switch strings.ToLower(strings.TrimSpace(name)) {
			case "gzip", "x-gzip":
				gzipQ = q
			case "*":
				starQ = q
			}
		}
	}
	if gzipQ >= 0 {
		return gzipQ > 0
	}
	return starQ > 0
}

// eventWriter writes an answer, compressed or not, flushing each piece to the client.
type eventWriter struct {
	w  http.ResponseWriter
	gz *gzip.Writer
}

func newEventWriter(w http.ResponseWriter, compress bool) *eventWriter {
	ew := &eventWriter{w: w}
	if compress {
		ew.gz = gzip.NewWriter(w)
	}
	return ew
}

func (e *eventWriter) start(contentType string, status int) {
	h := e.w.Header()
	h.Set("Content-Type", contentType)
	if e.gz != nil {
		h.Set("Content-Encoding", "gzip")
		h.Add("Vary", "Accept-Encoding")
	}
	e.w.WriteHeader(status)
}

// write sends one piece and flushes it through the compressor and the connection.
func (e *eventWriter) write(s string) {
	if e.gz != nil {
		_, _ = io.WriteString(e.gz, s)
		_ = e.gz.Flush()
	} else {
		_, _ = io.WriteString(e.w, s)
	}
	if f, ok := e.w.(http.Flusher); ok {
		f.Flush()
	}
}

func (e *eventWriter) close() {
	if e.gz != nil {
		_ = e.gz.Close()
	}
}

func writeError(w http.ResponseWriter, status int, api, msg string) {
	w.Header().Set("Content-Type", "application/json")
	if strings.HasPrefix(api, "bedrock.") {
		w.Header().Set("X-Amzn-Errortype", "ValidationException") // what the AWS SDKs read
	}
	w.WriteHeader(status)
	if strings.HasPrefix(api, "anthropic.") {
		fmt.Fprintf(w, `{"type":"error","error":{"type":"invalid_request_error","message":%q}}`, msg)
		return
	}
	if strings.HasPrefix(api, "bedrock.") {
		fmt.Fprintf(w, `{"message":%q}`, msg)
		return
	}
	fmt.Fprintf(w, `{"error":{"message":%q,"type":"invalid_request_error","param":null,"code":null}}`, msg)
}

// words is Text cut after each space: the pieces a stream sends.
func words() []string { return strings.SplitAfter(Text, " ") }

func openAIUsage(u Usage) string {
	cost := ""
	switch {
	case u.CostUSD != "" && u.CostParts:
		cost = `,"search_context_size":"low","cost":{"input_tokens_cost":0,"output_tokens_cost":0,"request_cost":0.005,"total_cost":` + u.CostUSD + `}`
	case u.CostUSD != "":
		cost = `,"cost":` + u.CostUSD + `,"is_byok":false`
	}
	cost += xaiCost(u)
	return fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d%s,"prompt_tokens_details":{"cached_tokens":%d%s,"audio_tokens":%d},"completion_tokens_details":{"reasoning_tokens":%d,"audio_tokens":%d,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}`,
		u.InputTokens, u.OutputTokens, u.InputTokens+u.OutputTokens+u.ReasoningApart, cost, u.CachedInputTokens, openAICacheWrites(u), u.AudioInputTokens,
		u.ReasoningApart, u.AudioOutputTokens)
}

// openAICacheWrites is the cache_write_tokens member of OpenAI's details (with its
// leading comma), "" when nothing was written: the models before GPT-5.6 leave it out.
func openAICacheWrites(u Usage) string {
	if u.CacheCreationInputTokens == 0 {
		return ""
	}
	return fmt.Sprintf(`,"cache_write_tokens":%d`, u.CacheCreationInputTokens)
}

// openAIJSON is a chat completion that ran at tier (chatTier).
func openAIJSON(id, model, tier string, u Usage) string {
	return fmt.Sprintf(`{"id":%q,"object":"chat.completion","created":1767225600,"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":%q,"refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],"usage":%s,"service_tier":%q,"system_fingerprint":"fp_fake"}`,
		id, model, Text, openAIUsage(u), tier)
}

// openAIToolCallJSON is a chat completion asking for a call (id call) of the client's
// function t (finish_reason "tool_calls", no content).
func openAIToolCallJSON(id, model, call string, t ToolUse, u Usage) string {
	return fmt.Sprintf(`{"id":%q,"object":"chat.completion","created":1767225600,"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":null,"refusal":null,"annotations":[],"tool_calls":[{"id":%q,"type":"function","function":{"name":%q,"arguments":%q}}]},"logprobs":null,"finish_reason":"tool_calls"}],"usage":%s,"service_tier":"default","system_fingerprint":"fp_fake"}`,
		id, model, call, t.Name, t.Input, openAIUsage(u))
}

// openAIToolCallStream streams that completion as OpenAI does: a first chunk with the
// call's id, name and empty arguments, the arguments in two pieces, a finish chunk
// ("tool_calls"), the usage chunk only when asked for, then [DONE].
func openAIToolCallStream(ew *eventWriter, id, model, call string, t ToolUse, u Usage, includeUsage bool) {
	usageField := ""
	if includeUsage {
		usageField = `,"usage":null`
	}
	chunk := func(delta, finish string) {
		ew.write(fmt.Sprintf(`data: {"id":%q,"object":"chat.completion.chunk","created":1767225600,"model":%q,"service_tier":"default","system_fingerprint":"fp_fake","choices":[{"index":0,"delta":%s,"logprobs":null,"finish_reason":%s}]%s}`+"\n\n",
			id, model, delta, finish, usageField))
	}
	chunk(fmt.Sprintf(`{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":%q,"type":"function","function":{"name":%q,"arguments":""}}],"refusal":null}`, call, t.Name), "null")
	half := len(t.Input) / 2
	for _, piece := range []string{t.Input[:half], t.Input[half:]} {
		chunk(fmt.Sprintf(`{"tool_calls":[{"index":0,"function":{"arguments":%q}}]}`, piece), "null")
	}
	chunk(`{}`, `"tool_calls"`)
	if includeUsage {
		ew.write(fmt.Sprintf(`data: {"id":%q,"object":"chat.completion.chunk","created":1767225600,"model":%q,"service_tier":"default","system_fingerprint":"fp_fake","choices":[],"usage":%s}`+"\n\n",
			id, model, openAIUsage(u)))
	}
	ew.write("data: [DONE]\n\n")
}

// chatTier is the service tier a chat completion runs at: priority when the request asks
// for it, else default (what OpenAI answers for "auto" and for no tier).
func chatTier(asked string) string {
	switch asked {
	case "priority", "flex", "fast", "ultrafast":
		return asked
	}
	return "default"
}

// openAIStream sends chat.completion.chunk events: a role chunk, one chunk per word, a
// finish chunk, the usage chunk only when asked for, then [DONE].
func openAIStream(ew *eventWriter, id, model, tier string, u Usage, includeUsage bool) {
	usageField := ""
	if includeUsage {
		usageField = `,"usage":null`
	}
	chunk := func(delta, finish string) {
		ew.write(fmt.Sprintf(`data: {"id":%q,"object":"chat.completion.chunk","created":1767225600,"model":%q,"service_tier":%q,"system_fingerprint":"fp_fake","choices":[{"index":0,"delta":%s,"logprobs":null,"finish_reason":%s}]%s}`+"\n\n",
			id, model, tier, delta, finish, usageField))
	}
	chunk(`{"role":"assistant","content":"","refusal":null}`, "null")
	for _, w := range words() {
		chunk(fmt.Sprintf(`{"content":%q}`, w), "null")
	}
	chunk(`{}`, `"stop"`)
	if includeUsage {
		ew.write(fmt.Sprintf(`data: {"id":%q,"object":"chat.completion.chunk","created":1767225600,"model":%q,"service_tier":%q,"system_fingerprint":"fp_fake","choices":[],"usage":%s}`+"\n\n",
			id, model, tier, openAIUsage(u)))
	}
	ew.write("data: [DONE]\n\n")
}

// azureBeforeStreamOptions tells whether an Azure OpenAI api-version is one from before
// stream_options (a date before 2024-08-01, "-preview" or not): Azure answers a body
// with the member 400 "Unknown parameter: 'stream_options'." on those, as reported by
// its users in 2024 (the versions are frozen contracts).
func azureBeforeStreamOptions(version string) bool {
	if len(version) < 10 {
		return false
	}
	_, err := time.Parse("2006-01-02", version[:10])
	return err == nil && version[:10] < "2024-08-01"
}

// DatabricksChatPath is the chat completions path of Databricks Model Serving's
// OpenAI-compatible API (its clients' base URL is https://<workspace>/serving-endpoints).
const DatabricksChatPath = "/serving-endpoints/chat/completions"

// DatabricksBedrockModelPrefix begins the names of the models the fake serves as
// Databricks serves its Claude models, through Amazon Bedrock: such a model refuses a body
// with stream_options (databricksRefusal), where the others take it.
const DatabricksBedrockModelPrefix = "databricks-claude"

// databricksRefusal answers as Databricks answered OpenCode's stream of a Claude model
// that carried stream_options.include_usage (reported 2025-11-24): 400, gzipped whatever
// the request offered, with Bedrock's validation error type. The body's words are
// Bedrock's own for the key (as litellm's users reported them): the report left its
// body out.
func databricksRefusal(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Encoding", "gzip")
	w.Header().Set("X-Amzn-Errortype", "ValidationException:http://internal.amazon.com/coral/com.amazon.bedrock/")
	w.WriteHeader(http.StatusBadRequest)
	zw := gzip.NewWriter(w)
	fmt.Fprint(zw, `{"error_code":"BAD_REQUEST","message":"{\"message\":\"extraneous key [include_usage] is not permitted\"}"}`)
	_ = zw.Close()
}

// OpenRouterHost is OpenRouter's host, which the fake answers as OpenRouter does: every
// chat stream ends with its usage event, whether stream_options asked for it or not
// (OpenRouter documents the option as deprecated, of no effect).
const OpenRouterHost = "openrouter.ai"

// MistralHost is the host of Mistral's API, which the fake answers as Mistral does.
const MistralHost = "api.mistral.ai"

// hasMember tells whether body is a JSON object with a member named key.
func hasMember(body []byte, key string) bool {
	var members map[string]json.RawMessage
	if json.Unmarshal(body, &members) != nil {
		return false
	}
	_, ok := members[key]
	return ok
}

// mistralStream is a chat completion stream as Mistral's API sends it: its usage in the
// last chunk, beside the finish reason, whether the request asked for it or not.
func mistralStream(ew *eventWriter, id, model string, u Usage) {
	chunk := func(delta, finish, usage string) {
		ew.write(fmt.Sprintf(`data: {"id":%q,"object":"chat.completion.chunk","created":1767225600,"model":%q,"choices":[{"index":0,"delta":%s,"finish_reason":%s}]%s}`+"\n\n",
			id, model, delta, finish, usage))
	}
	chunk(`{"role":"assistant","content":""}`, "null", "")
	for _, w := range words() {
		chunk(fmt.Sprintf(`{"content":%q}`, w), "null", "")
	}
	chunk(`{"content":""}`, `"stop"`, `,"usage":`+openAIUsage(u))
	ew.write("data: [DONE]\n\n")
}

// transcribe answers a transcription or a translation: the upload's model, the text, the
// usage. whisper-1 is billed by duration: its usage is {"type": "duration", "seconds"},
// with verbose_json also the duration and a segment, and in the text formats (text, srt,
// vtt) there is no usage at all, only the transcript. The gpt-4o transcribe models report
// tokens, and with stream=true answer transcript.text.delta events (one per word) and a
// transcript.text.done with the text and the usage.
// conversation answers OpenAI's conversation create and update as OpenAI does: the
// conversation object (its id, created_at and metadata), which stores items, generates
// nothing and reports no usage.
func (s *Server) conversation(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c := Call{API: OpenAIConversations, Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body}
	n := s.record(&c, r, false)
	id := strings.TrimPrefix(r.URL.Path, "/v1/conversations/")
	if r.URL.Path == "/v1/conversations" {
		id = fmt.Sprintf("conv_fake%06d", n)
	}
	var req struct {
		Metadata map[string]string `json:"metadata"`
	}
	if json.Unmarshal(body, &req) != nil {
		writeError(w, http.StatusBadRequest, c.API, "the body must be JSON")
		return
	}
	if req.Metadata == nil {
		req.Metadata = map[string]string{}
	}
	meta, _ := json.Marshal(req.Metadata)
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":%q,"object":"conversation","created_at":1764720000,"metadata":%s}`, id, meta)
}

// stored answers a POST of administration (storedObjects) with an object of its type,
// an id and nothing else: no usage, no model, no text. Its body (JSON, or a multipart
// upload) is read whole and kept as the Call's.
func (s *Server) stored(w http.ResponseWriter, r *http.Request, object string) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c := Call{API: Administration, Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header.Clone(), Body: body}
	n := s.record(&c, r, false)
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":"%s_fake%06d","type":%q,"created_at":"2026-12-03T00:00:00Z"}`, object, n, object)
}

func (s *Server) transcribe(w http.ResponseWriter, r *http.Request) {
	c := Call{API: OpenAITranscription, Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone()}
	if r.URL.Path == "/v1/audio/translations" {
		c.API = OpenAITranslation
	}
	if err := r.ParseMultipartForm(1 << 20); err != nil {
		writeError(w, http.StatusBadRequest, c.API, "the body must be multipart/form-data: "+err.Error())
		return
	}
	f, _, err := r.FormFile("file")
	if err != nil {
		writeError(w, http.StatusBadRequest, c.API, "no file")
		return
	}
	n, _ := io.Copy(io.Discard, f)
	c.Body, c.Model, c.Stream = []byte(strconv.FormatInt(n, 10)), r.FormValue("model"), r.FormValue("stream") == "true"
	if s.Usage != nil {
		c.Usage = s.Usage(c)
	}
	s.mu.Lock()
	s.seq++
	s.calls = append(s.calls, c)
	s.mu.Unlock()
	u := c.Usage
	if c.Model == "whisper-1" {
		seconds := strconv.FormatFloat(float64(u.AudioMillis)/1000, 'f', -1, 64)
		switch format := r.FormValue("response_format"); format {
		case "text", "srt", "vtt":
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			fmt.Fprintln(w, Text)
		case "verbose_json":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"task":"transcribe","language":"english","duration":%s,"text":%q,"segments":[{"id":0,"seek":0,"start":0.0,"end":%s,"text":%q,"tokens":[50364,400],"temperature":0.0,"avg_logprob":-0.2,"compression_ratio":1.2,"no_speech_prob":0.01}],"usage":{"type":"duration","seconds":%s}}`,
				seconds, Text, seconds, Text, seconds)
		default:
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"text":%q,"usage":{"type":"duration","seconds":%s}}`, Text, seconds)
		}
		return
	}
	usage := fmt.Sprintf(`{"type":"tokens","input_tokens":%d,"input_token_details":{"text_tokens":0,"audio_tokens":%d},"output_tokens":%d,"total_tokens":%d}`,
		u.InputTokens, u.InputTokens, u.OutputTokens, u.InputTokens+u.OutputTokens)
	if c.Stream {
		ew := newEventWriter(w, false)
		ew.start("text/event-stream", http.StatusOK)
		for i, word := range strings.Fields(Text) {
			if i > 0 {
				word = " " + word
			}
			ew.write(fmt.Sprintf("data: {\"type\":\"transcript.text.delta\",\"delta\":%q}\n\n", word))
		}
		ew.write(fmt.Sprintf("data: {\"type\":\"transcript.text.done\",\"text\":%q,\"usage\":%s}\n\n", Text, usage))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"text":%q,"usage":%s}`, Text, usage)
}

// geminiModalities is a *TokensDetails list: the modalities counted, 0 left out.
func geminiModalities(text, audio int64) string {
	var entries []string
	if text > 0 {
		entries = append(entries, fmt.Sprintf(`{"modality":"TEXT","tokenCount":%d}`, text))
	}
	if audio > 0 {
		entries = append(entries, fmt.Sprintf(`{"modality":"AUDIO","tokenCount":%d}`, audio))
	}
	return "[" + strings.Join(entries, ",") + "]"
}

// geminiAnswer answers a Gemini call: a token count, a whole answer, or a stream of one
// chunk per word whose last gives the finishReason, as events when sse (alt=sse), else as
// the elements of a JSON array. Its usage has tierField, the field that says the tier it
// ran at, unless it is "".
func geminiAnswer(ew *eventWriter, api, model string, u Usage, sse bool, tierField string) {
	if api == GeminiCountTokens {
		ew.start("application/json", http.StatusOK)
		ew.write(fmt.Sprintf(`{"totalTokens":%d}`, u.InputTokens))
		return
	}
	candidate := func(text, finish string) string {
		if finish != "" {
			finish = `,"finishReason":"` + finish + `"` + grounding(u)
		}
		return fmt.Sprintf(`{"candidates":[{"content":{"parts":[{"text":%q}],"role":"model"}%s,"index":0}]`, text, finish)
	}
	if api == GeminiGenerate {
		ew.start("application/json", http.StatusOK)
		ew.write(candidate(Text, "STOP") + fmt.Sprintf(`,"usageMetadata":%s,"modelVersion":%q,"responseId":"fake"}`, geminiUsage(u, true, tierField), model))
		return
	}
	ct := "application/json; charset=UTF-8"
	if sse {
		ct = "text/event-stream"
	}
	ew.start(ct, http.StatusOK)
	ws := words()
	for i, w := range ws {
		last := i == len(ws)-1
		finish := ""
		if last {
			finish = "STOP"
		}
		chunk := candidate(w, finish) + fmt.Sprintf(`,"usageMetadata":%s,"modelVersion":%q,"responseId":"fake"}`, geminiUsage(u, last, tierField), model)
		switch {
		case sse:
			chunk = "data: " + chunk + "\r\n\r\n"
		case i == 0:
			chunk = "[" + chunk // "[" chunk "\r\n,\r\n" chunk ... "\r\n]", as Google streams it
		default:
			chunk = "\r\n,\r\n" + chunk
		}
		if last && !sse {
			chunk += "\r\n]"
		}
		ew.write(chunk)
	}
}

// geminiUsage is a Gemini answer's usageMetadata: the prompt's counts, and with final the
// candidates' (a quarter of u's output as thoughts), each by modality; tierField, when
// set, is one more member (the service tier the answer ran at).
func geminiUsage(u Usage, final bool, tierField string) string {
	thoughts := u.OutputTokens / 4
	// Gemini leaves a count of 0 out.
	var b strings.Builder
	fmt.Fprintf(&b, `{"promptTokenCount":%d`, u.InputTokens)
	total := u.InputTokens + u.ToolUsePromptTokens
	if u.ToolUsePromptTokens > 0 {
		fmt.Fprintf(&b, `,"toolUsePromptTokenCount":%d`, u.ToolUsePromptTokens)
	}
	if final {
		fmt.Fprintf(&b, `,"candidatesTokenCount":%d,"thoughtsTokenCount":%d`, u.OutputTokens-thoughts, thoughts)
		total += u.OutputTokens
	}
	if u.CachedInputTokens > 0 {
		fmt.Fprintf(&b, `,"cachedContentTokenCount":%d`, u.CachedInputTokens)
		fmt.Fprintf(&b, `,"cacheTokensDetails":%s`, geminiModalities(u.CachedInputTokens-u.CachedAudioInputTokens, u.CachedAudioInputTokens))
	}
	fmt.Fprintf(&b, `,"promptTokensDetails":%s`, geminiModalities(u.InputTokens-u.AudioInputTokens, u.AudioInputTokens))
	if final {
		fmt.Fprintf(&b, `,"candidatesTokensDetails":%s`, geminiModalities(u.OutputTokens-thoughts-u.AudioOutputTokens, u.AudioOutputTokens))
	}
	if tierField != "" {
		b.WriteString("," + tierField)
	}
	fmt.Fprintf(&b, `,"totalTokenCount":%d}`, total)
	return b.String()
}

// geminiFunctionCall streams a Gemini answer that calls the client's function t (its
// input the call's args): one chunk, the functionCall part, finishReason STOP and u's
// usage.
func geminiFunctionCall(ew *eventWriter, model string, t ToolUse, u Usage, sse bool) {
	chunk := fmt.Sprintf(`{"candidates":[{"content":{"parts":[{"functionCall":{"name":%q,"args":%s}}],"role":"model"},"finishReason":"STOP","index":0}],`+
		`"usageMetadata":%s,"modelVersion":%q,"responseId":"fake"}`, t.Name, t.Input, geminiUsage(u, true, ""), model)
	if sse {
		ew.start("text/event-stream", http.StatusOK)
		ew.write("data: " + chunk + "\r\n\r\n")
		return
	}
	ew.start("application/json; charset=UTF-8", http.StatusOK)
	ew.write("[" + chunk + "\r\n]")
}

// grounding is a Gemini candidate's groundingMetadata member (with its comma) listing
// u's web searches as the queries Grounding with Google Search ran, and the sources it
// cites (a web page; two places of Grounding with Google Maps when u.MapsGrounded); ""
// without either.
func grounding(u Usage) string {
	if u.WebSearchRequests == 0 && u.ImageSearchQueries == 0 && !u.MapsGrounded {
		return ""
	}
	var fields, chunks, cited []string
	if u.WebSearchRequests > 0 {
		queries := make([]string, u.WebSearchRequests)
		for i := range queries {
			queries[i] = fmt.Sprintf("%q", fmt.Sprint("how are tolls paid ", i))
		}
		fields = append(fields, `"webSearchQueries":[`+strings.Join(queries, ",")+`]`, `"searchEntryPoint":{"renderedContent":"<div></div>"}`)
		chunks = append(chunks, `{"web":{"uri":"https://example.com/tolls","title":"example.com"}}`)
	}
	if u.ImageSearchQueries > 0 {
		queries := make([]string, u.ImageSearchQueries)
		for i := range queries {
			queries[i] = fmt.Sprintf("%q", fmt.Sprint("toll booth photo ", i))
		}
		fields = append(fields, `"imageSearchQueries":[`+strings.Join(queries, ",")+`]`)
		chunks = append(chunks, `{"image":{"uri":"https://example.com/tolls","image_uri":"https://example.com/booth.jpg"}}`)
	}
	if u.MapsGrounded {
		for i, place := range []string{"Toll Plaza", "Bridge Toll Office"} {
			chunks = append(chunks, fmt.Sprintf(`{"maps":{"uri":"https://maps.google.com/?cid=%d","title":%q,"placeId":"places/ChIJfake%d"}}`, i+1, place, i+1))
		}
		fields = append(fields, `"googleMapsWidgetContextToken":"widgetcontent/fake"`)
	}
	for i := range chunks {
		cited = append(cited, strconv.Itoa(i))
	}
	fields = append(fields, `"groundingChunks":[`+strings.Join(chunks, ",")+`]`,
		`"groundingSupports":[{"segment":{"endIndex":25,"text":`+fmt.Sprintf("%q", Text)+`},"groundingChunkIndices":[`+strings.Join(cited, ",")+`]}]`)
	return `,"groundingMetadata":{` + strings.Join(fields, ",") + `}`
}

// inputCount is how many inputs an embeddings request has: the length of an array of
// strings or of token arrays, else one.
func inputCount(input json.RawMessage) int {
	var many []json.RawMessage
	if json.Unmarshal(input, &many) == nil && len(many) > 0 {
		if _, err := strconv.Atoi(string(many[0])); err != nil {
			return len(many) // strings, or arrays of tokens
		}
	}
	return 1 // a string, or one array of tokens
}

// embeddingsJSON is an embeddings list of n vectors, then the usage (input tokens only).
func embeddingsJSON(model string, n int, base64Vectors bool, u Usage) string {
	var b strings.Builder
	b.WriteString(`{"object":"list","data":[`)
	raw := make([]byte, 4*EmbeddingDimensions)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"object":"embedding","index":%d,"embedding":`, i)
		if base64Vectors {
			for d := range EmbeddingDimensions {
				binary.LittleEndian.PutUint32(raw[4*d:], math.Float32bits(embeddingValue(i, d)))
			}
			fmt.Fprintf(&b, `%q}`, base64.StdEncoding.EncodeToString(raw))
			continue
		}
		b.WriteByte('[')
		for d := range EmbeddingDimensions {
			if d > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.FormatFloat(float64(embeddingValue(i, d)), 'g', -1, 32))
		}
		b.WriteString(`]}`)
	}
	fmt.Fprintf(&b, `],"model":%q,"usage":{"prompt_tokens":%d,"total_tokens":%d}}`, model, u.InputTokens, u.InputTokens)
	return b.String()
}

// embeddingValue is component d of vector i: small numbers of many digits, as real
// embeddings are.
func embeddingValue(i, d int) float32 {
	return float32(math.Sin(float64(i*EmbeddingDimensions+d+1))) / 10
}

// responsesJSON is a Responses API response object; with status "in_progress" it is the
// one response.created carries (no output, no usage).
func responsesJSON(id, model, status string, u Usage) string {
	output := `[]`
	if status == "completed" {
		output = fmt.Sprintf(`[%s{"type":"message","id":"msg_%s","status":"completed","role":"assistant","content":[{"type":"output_text","text":%q,"annotations":[],"logprobs":[]}]}]`, searchCalls(u), id, Text)
	}
	return responseObject(id, model, status, output, u)
}

// responseObject is a Responses API response object of the given output items (a JSON
// array); a completed one carries u as its usage.
func responseObject(id, model, status, output string, u Usage) string {
	usage := `null`
	if status == "completed" {
		usage = fmt.Sprintf(`{"input_tokens":%d,"input_tokens_details":{"cached_tokens":%d%s},"output_tokens":%d,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":%d%s}`,
			u.InputTokens, u.CachedInputTokens, openAICacheWrites(u), u.OutputTokens, u.InputTokens+u.OutputTokens, xaiCost(u))
	}
	tier := u.servedTier // the tier it ran at, once it is done
	if status == "in_progress" {
		tier = u.askedTier // the request's, echoed
	}
	if tier != "" {
		tier = fmt.Sprintf(`,"service_tier":%q`, tier)
	}
	return fmt.Sprintf(`{"id":%q,"object":"response","created_at":1767225600,"status":%q,"error":null,"incomplete_details":null,"instructions":null,"max_output_tokens":null,"model":%q,"output":%s,"parallel_tool_calls":true,"previous_response_id":null%s,"store":true,"temperature":1.0,"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":%s%s,"metadata":{}}`,
		id, status, model, output, tier, usage, toolUsage(status, u))
}

// responsesFunctionCallEvents are the events of a response that calls the client's
// function t (call id call): response.created, the function_call item added, its
// arguments in one delta and done, the item done, and response.completed with the item
// as its output and u's usage.
func responsesFunctionCallEvents(id, model, call string, t ToolUse, u Usage, emit func(typ, data string)) {
	seq := 0
	event := func(typ, fields string) {
		emit(typ, fmt.Sprintf("{\"type\":%q,\"sequence_number\":%d,%s}", typ, seq, fields))
		seq++
	}
	args, _ := json.Marshal(t.Input)
	item := func(status string) string { return responsesFunctionCallItem(id, call, t, status) }
	at := fmt.Sprintf(`"item_id":"fc_%s","output_index":0`, id)
	event("response.created", `"response":`+responsesJSON(id, model, "in_progress", u))
	event("response.output_item.added", `"output_index":0,"item":`+item("in_progress"))
	event("response.function_call_arguments.delta", at+`,"delta":`+string(args))
	event("response.function_call_arguments.done", at+`,"arguments":`+string(args))
	event("response.output_item.done", `"output_index":0,"item":`+item("completed"))
	event("response.completed", `"response":`+responseObject(id, model, "completed", "["+item("completed")+"]", u))
}

// responsesFunctionCallItem is the function_call output item of response id calling t,
// at status.
func responsesFunctionCallItem(id, call string, t ToolUse, status string) string {
	args, _ := json.Marshal(t.Input)
	if status == "in_progress" {
		// As OpenAI streams it: the item added with no arguments yet, which come in deltas
		// (a client concatenating both would read them twice).
		args = []byte(`""`)
	}
	return fmt.Sprintf(`{"type":"function_call","id":"fc_%s","call_id":%q,"name":%q,"arguments":%s,"status":%q}`, id, call, t.Name, args, status)
}

// responsesWarmupEvents are the events of a warmup in the Responses API's WebSocket
// mode (a response.create with "generate": false: the request's state prepared, no model
// output): response.created, then response.completed with no output, its usage the
// input u reports (cached and written to the cache included) and no output.
func responsesWarmupEvents(id, model string, u Usage, emit func(typ, data string)) {
	in := Usage{InputTokens: u.InputTokens, CachedInputTokens: u.CachedInputTokens, CacheCreationInputTokens: u.CacheCreationInputTokens}
	emit("response.created", fmt.Sprintf(`{"type":"response.created","sequence_number":0,"response":%s}`, responsesJSON(id, model, "in_progress", in)))
	emit("response.completed", fmt.Sprintf(`{"type":"response.completed","sequence_number":1,"response":%s}`, responseObject(id, model, "completed", `[]`, in)))
}

// toolUsage is a completed response's tool_usage (with its leading comma), the hosted
// tools' usage beside the model's: the image model's input as u says it (its text and
// image parts split in halves), its output as 1,056 tokens an image (which the enforcer
// does not read: it charges each image its size and quality), and the web searches.
// Empty when u says no image model input.
func toolUsage(status string, u Usage) string {
	if status != "completed" || u.ImageToolInputTokens == 0 && u.ImageToolCachedInputTokens == 0 {
		return ""
	}
	in, cached, out := u.ImageToolInputTokens, u.ImageToolCachedInputTokens, 1_056*u.ImageGenerationCalls
	return fmt.Sprintf(`,"tool_usage":{"image_gen":{"input_tokens":%d,"input_tokens_details":{"image_tokens":%d,"text_tokens":%d},"output_tokens":%d,"total_tokens":%d,"cached_tokens":%d,"cached_tokens_details":{"cached_image_tokens":%d,"cached_text_tokens":%d},"output_tokens_details":{"image_tokens":%d,"text_tokens":0}},"web_search":{"num_requests":%d}}`,
		in, in/2, in-in/2, out, in+out, cached, cached/2, cached-cached/2, out, u.WebSearchRequests)
}

// responsesStream sends the Responses API's typed events: response.created and
// in_progress, the message item and its text part, one output_text delta per word, the
// done events, and response.completed with the whole response and its usage.
func responsesStream(ew *eventWriter, id, model string, u Usage) {
	responsesEvents(id, model, u, func(typ, data string) { ew.write("event: " + typ + "\ndata: " + data + "\n\n") })
}

// responsesEvents makes the events responsesStream sends, each given to emit as its type
// and its JSON (the Responses API's WebSocket mode sends the same JSON, a message each).
func responsesEvents(id, model string, u Usage, emit func(typ, data string)) {
	seq := 0
	event := func(typ, fields string) {
		emit(typ, fmt.Sprintf("{\"type\":%q,\"sequence_number\":%d,%s}", typ, seq, fields))
		seq++
	}
	event("response.created", `"response":`+responsesJSON(id, model, "in_progress", u))
	event("response.in_progress", `"response":`+responsesJSON(id, model, "in_progress", u))
	calls := toolCalls(u)
	for i, c := range calls {
		at := fmt.Sprintf(`"output_index":%d`, i)
		event("response.output_item.added", at+fmt.Sprintf(`,"item":{"type":%q,"id":%q,"status":"in_progress"}`, c.typ, c.id))
		phases := []string{"in_progress", "searching", "completed"}
		switch c.typ {
		case "image_generation_call":
			phases[1] = "generating"
		case "code_interpreter_call":
			phases[1] = "interpreting"
		}
		for _, phase := range phases {
			event("response."+c.typ+"."+phase, at+fmt.Sprintf(`,"item_id":%q`, c.id))
		}
		event("response.output_item.done", at+`,"item":`+c.item)
	}
	msg := len(calls) // the message's output index, after the tools' calls
	item := fmt.Sprintf(`"item_id":"msg_%s","output_index":%d`, id, msg)
	event("response.output_item.added", fmt.Sprintf(`"output_index":%d,"item":{"type":"message","id":"msg_%s","status":"in_progress","role":"assistant","content":[]}`, msg, id))
	event("response.content_part.added", item+`,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}`)
	for _, w := range words() {
		event("response.output_text.delta", item+fmt.Sprintf(`,"content_index":0,"delta":%q,"logprobs":[]`, w))
	}
	event("response.output_text.done", item+fmt.Sprintf(`,"content_index":0,"text":%q,"logprobs":[]`, Text))
	event("response.content_part.done", item+fmt.Sprintf(`,"content_index":0,"part":{"type":"output_text","text":%q,"annotations":[]}`, Text))
	event("response.output_item.done", fmt.Sprintf(`"output_index":%d,"item":{"type":"message","id":"msg_%s","status":"completed","role":"assistant","content":[{"type":"output_text","text":%q,"annotations":[]}]}`, msg, id, Text))
	event("response.completed", `"response":`+responsesJSON(id, model, "completed", u))
}

// toolCall is one output item of a Responses tool's call.
type toolCall struct{ typ, id, item string }

// toolCalls are the output items of u's web searches, then of its file searches.
func toolCalls(u Usage) []toolCall {
	var out []toolCall
	for i := range u.WebSearchRequests {
		id := fmt.Sprintf("ws_%d", i)
		out = append(out, toolCall{"web_search_call", id,
			fmt.Sprintf(`{"type":"web_search_call","id":%q,"status":"completed","action":{"type":"search","query":"tolls %d"}}`, id, i)})
	}
	for i := range u.FileSearchCalls {
		id := fmt.Sprintf("fs_%d", i)
		out = append(out, toolCall{"file_search_call", id,
			fmt.Sprintf(`{"type":"file_search_call","id":%q,"status":"completed","queries":["tolls %d"],"results":null}`, id, i)})
	}
	for i := range u.ImageGenerationCalls {
		id := fmt.Sprintf("ig_%d", i)
		out = append(out, toolCall{"image_generation_call", id,
			fmt.Sprintf(`{"type":"image_generation_call","id":%q,"status":"completed","result":"iVBORw0KGgo=","revised_prompt":"a toll gate %d"}`, id, i)})
	}
	if u.Container != "" {
		out = append(out, toolCall{"code_interpreter_call", "ci_0",
			fmt.Sprintf(`{"type":"code_interpreter_call","id":"ci_0","status":"completed","code":"print(6 * 7)","container_id":%q,"outputs":[{"type":"logs","logs":"42"}]}`, u.Container)})
	}
	if u.ShellContainer != "" {
		out = append(out, toolCall{"shell_call", "sh_0",
			fmt.Sprintf(`{"type":"shell_call","id":"sh_0","call_id":"call_sh0","status":"completed","action":{"commands":["ls /mnt/data"]},"environment":{"type":"container_reference","container_id":%q}}`, u.ShellContainer)})
	}
	return out
}

// searchCalls are the output items of u's tool calls, each followed by a comma.
func searchCalls(u Usage) string {
	var b strings.Builder
	for _, c := range toolCalls(u) {
		b.WriteString(c.item + ",")
	}
	return b.String()
}

// anthropicJSON is Anthropic's message; extra are more fields of its usage, each with its
// leading comma (speedField, geoField).
func anthropicJSON(id, model string, u Usage, extra string) string {
	return fmt.Sprintf(`{"id":%q,"type":"message","role":"assistant","model":%q,"content":[{"type":"text","text":%q}],"stop_reason":"end_turn","stop_sequence":null,%s"usage":{"input_tokens":%d,"cache_creation_input_tokens":%d,"cache_read_input_tokens":%d,%s%s%s"output_tokens":%d,"service_tier":"standard"%s}}`,
		id, model, Text, container(u), u.InputTokens, u.CacheCreationInputTokens, u.CachedInputTokens, cacheCreation(u), serverToolUse(u), iterations(u), u.OutputTokens, extra)
}

// container is Anthropic's container member and a comma, when the answer's code tools ran
// in one ("" otherwise).
func container(u Usage) string {
	if u.Container == "" {
		return ""
	}
	return fmt.Sprintf(`"container":{"id":%q,"expires_at":"2026-11-29T20:00:00Z"},`, u.Container)
}

// geoField is the usage's inference_geo field, with its leading comma, of a request that
// named one ("" for one that did not).
func geoField(asked string) string {
	if asked == "" {
		return ""
	}
	return fmt.Sprintf(`,"inference_geo":%q`, asked)
}

// speedField is the usage's speed field, with its leading comma, of a request that
// asked for a speed ("" for one that did not): "fast" when it asked for fast, else
// "standard".
func speedField(asked string) string {
	switch asked {
	case "":
		return ""
	case "fast":
		return `,"speed":"fast"`
	}
	return `,"speed":"standard"`
}

// iterations is Anthropic's usage.iterations array and a comma, when the request
// compacted its context or consulted an advisor ("" otherwise).
func iterations(u Usage) string {
	compacted := u.CompactionInputTokens != 0 || u.CompactionOutputTokens != 0
	advised := u.AdvisorInputTokens != 0 || u.AdvisorOutputTokens != 0 || u.AdvisorCachedInputTokens != 0
	if !compacted && !advised {
		return ""
	}
	var entries []string
	if compacted {
		entries = append(entries, fmt.Sprintf(`{"type":"compaction","input_tokens":%d,"output_tokens":%d,"cache_read_input_tokens":0,"cache_creation_input_tokens":0}`,
			u.CompactionInputTokens, u.CompactionOutputTokens))
	}
	entries = append(entries, fmt.Sprintf(`{"type":"message","input_tokens":%d,"output_tokens":%d,"cache_read_input_tokens":%d,"cache_creation_input_tokens":%d}`,
		u.InputTokens, u.OutputTokens, u.CachedInputTokens, u.CacheCreationInputTokens))
	if advised {
		entries = append(entries, fmt.Sprintf(`{"type":"advisor_message","model":%q,"input_tokens":%d,"output_tokens":%d,"cache_read_input_tokens":%d,"cache_creation_input_tokens":0,"cache_creation":null}`,
			u.AdvisorModel, u.AdvisorInputTokens, u.AdvisorOutputTokens, u.AdvisorCachedInputTokens))
	}
	return `"iterations":[` + strings.Join(entries, ",") + `],`
}

// serverToolUse is Anthropic's server_tool_use object and a comma, when the request made
// web searches ("" otherwise).
func serverToolUse(u Usage) string {
	if u.WebSearchRequests == 0 {
		return ""
	}
	return fmt.Sprintf(`"server_tool_use":{"web_search_requests":%d},`, u.WebSearchRequests)
}

// cacheCreation is Anthropic's cache_creation object (the writes by lifetime) and a
// comma, as Anthropic sends it.
func cacheCreation(u Usage) string {
	return fmt.Sprintf(`"cache_creation":{"ephemeral_5m_input_tokens":%d,"ephemeral_1h_input_tokens":%d},`,
		u.CacheCreationInputTokens-u.CacheCreation1hInputTokens, u.CacheCreation1hInputTokens)
}

// anthropicStream sends the messages stream: message_start (input usage), a text
// block of one delta per word, message_delta (output usage), message_stop.
func anthropicStream(ew *eventWriter, id, model string, u Usage, extra string) {
	event := func(name, data string) { ew.write("event: " + name + "\ndata: " + data + "\n\n") }
	event("message_start", fmt.Sprintf(`{"type":"message_start","message":{"id":%q,"type":"message","role":"assistant","model":%q,"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":%d,"cache_creation_input_tokens":%d,"cache_read_input_tokens":%d,%s"output_tokens":1,"service_tier":"standard"%s}}}`,
		id, model, u.InputTokens, u.CacheCreationInputTokens, u.CachedInputTokens, cacheCreation(u), extra))
	event("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
	event("ping", `{"type": "ping"}`)
	for _, w := range words() {
		event("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":%q}}`, w))
	}
	event("content_block_stop", `{"type":"content_block_stop","index":0}`)
	event("message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{%s"stop_reason":"end_turn","stop_sequence":null},"usage":{%s%s"output_tokens":%d}}`,
		container(u), serverToolUse(u), iterations(u), u.OutputTokens))
	event("message_stop", `{"type":"message_stop"}`)
}

// generateImage answers an image generation: one tiny PNG in base64, and u's tokens in
// the usage of the JSON answer or, streamed, of image_generation.completed after two
// partial images.
func generateImage(ew *eventWriter, stream bool, u Usage) {
	const png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
	usage := fmt.Sprintf(`{"total_tokens":%d,"input_tokens":%d,"output_tokens":%d,"input_tokens_details":{"text_tokens":%d,"image_tokens":0}}`,
		u.InputTokens+u.OutputTokens, u.InputTokens, u.OutputTokens, u.InputTokens)
	if !stream {
		ew.start("application/json", http.StatusOK)
		ew.write(fmt.Sprintf(`{"created":1767225600,"background":"opaque","data":[{"b64_json":%q}],"output_format":"png","quality":"high","size":"1024x1024","usage":%s}`, png, usage))
		return
	}
	ew.start("text/event-stream", http.StatusOK)
	for i := range 2 {
		ew.write(fmt.Sprintf("event: image_generation.partial_image\ndata: {\"type\":\"image_generation.partial_image\",\"b64_json\":%q,\"created_at\":1767225600,\"size\":\"1024x1024\",\"quality\":\"high\",\"background\":\"opaque\",\"output_format\":\"png\",\"partial_image_index\":%d}\n\n", png, i))
	}
	ew.write(fmt.Sprintf("event: image_generation.completed\ndata: {\"type\":\"image_generation.completed\",\"b64_json\":%q,\"created_at\":1767225600,\"size\":\"1024x1024\",\"quality\":\"high\",\"background\":\"opaque\",\"output_format\":\"png\",\"usage\":%s}\n\n", png, usage))
}

// ocrJSON is Mistral's OCR answer: a markdown page for each page read, the model, and
// the pages it bills (usage_info.pages_processed), as its API and SDKs shape it.
func ocrJSON(model string, pages int64) string {
	var b strings.Builder
	b.WriteString(`{"pages":[`)
	for i := range pages {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"index":%d,"markdown":%q,"images":[],"dimensions":{"dpi":200,"height":2200,"width":1700}}`, i, "# "+Text)
	}
	fmt.Fprintf(&b, `],"model":%q,"document_annotation":null,"usage_info":{"pages_processed":%d,"doc_size_bytes":%d}}`, model, pages, 40_000*pages)
	return b.String()
}

// geminiVersions are the Gemini API's versions: Google's Gen AI SDK calls v1 since its
// 3.0, v1beta before, v1alpha for previews.
var geminiVersions = []string{"v1", "v1beta", "v1alpha"}

// geminiVersioned splits a Gemini API path, /{version}/{rest}, into its version and
// rest; ok is false for a path under no Gemini API version.
func geminiVersioned(path string) (version, rest string, ok bool) {
	v, rest, found := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	return v, rest, found && slices.Contains(geminiVersions, v)
}

// geminiModelPath tells a Gemini API model method's path: /{version}/models/{model}:{method}.
func geminiModelPath(path string) bool {
	_, rest, ok := geminiVersioned(path)
	return ok && strings.HasPrefix(rest, "models/")
}
