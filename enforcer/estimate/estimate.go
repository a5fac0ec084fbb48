// Package estimate owns the enforcer's token estimates: the input tokens of an inference
// request from its JSON body, and the output tokens of a response from the bytes of
// output text it streamed. They are what a request is charged when the upstream did not
// report its usage (a stream cut off, or sent without usage): never a silent 0 when
// tokens flowed.
//
// # The estimator
//
// Tokens(n) = ceil(n / 4): four bytes of UTF-8 text per token, the rule of thumb the
// providers publish for English text with their byte-pair tokenizers.
//
// Input(body) = Tokens(text bytes of the request) + token ids + 3 per message + 3, where the text
// bytes are the UTF-8 bytes of every JSON string value of the body (after unescaping),
// except the values of keys that name things rather than carry text (model, role, type,
// id, name of a content part's kind, ...) and the values of keys that carry binary
// payloads, an object or the base64 string itself (image_url, url, data, file_data,
// input_audio, images, ...: a base64 image is billed by its pixels, not its bytes, and
// counting it as text would overcharge a thousandfold; a content block's "source" is one
// too, but for a plain-text document's text: sourceKey).
// Messages are the elements of the top-level "messages" array (OpenAI chat completions,
// Anthropic messages) or "input" array (OpenAI Responses), plus one for a top-level
// "system" or "instructions"; token ids are a prompt or input written as numbers, one
// token each (Request.TokenIDs); the per-message and priming overheads are OpenAI's
// published chat format (3 tokens per message, 3 to prime the reply). Images, audio and
// files are not estimated at all (0 tokens), so an estimate of a multimodal request is
// low.
//
// # Its error
//
// Measured against OpenAI's tokenizers, o200k_base (gpt-4o, gpt-4.1, o-series) and
// cl100k_base (gpt-4, gpt-3.5), on the samples in testdata/samples.json: English prose
// 15% to 28% high; source code and JSON 16% to 30% low; Russian prose 14% low
// (cl100k_base) to 50% high (o200k_base); Chinese prose 6% (o200k_base) to 37%
// (cl100k_base) low. So within about 30% either way for English text and code, the
// bulk of inference traffic, and up to 50% for other scripts. The subdirectory measure
// holds the test that counts the samples with a real tokenizer (a module of its own, so
// the enforcer never depends on one); TestEstimateErrorOnSamples holds the estimator to
// those bounds. Anthropic's tokenizer is not public. Every estimate is marked as one on
// its receipt (usage_estimated, cost basis "estimate").
//
// It does no I/O and keeps nothing; the package knows nothing of Envoy or settlement.
package estimate

import (
	"bytes"
	"errors"
	"math"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"

	"github.com/tollgate-dev/tollgate/enforcer/internal/jsonscan"
)

// BytesPerToken is the estimator's bytes of UTF-8 text per token.
const BytesPerToken = 4

// Overheads of OpenAI's chat format: tokens per message, and to prime the reply.
const (
	PerMessage = 3
	Priming    = 3
)

// Bytes is the bytes of text n tokens stand for at BytesPerToken, at most half of
// int64's range (so that two such amounts add without overflow); 0 for n <= 0.
func Bytes(n int64) int64 {
	return min(max(n, 0), math.MaxInt64/2/BytesPerToken) * BytesPerToken
}

// Tokens estimates the tokens of n bytes of UTF-8 text: ceil(n/4); 0 for n <= 0.
func Tokens(n int64) int64 {
	if n <= 0 {
		return 0
	}
	return (n + BytesPerToken - 1) / BytesPerToken
}

// Request is what the estimator read from a request body.
type Request struct {
	// Model is the top-level "model" string ("" when absent or not a string; of a key
	// given twice, the last one, whatever it is).
	Model string
	// TextBytes is the UTF-8 bytes of the text the request carries (see the package doc).
	TextBytes int64
	// Messages counts the messages (see the package doc).
	Messages int64
	// TokenIDs counts the token ids the request carries as numbers: the numbers that are
	// elements of an array under the top-level "prompt", "messages" or "input" (OpenAI's
	// legacy completions and embeddings take a prompt or input written as an array of
	// tokens or of token arrays, as vLLM and SGLang do), each one input token. An
	// element that is a number is no message.
	TokenIDs int64
	// InputTokens is the estimate: Tokens(TextBytes) + TokenIDs + PerMessage*Messages +
	// Priming.
	InputTokens int64
	// OutputCap is the most output tokens the request asks for: the largest positive
	// whole number among the top-level max_tokens (OpenAI chat, Anthropic messages),
	// max_completion_tokens (OpenAI chat) and max_output_tokens (OpenAI Responses),
	// Gemini's generationConfig.maxOutputTokens and Bedrock Converse's
	// inferenceConfig.maxTokens (Bedrock InvokeModel's own names are InvokeCap's); 0
	// when none is given (or none is a positive whole number: the upstream refuses such a
	// request). Not an estimate: what the request itself allows (enforcer/worstcase).
	OutputCap int64
	// CapKeys says which names gave a cap (a positive whole number) to OutputCap: a
	// front door that knows the request's API keeps the cap only when one of them is a
	// name that API reads (requestbody.OutputCapKeys).
	CapKeys CapKey
	// Choices is the most choices the request asks for, each generated (and billed) up
	// to OutputCap: the largest positive whole number among the top-level n (OpenAI chat
	// and legacy completions), best_of (legacy completions, which generate best_of and
	// return n of them) and Gemini's generationConfig.candidateCount; 0 when none is
	// given (or none is a positive whole number: one choice). A legacy completion whose
	// top-level "prompt" is an array of prompts (strings, or arrays of token ids: a
	// batch, the last "prompt" counting) asks that many times as many: each prompt gets
	// its own choices (promptCount). At most 2^53, as OutputCap: an absurd count is
	// bounded by saturation where it is priced, not trusted.
	Choices int64
	// ServerContext: the request continues a context its provider stores, billed as its
	// input though the body does not carry it (OpenAI Responses' previous_response_id,
	// its conversation, an id or {"id": ...}, its stored prompt, prompt {"id": ...}, and
	// an input item that references a stored one, {"type": "item_reference"};
	// the Gemini Interactions API's previous_interaction_id; Gemini's cachedContent, an
	// explicit cache's name, billed as cached input), so its input is unknown
	// (enforcer/worstcase). A null or empty reference continues nothing; of a key given
	// twice, any reference counts.
	ServerContext bool
	// NoGeneration: the request asks the provider to generate nothing (a warmup of the
	// Responses API's WebSocket mode, a response.create with "generate": false, which
	// prepares a turn's state), so its worst case is its input (enforcer/worstcase). The
	// front door that knows the transport sets it (the gateway's Responses sessions):
	// Input does not, since over HTTP the field is documented nowhere and a provider
	// that ignored it would generate.
	NoGeneration bool
	// Background is a top-level "background": true (OpenAI Responses run in the
	// background: the answer comes before the generation, without its usage;
	// requestbody.Deferred).
	Background bool
	// Stream is a top-level "stream": true (the last one counting, as encoding/json
	// reads a repeated key): a front door asks only such an OpenAI chat stream for its
	// usage (requestbody.AskStreamUsage), without reading the body again.
	Stream bool
	// BodyBytes is the length of the body Input read, which was one well-formed JSON
	// object (as jsonscan.WellFormed finds it): a front door that rewrites that body
	// need neither check nor walk it again (requestbody.AskStreamUsage), and a body of
	// another length is not the one read. 0 for a Request made otherwise.
	BodyBytes int
	// Unread says the body was not read at all (no JSON object: Google's binary
	// protobuf, an upload, a body Envoy cut): the request is known only by the model its
	// path names (gate.BodyHint), so its worst case is unknown, its input being unknown.
	Unread bool
	// StreamOptions is where the top-level "stream_options" value lies in the body read
	// (the last one counting): body[StreamOptions[0]:StreamOptions[1]], {0, 0} when it
	// has none. With Stream, it is all requestbody.AskStreamUsage needs to ask a stream
	// for its usage.
	StreamOptions [2]int
	// ServiceTier is the tier a top-level "service_tier" (or "serviceTier", Gemini's
	// camel case, and Bedrock Converse's object {"type": ...}) asks for
	// (pricecatalog.TierNames: OpenAI's "priority", "fast" or "ultrafast", Gemini's and
	// Bedrock's "priority"), Speed the one a
	// top-level "speed" asks for (Anthropic's fast mode, "fast"): dearer than the
	// standard prices (enforcer/worstcase; AskedTier). Latency is the one a top-level
	// "performanceConfig" asks for (Bedrock Converse's {"latency": "optimized"}).
	// InvokeModel asks for either by a header, which the front door adds to them
	// (gate.Hint.WithTierHeaders).
	ServiceTier, Speed, Latency pricecatalog.Tier
	// InferenceGeo is a top-level "inference_geo" other than "global" (Anthropic's
	// US-only inference, "us"): dearer by the model's regional premium (enforcer/worstcase).
	InferenceGeo bool
	// Regional is not the body's: the front door sets it when the request's path goes to
	// a cloud's regional endpoint (requestbody.RegionalEndpoint), where some models cost
	// more (enforcer/worstcase).
	Regional bool
	// Host is not the body's either: the host the front door's configuration sends the
	// request to (pricecatalog.HostName of its gateway route's upstream, or of its Envoy
	// route's metadata; never the request's authority, which the client chooses), whose
	// own catalog price of the model, where it has one, prices it
	// (pricecatalog.Catalog.FindFor; enforcer/worstcase and settlement). "" when unknown.
	Host string
	// ImageOutputTokens is not the body's estimate either: the front door sets it for an
	// image generation, whose output its parameters fix (requestbody.ImageOutputTokens):
	// what it is charged for output when its answer reports no usage (the stream broke,
	// the client left), and its worst case's output (enforcer/worstcase).
	ImageOutputTokens int64
	// WebSearch: the request gives the model a web search tool, whose searches the
	// provider bills apart from the tokens (enforcer/worstcase): an element of the
	// top-level "tools" array whose "type" starts with "web_search" (Anthropic's
	// web_search_20250305, OpenAI's web_search and web_search_preview), or that has a
	// googleSearch, google_search or googleSearchRetrieval member (Gemini).
	// WebSearchMaxUses is the most searches the request allows (the sum of Anthropic's
	// max_uses), 0 when any of its search tools sets no limit.
	WebSearch        bool
	WebSearchMaxUses int64
	// MapsGrounding: the request gives the model Gemini's grounding with Google Maps (a
	// "tools" element with a googleMaps or google_maps member), which bills a grounded
	// prompt once, apart from the tokens (enforcer/worstcase).
	MapsGrounding bool
	// FileSearch: the request gives the model OpenAI's file search tool (a "tools"
	// element whose "type" starts with "file_search"), whose calls are billed apiece and
	// which no field of the tool caps.
	FileSearch bool
	// ImageGeneration: the request gives the model OpenAI's image generation tool (a
	// "tools" element whose "type" starts with "image_generation"), each of whose images
	// is billed apart from the tokens, as its image model's output (enforcer/worstcase),
	// and which no field of the tool caps.
	ImageGeneration bool
	// ImageCall is not the body's estimate: the front door sets it for a request with
	// the image generation tool (requestbody.ImageToolCall): what each of the tool's
	// calls is billed.
	ImageCall ImageCall
	// Advisor: the request gives the model Anthropic's advisor tool (a "tools" element
	// whose "type" starts with "advisor_"), whose sub-inferences are billed at the
	// advisor model's prices. AdvisorModel, AdvisorMaxUses and AdvisorMaxTokens are not
	// the body's estimate: the front door sets them (requestbody.AdvisorTool): the model
	// its settlement prices them at, and the tool's caps, which bound its worst case
	// (enforcer/worstcase; 0: unsaid).
	Advisor                          bool
	AdvisorModel                     string
	AdvisorMaxUses, AdvisorMaxTokens int64
	// Container: the request gives the model a code tool that runs in a container its
	// provider bills by the time it lives (a "tools" element whose "type" starts with
	// "code_interpreter" or "shell", OpenAI's, or "code_execution_", Anthropic's).
	// ContainerKind and ExplicitContainer are not the body's estimate: the front door
	// sets them (requestbody.ContainerTool): the container price its settlement charges
	// (pricecatalog.Container; "" when nothing is charged), and whether a tool names a
	// container by its id, created apart (requestbody.DeferredRequest).
	Container         bool
	ContainerKind     string
	ExplicitContainer bool
	// Guardrail: the request asks Amazon Bedrock to guard it with a guardrail, billed
	// apart by the text it assesses (Converse's guardrailConfig object; an InvokeModel
	// request's X-Amzn-Bedrock-GuardrailIdentifier header, which the front door notes:
	// requestbody.GuardrailTraceHeader).
	Guardrail bool
	// MaxToolCalls is OpenAI's max_tool_calls: the most calls of built-in tools (web
	// search, file search...) a Responses request allows, all tools together; 0 when it
	// sets none, or none that is a positive whole number.
	MaxToolCalls int64
	// Fallbacks: the request names a server-side fallback chain (Anthropic's top-level
	// "fallbacks": an array, or "default"), substitute models the API retries it on when
	// its model declines it, each attempt billed. FallbackChain is not the body's
	// estimate: the front door sets it (requestbody.Fallbacks): the chain's models and
	// their caps, or that it asks for the model's server-defined default chain
	// (enforcer/worstcase); nil when not read. (A pointer, so that a Request stays
	// comparable.)
	Fallbacks     bool
	FallbackChain *FallbackChain
}

// FallbackChain is a request's server-side fallback chain (Request.FallbackChain): the
// entries that name a model, or Default, the requested model's server-defined chain,
// which names none ("fallbacks": "default").
type FallbackChain struct {
	Entries []Fallback
	Default bool
}

// CapKey is a set of the names an output cap is given by (Request.CapKeys).
type CapKey uint8

// The names of an output cap.
const (
	CapMaxTokens           CapKey = 1 << iota // the top-level max_tokens
	CapMaxCompletionTokens                    // the top-level max_completion_tokens
	CapMaxOutputTokens                        // the top-level max_output_tokens
	CapSettings                               // a settings object's (generationConfig, inferenceConfig)
)

// ImageCall is what one call of OpenAI's image generation tool is billed: Tokens of
// Model's output (one image at the tool's size and quality, and the partial images a
// stream asked for).
type ImageCall struct {
	Model  string
	Tokens int64
}

// Fallback is one entry of a request's server-side fallback chain
// (Request.FallbackChain): its model, the max_tokens of its attempt (0: the request's),
// and its speed ("fast", "standard", or "" when it says none: the request's).
type Fallback struct {
	Model     string
	MaxTokens int64
	Speed     string
}

// maxCap bounds OutputCap: a float64 holds every whole number up to 2^53 exactly, and
// no model generates more.
const maxCap = 1 << 53

// ErrNotObject is returned for a body that is not one JSON object.
var ErrNotObject = errors.New("estimate: the body is not a JSON object")

// AskedTier is the dearest tier the request asks for.
func (r Request) AskedTier() pricecatalog.Tier { return max(r.ServiceTier, r.Speed, r.Latency) }

// ModelName is the model the body named; "" for a body not read (a nil Request).
func (r *Request) ModelName() string {
	if r == nil {
		return ""
	}
	return r.Model
}

// skipValue are keys whose string value names something rather than carrying text.
var skipValue = map[string]bool{
	"model": true, "role": true, "type": true, "id": true, "tool_call_id": true, "call_id": true,
	"media_type": true, "mime_type": true, "mimeType": true, "detail": true, "format": true, "file_id": true,
	"encoding_format": true, "service_tier": true, "serviceTier": true, "speed": true, "inference_geo": true, "reasoning_effort": true, "user": true,
	"previous_response_id": true, "tool_choice": true, "cache_control": true, "status": true,
}

// skipTree are keys whose whole value is a binary payload or a reference to one, an
// object or the string itself (a base64 string: Gemini's inlineData.data, the Responses
// API's image_url and file_data data URLs, the images of Bedrock's InvokeModel bodies,
// Meta Llama's and Cohere's "images" and Titan's "inputImage").
var skipTree = map[string]bool{
	"image_url": true, "url": true, "data": true, "file_data": true, "input_audio": true,
	"image": true, "audio": true, "file": true, "metadata": true, "images": true, "inputImage": true,
}

// sourceKey is the key of a content block's source (Anthropic's, Bedrock Converse's): a
// payload (base64 data, a URL, a file id, Bedrock's bytes), but for the text of a
// plain-text document, billed as input as any text is: Anthropic's {"type": "text",
// "data": ...} and {"type": "content", "content": [...]}, Bedrock's {"text": ...} and
// {"content": [...]} (walker.members, sourceMembers).
const sourceKey = "source"

// Input reads a request body and estimates its input tokens. A body that is not a
// well-formed JSON object (RFC 8259; nested at most jsonscan.MaxNesting deep) is an
// error: nothing is estimated from it. A number beyond float64's range is well-formed
// (RFC 8259 bounds none, and Python's json, which vLLM or SGLang read requests with,
// takes it as infinity): read, a count or cap of it as the dearest (positiveWhole). A
// leading UTF-8 byte order mark is no JSON: the front doors drop it first
// (requestbody.TrimBOM).
//
// It allocates nothing but the model's name: it runs for every request the enforcer
// admits, and garbage in proportion to the body (a copy of it and a string per JSON
// string, as a json.Decoder makes) fragments the heap that the gateway's streams'
// long-lived buffers sit in. It reads the body once, checking it as it goes (the
// walker: the grammar of encoding/json's Valid, its nesting bound included), where a
// check of the whole body first (jsonscan.WellFormed) and a walk after it read an agent's
// body twice: the check was about half of Input's time.
func Input(body []byte) (Request, error) {
	w := walker{b: body, depth: 1}
	r := &w.r
	i := jsonscan.SkipSpace(body, 0)
	if i == len(body) || body[i] != '{' {
		return Request{}, ErrNotObject
	}
	i = w.members(jsonscan.SkipSpace(body, i+1), requestMembers)
	if w.bad || jsonscan.SkipSpace(body, i) != len(body) { // nothing after the object
		return Request{}, ErrNotObject
	}
	r.BodyBytes = len(body)
	r.InputTokens = Tokens(r.TextBytes) + r.TokenIDs + PerMessage*r.Messages + Priming
	if w.prompts > 1 {
		// A batch of prompts: every prompt generates its own choices.
		r.Choices = batchChoices(r.Choices, w.prompts)
	}
	return *r, nil
}

// batchChoices is the choices of a batch of prompts prompts, each asking choices (0:
// one), at most maxCap.
func batchChoices(choices, prompts int64) int64 {
	choices = max(choices, 1)
	if choices > maxCap/prompts {
		return maxCap
	}
	return choices * prompts
}

// promptCount is how many prompts the well-formed top-level "prompt" value at b[i]
// holds: an array's elements, each a prompt (a string, or an array of token ids), but
// one for an array of numbers alone (one prompt written as token ids); 0 for any
// other value (one prompt, or none: a string, a stored prompt's object). OpenAI's legacy
// completions and the servers shaped like them (vLLM, SGLang, llama.cpp's) answer each
// prompt of a batch with its own n choices.
func promptCount(b []byte, i int) int64 {
	if b[i] != '[' {
		return 0
	}
	var n int64
	tokens := true // every element a number
	for i = jsonscan.SkipSpace(b, i+1); b[i] != ']'; {
		n++
		tokens = tokens && jsonscan.IsNumber(b[i])
		if i = jsonscan.SkipSpace(b, jsonscan.SkipValue(b, i)); b[i] == ',' {
			i = jsonscan.SkipSpace(b, i+1)
		}
	}
	if tokens && n > 0 {
		return 1
	}
	return n
}

// requestKey is how the request's own members of one of names are read: kind is what
// of their value's text counts (the members read for something else count none), and
// reads what else the value says (walker.read), once the walk found it well-formed. A
// member of any other name is text as kindOf says, read by readOther.
type requestKey struct {
	names []string
	kind  valueKind
	reads memberRead
}

// What walker.read takes from a request member's value. (An enumeration rather than a
// function per entry: a call through a function value would move the walker, which it
// takes, to the heap, an allocation on every request.)
type memberRead uint8

const (
	readNothing memberRead = iota
	readModel
	readMaxTokens
	readMaxCompletionTokens
	readMaxOutputTokens
	readChoices
	readServerContext
	readStoredPrompt
	readMaxToolCalls
	readTools
	readGuardrail
	readBackground
	readStream
	readStreamOptions
	readServiceTier
	readSpeed
	readLatency
	readInferenceGeo
	readFallbacks
)

var requestKeys = []requestKey{
	{[]string{"messages", "input"}, messageList, readNothing},
	{[]string{"model"}, skipped, readModel},
	{[]string{"max_tokens"}, skipped, readMaxTokens},
	{[]string{"max_completion_tokens"}, skipped, readMaxCompletionTokens},
	{[]string{"max_output_tokens"}, skipped, readMaxOutputTokens},
	{[]string{"n", "best_of"}, skipped, readChoices},
	// A stored context's reference: an id (skipValue), or an object naming one; a
	// legacy completion's prompt is text.
	{[]string{"previous_response_id"}, name, readServerContext},
	{[]string{"conversation", "previous_interaction_id", "cachedContent", "cached_content"}, text, readServerContext},
	{[]string{"prompt"}, promptValue, readStoredPrompt},
	{[]string{"max_tool_calls"}, skipped, readMaxToolCalls},
	{[]string{"tools"}, text, readTools}, // the tools' definitions are input text
	{[]string{"guardrailConfig"}, skipped, readGuardrail},
	{[]string{"background"}, skipped, readBackground},
	{[]string{"stream"}, skipped, readStream},
	{[]string{"stream_options"}, text, readStreamOptions},
	// serviceTier: the Gemini API's JSON name of it (its SDK sends that), and Bedrock
	// Converse's, an object ({"type": "priority"}).
	{[]string{"service_tier", "serviceTier"}, skipped, readServiceTier},
	{[]string{"speed"}, skipped, readSpeed},
	{[]string{"performanceConfig"}, skipped, readLatency},
	{[]string{"inference_geo"}, skipped, readInferenceGeo},
	{[]string{"fallbacks"}, skipped, readFallbacks},
}

// read takes what a request member's well-formed value, body[start:end], says besides
// its text. Of a key given twice the last one counts, as encoding/json reads a repeated
// key.
func (w *walker) read(what memberRead, start, end int) {
	b, r := w.b, &w.r
	switch what {
	case readModel:
		// The last one counts whatever it is: an upstream that takes a null model (vLLM,
		// SGLang: their served one) does not run the one named before it.
		r.Model = ""
		if b[start] == '"' {
			r.Model = jsonscan.DecodeString(b[start:end])
		}
	case readMaxTokens, readMaxCompletionTokens, readMaxOutputTokens:
		if jsonscan.IsNumber(b[start]) {
			n, _ := positiveWhole(b[start:end]) // beyond float64's range: maxCap
			r.OutputCap = max(r.OutputCap, n)
			if n > 0 {
				r.CapKeys |= CapMaxTokens << (what - readMaxTokens)
			}
		}
	case readChoices: // the largest, as of the caps
		if jsonscan.IsNumber(b[start]) {
			n, _ := positiveWhole(b[start:end])
			r.Choices = max(r.Choices, n)
		}
	case readServerContext: // an id, or an object naming one
		r.ServerContext = r.ServerContext || storedReference(b, start, end)
	case readStoredPrompt: // an object naming one; a string is a legacy completion's text
		r.ServerContext = r.ServerContext || b[start] == '{' && storedReference(b, start, end)
		w.prompts = promptCount(b, start) // the last one counts
	case readMaxToolCalls:
		r.MaxToolCalls = 0 // anything but a positive whole number caps nothing
		if jsonscan.IsNumber(b[start]) {
			if n, _ := positiveWhole(b[start:end]); n > 0 {
				r.MaxToolCalls = n
			}
		}
	case readTools: // the search tools, and the others billed apart
		t := searchTools(b, start)
		r.WebSearch, r.WebSearchMaxUses, r.FileSearch, r.ImageGeneration, r.Advisor = t.search, t.maxUses, t.fileSearch, t.images, t.advisor
		r.MapsGrounding, r.Container = t.maps, t.containers
	case readGuardrail:
		r.Guardrail = b[start] == '{'
	case readBackground:
		r.Background = bytes.HasPrefix(b[start:end], []byte("true"))
	case readStream:
		r.Stream = bytes.HasPrefix(b[start:end], []byte("true"))
	case readStreamOptions:
		r.StreamOptions = [2]int{start, end}
	case readServiceTier:
		r.ServiceTier = w.tier(start, pricecatalog.TierNames[:], "type")
	case readSpeed:
		r.Speed = w.tier(start, pricecatalog.SpeedNames[:], "")
	case readLatency: // Bedrock Converse's {"latency": "optimized"}
		r.Latency = w.tier(start, pricecatalog.LatencyNames[:], "latency")
	case readInferenceGeo: // Anthropic's: a string other than "global" pins the geography
		r.InferenceGeo = b[start] == '"' && !jsonscan.KeyIs(b[start:end], "global")
	case readFallbacks: // Anthropic's: an array of models, or "default"; null names none
		r.Fallbacks = b[start] == '[' || b[start] == '"'
	}
}

// requestKeyOf is the entry of requestKeys for a member's key (as written), nil for none.
func requestKeyOf(key []byte) *requestKey {
	for i := range requestKeys {
		for _, name := range requestKeys[i].names {
			if jsonscan.KeyIs(key, name) {
				return &requestKeys[i]
			}
		}
	}
	return nil
}

// readOther reads a request member that requestKeys does not name (its text counted as
// kindOf says): a system prompt or instructions is a message, and a settings object may
// cap the output and ask for several choices.
func (w *walker) readOther(key []byte, start int) {
	if jsonscan.KeyIs(key, "system") || jsonscan.KeyIs(key, "instructions") {
		w.r.Messages++
	}
	if capKeys, choiceKeys, quoted := configKeys(key); capKeys != nil && w.b[start] == '{' {
		// Gemini's generationConfig.maxOutputTokens, Bedrock Converse's
		// inferenceConfig.maxTokens: the cap in the request's settings object; Gemini's
		// generationConfig.candidateCount: its choices.
		if n := configCap(w.b, start, capKeys, quoted); n > 0 {
			w.r.OutputCap = max(w.r.OutputCap, n)
			w.r.CapKeys |= CapSettings
		}
		w.r.Choices = max(w.r.Choices, configCap(w.b, start, choiceKeys, quoted))
	}
}

// storedReference reports whether the well-formed value b[start:end] refers to
// something its provider stores: a string other than "" (an id), or an object whose
// "id" member is one.
func storedReference(b []byte, start, end int) bool {
	switch b[start] {
	case '"':
		return end-start > 2 // an escape is never empty
	case '{':
		for i := jsonscan.SkipSpace(b, start+1); b[i] != '}'; {
			keyEnd := jsonscan.SkipString(b, i)
			key := b[i:keyEnd]
			i = jsonscan.SkipSpace(b, jsonscan.SkipSpace(b, keyEnd)+1) // past the colon
			next := jsonscan.SkipValue(b, i)
			if jsonscan.KeyIs(key, "id") && b[i] == '"' && next-i > 2 {
				return true
			}
			if i = jsonscan.SkipSpace(b, next); b[i] == ',' {
				i = jsonscan.SkipSpace(b, i+1)
			}
		}
	}
	return false
}

// What a value's key makes of it (walker.value).
type valueKind uint8

const (
	text        valueKind = iota // its strings are text
	name                         // a string names something (skipValue); a compound value is read as text
	payload                      // a compound value is a binary payload, skipped; a string is text (a source's data: sourceMemberKind)
	skipped                      // no text in it (inside a payload, and values read for something else)
	messageList                  // text, and an array's elements are messages (tokenText)
	promptValue                  // text, and an array's elements are tokenText
	tokenText                    // text, and a number is a token id (an array element under a prompt or input)
	sourceValue                  // an object is a source (sourceMembers); anything else is a payload
	inputItem                    // an element of a messageList: tokenText, and an object is an item (itemMembers)
)

// kindOf is what a member's key (as written: quoted, maybe escaped) makes of its value.
func kindOf(key []byte) valueKind {
	if bytes.IndexByte(key, '\\') < 0 {
		raw := key[1 : len(key)-1]
		// m[string(b)] is a map index that does not allocate.
		if skipTree[string(raw)] {
			return skipped
		}
		if string(raw) == sourceKey {
			return sourceValue
		}
		if skipValue[string(raw)] {
			return name
		}
		return text
	}
	k := jsonscan.DecodeString(key)
	switch {
	case skipTree[k]:
		return skipped
	case k == sourceKey:
		return sourceValue
	case skipValue[k]:
		return name
	}
	return text
}

// walker reads a JSON document once, checking it as encoding/json's Valid does and
// counting its text into r. bad is set by anything Valid refuses (a number beyond
// float64's range is not: Valid takes it too); once it is set, the walk ends
// (each method returns the end of the document) and the reading is discarded. Nothing
// is read past the end of b, whatever b holds (FuzzInputAsTheDecoderReadsIt).
type walker struct {
	b     []byte
	r     Request
	bad   bool
	depth int // the objects and arrays open around the current value
	// prompts is the top-level "prompt" value's prompts (promptCount): Input multiplies
	// the choices by them.
	prompts int64
}

// fail marks the document refused and returns the index that ends every walk.
func (w *walker) fail() int {
	w.bad = true
	return len(w.b)
}

// tier reads the tier the well-formed value at b[i] names among names: a string
// (escaped or not, as the API takes it), or, when member is not "", an object's member
// string of that name (Bedrock Converse's serviceTier {"type": "priority"}, its
// performanceConfig {"latency": "optimized"}), else Standard. Of a repeated key the last
// one counts, as encoding/json reads it.
func (w *walker) tier(i int, names []pricecatalog.TierName, member string) pricecatalog.Tier {
	named := func(s, end int) pricecatalog.Tier {
		for _, n := range names {
			if jsonscan.KeyIs(w.b[s:end], n.Name) {
				return n.Tier
			}
		}
		return pricecatalog.Standard
	}
	switch w.b[i] {
	case '"':
		return named(i, jsonscan.SkipString(w.b, i))
	case '{':
		if member == "" {
			break
		}
		tier := pricecatalog.Standard
		for j := jsonscan.SkipSpace(w.b, i+1); w.b[j] != '}'; {
			end := jsonscan.SkipString(w.b, j)
			key := w.b[j:end]
			j = jsonscan.SkipSpace(w.b, jsonscan.SkipSpace(w.b, end)+1) // past the colon
			if jsonscan.KeyIs(key, member) {
				tier = pricecatalog.Standard
				if w.b[j] == '"' {
					tier = named(j, jsonscan.SkipString(w.b, j))
				}
			}
			if j = jsonscan.SkipSpace(w.b, jsonscan.SkipValue(w.b, j)); w.b[j] == ',' {
				j = jsonscan.SkipSpace(w.b, j+1)
			}
		}
		return tier
	}
	return pricecatalog.Standard
}

// value reads the value at b[i] and returns the index just after it.
func (w *walker) value(i int, kind valueKind) int {
	b := w.b
	if i >= len(b) {
		return w.fail()
	}
	switch c := b[i]; {
	case c == '"':
		if kind == name || kind == skipped {
			return w.skipString(i)
		}
		end, n := w.textString(i)
		w.r.TextBytes += n
		return end
	case c == '{', c == '[':
		if w.depth++; w.depth > jsonscan.MaxNesting { // refused, as encoding/json refuses it
			return w.fail()
		}
		var end int
		switch {
		case c == '{' && kind == sourceValue:
			end = w.members(jsonscan.SkipSpace(b, i+1), sourceMembers)
		case c == '{' && kind == inputItem:
			end = w.members(jsonscan.SkipSpace(b, i+1), itemMembers)
		case c == '{':
			of := textMembers
			if kind == payload || kind == skipped {
				of = skippedMembers
			}
			end = w.members(jsonscan.SkipSpace(b, i+1), of)
		case kind == sourceValue:
			end = w.elements(jsonscan.SkipSpace(b, i+1), payload)
		default:
			end = w.elements(jsonscan.SkipSpace(b, i+1), kind)
		}
		w.depth--
		return end
	case c == '-' || '0' <= c && c <= '9':
		// Any number of JSON's grammar, beyond float64's range too (RFC 8259 sets
		// none): an upstream in Python reads 1e400 as infinity and runs the request.
		if kind == tokenText || kind == inputItem {
			w.r.TokenIDs++
		}
		return w.number(i)
	case c == 't':
		return w.literal(i, "true")
	case c == 'f':
		return w.literal(i, "false")
	case c == 'n':
		return w.literal(i, "null")
	}
	return w.fail()
}

// What an object's keys make of its members' values (walker.members).
type membersOf uint8

const (
	requestMembers membersOf = iota // the request's own: requestKeys, else kindOf and readOther
	textMembers                     // kindOf
	skippedMembers                  // no text in any
	// sourceMembers: a source's (sourceKey): the text of its "text" and "content", and of
	// its "data" string when its "type" (the last one) is "text"; nothing else.
	sourceMembers
	// itemMembers: an input item's (an element of the top-level messages or input):
	// kindOf, and a "type" of "item_reference" (the Responses API's reference to a
	// stored item, billed as input though the body does not carry it) is ServerContext.
	itemMembers
)

// members reads an object's members from b[i] (past the opening brace and white space)
// to its closing brace, and returns the index just after it.
func (w *walker) members(i int, of membersOf) int {
	b := w.b
	if i < len(b) && b[i] == '}' {
		return i + 1
	}
	var data int64     // a source's "data" text, counted once its type is known
	plainText := false // a source's "type" is "text"
	for {
		if i >= len(b) || b[i] != '"' {
			return w.fail()
		}
		end := w.skipString(i)
		if w.bad {
			return end
		}
		key := b[i:end]
		if i = jsonscan.SkipSpace(b, end); i >= len(b) || b[i] != ':' {
			return w.fail()
		}
		start, kind := jsonscan.SkipSpace(b, i+1), skipped
		var rk *requestKey // the request's own member of a name it reads
		if of == requestMembers {
			rk = requestKeyOf(key)
		}
		switch {
		case rk != nil:
			kind = rk.kind
		case of == sourceMembers:
			kind = sourceMemberKind(key)
		case of != skippedMembers:
			kind = kindOf(key)
		}
		before := w.r.TextBytes
		if end = w.value(start, kind); w.bad {
			return end
		}
		switch {
		case rk != nil:
			w.read(rk.reads, start, end)
		case of == requestMembers:
			w.readOther(key, start)
		case of == itemMembers && jsonscan.KeyIs(key, "type"):
			w.r.ServerContext = w.r.ServerContext || b[start] == '"' && jsonscan.KeyIs(b[start:end], "item_reference")
		case of == sourceMembers && jsonscan.KeyIs(key, "type"):
			plainText = b[start] == '"' && jsonscan.KeyIs(b[start:end], "text")
		case of == sourceMembers && jsonscan.KeyIs(key, "data"):
			data += w.r.TextBytes - before // held until the type is known
			w.r.TextBytes = before
		}
		var closed bool
		if i, closed = w.next(end, '}'); closed {
			if plainText {
				w.r.TextBytes += data
			}
			return i
		}
	}
}

// sourceMemberKind is what a source's member (sourceMembers) of key makes of its value:
// its "text" and "content" are text, its "data" a string of text (counted only when the
// source's type is "text") or else a payload; any other member (its type, base64 bytes,
// a URL, a file id, a media type) has no text.
func sourceMemberKind(key []byte) valueKind {
	switch {
	case jsonscan.KeyIs(key, "text"), jsonscan.KeyIs(key, "content"):
		return text
	case jsonscan.KeyIs(key, "data"):
		return payload // a string is text; anything else is skipped
	}
	return skipped
}

// next reads what follows a member or an element that ends at b[i]: past white space, a
// comma, then the index of the next one and false, or the closing byte, then the index
// just after it and true. Anything else fails the walk.
func (w *walker) next(i int, closing byte) (int, bool) {
	b := w.b
	if i = jsonscan.SkipSpace(b, i); i < len(b) {
		switch b[i] {
		case ',':
			return jsonscan.SkipSpace(b, i+1), false
		case closing:
			return i + 1, true
		}
	}
	return w.fail(), true
}

// elements reads an array's elements from b[i] (past the opening bracket and white
// space) to its closing bracket, and returns the index just after it.
func (w *walker) elements(i int, kind valueKind) int {
	b := w.b
	if i < len(b) && b[i] == ']' {
		return i + 1
	}
	elem := text
	switch kind {
	case payload, skipped:
		elem = skipped
	case messageList:
		elem = inputItem
	case promptValue, tokenText, inputItem:
		elem = tokenText
	}
	for {
		if kind == messageList && (i >= len(b) || !jsonscan.IsNumber(b[i])) { // a token id is no message
			w.r.Messages++
		}
		if i = w.value(i, elem); w.bad {
			return i
		}
		var closed bool
		if i, closed = w.next(i, ']'); closed {
			return i
		}
	}
}

// skipString reads the string whose opening quote is at b[i] and returns the index just
// after its closing quote.
func (w *walker) skipString(i int) int {
	b := w.b
	for i++; i < len(b); {
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c == '\\':
			if i = w.escape(i); w.bad {
				return i
			}
		case c < ' ': // a control byte, which a string may hold only escaped
			return w.fail()
		default:
			i++
		}
	}
	return w.fail() // no closing quote
}

// escape reads the escape whose backslash is at b[i] and returns the index just after it.
func (w *walker) escape(i int) int {
	b := w.b
	if i+1 >= len(b) {
		return w.fail()
	}
	switch b[i+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return i + 2
	case 'u':
		if i+6 <= len(b) && isHex4(b[i+2:i+6]) {
			return i + 6
		}
	}
	return w.fail()
}

// textString reads the string whose opening quote is at b[i] in one pass: the index
// just after its closing quote, and the length in UTF-8 of its contents once decoded as
// encoding/json decodes them: escapes resolved, a \u escape of half a surrogate pair
// that has no other half and each byte of invalid UTF-8 replaced by U+FFFD. (Finding
// the end first, then counting, read every byte of the request's text twice: a fifth
// of Input's time on an agent's body.)
func (w *walker) textString(i int) (end int, n int64) {
	b := w.b
	for i++; i < len(b); {
		switch c := b[i]; {
		case c == '"':
			return i + 1, n
		case c == '\\':
			next := w.escape(i)
			if w.bad {
				return next, n
			}
			if b[i+1] != 'u' {
				n++ // one byte: \" \\ \/ \b \f \n \r \t
				i = next
				continue
			}
			r := hex4(b[i+2 : i+6])
			i = next
			if utf16.IsSurrogate(r) {
				if i+6 <= len(b) && b[i] == '\\' && b[i+1] == 'u' && isHex4(b[i+2:i+6]) {
					if utf16.DecodeRune(r, hex4(b[i+2:i+6])) != utf8.RuneError {
						n += 4 // a pair: a rune beyond the basic plane
						i += 6
						continue
					}
				}
				r = utf8.RuneError
			}
			n += int64(utf8.RuneLen(r))
		case c < ' ':
			return w.fail(), n
		case c < utf8.RuneSelf:
			n++
			i++
		default:
			r, size := utf8.DecodeRune(b[i:])
			n += int64(utf8.RuneLen(r))
			i += size
		}
	}
	return w.fail(), n // no closing quote
}

// number reads the number that starts at b[i] ('-' or a digit), in JSON's grammar, and
// returns the index just after it.
func (w *walker) number(i int) int {
	b := w.b
	digits := func(i int) (int, bool) { // one or more
		start := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		return i, i > start
	}
	if b[i] == '-' {
		i++
	}
	var ok bool
	switch {
	case i < len(b) && b[i] == '0':
		i++ // no digit may follow a leading zero
	default:
		if i, ok = digits(i); !ok {
			return w.fail()
		}
	}
	if i < len(b) && b[i] == '.' {
		if i, ok = digits(i + 1); !ok {
			return w.fail()
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		if i++; i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i, ok = digits(i); !ok {
			return w.fail()
		}
	}
	return i
}

// literal reads the literal lit (true, false or null) at b[i] and returns the index
// just after it.
func (w *walker) literal(i int, lit string) int {
	if !bytes.HasPrefix(w.b[i:], []byte(lit)) {
		return w.fail()
	}
	return i + len(lit)
}

// isHex4 tells whether h is four hexadecimal digits.
func isHex4(h []byte) bool {
	for _, c := range h {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return len(h) == 4
}

// The helpers below read values the walker found well-formed.

// hex4 is the value of four hexadecimal digits.
func hex4(h []byte) rune {
	var r rune
	for _, c := range h {
		switch {
		case c <= '9':
			c -= '0'
		case c <= 'F':
			c -= 'A' - 10
		default:
			c -= 'a' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// billedTools is what a request's tools say of the calls billed apart from its tokens:
// whether one of them is a web search tool, and the most searches they allow together
// (maxUses, 0 when one of them sets no max_uses), and whether one is a file search
// tool, one an image generation tool, one an advisor. See Request.WebSearch,
// Request.FileSearch, Request.ImageGeneration and Request.Advisor.
type billedTools struct {
	search                            bool
	maxUses                           int64
	fileSearch, images, advisor, maps bool
	containers                        bool
}

// searchTools reads the tools array at b[i] (any other value has none).
func searchTools(b []byte, i int) billedTools {
	var t billedTools
	if b[i] != '[' {
		return t
	}
	capped := true
	for i = jsonscan.SkipSpace(b, i+1); b[i] != ']'; {
		end := jsonscan.SkipValue(b, i)
		if b[i] == '{' {
			one := searchTool(b, i)
			t.fileSearch, t.images, t.advisor = t.fileSearch || one.fileSearch, t.images || one.images, t.advisor || one.advisor
			t.maps, t.containers = t.maps || one.maps, t.containers || one.containers
			if one.search {
				t.search = true
				if one.maxUses <= 0 || t.maxUses > maxCap-one.maxUses {
					capped = false
				} else {
					t.maxUses += one.maxUses
				}
			}
		}
		if i = jsonscan.SkipSpace(b, end); b[i] == ',' {
			i = jsonscan.SkipSpace(b, i+1)
		}
	}
	if !t.search || !capped {
		t.maxUses = 0
	}
	return t
}

// searchTool reads one tool object at b[i]; its maxUses is its max_uses (0 when it sets
// none, or none that is a positive whole number).
func searchTool(b []byte, i int) (t billedTools) {
	for i = jsonscan.SkipSpace(b, i+1); b[i] != '}'; {
		end := jsonscan.SkipString(b, i)
		key := b[i:end]
		i = jsonscan.SkipSpace(b, jsonscan.SkipSpace(b, end)+1) // past the colon
		switch {
		case jsonscan.KeyIs(key, "type"):
			if b[i] == '"' {
				end := jsonscan.SkipString(b, i)
				t.search = t.search || hasPrefixDecoded(b[i:end], "web_search")
				t.fileSearch = t.fileSearch || hasPrefixDecoded(b[i:end], "file_search")
				t.images = t.images || hasPrefixDecoded(b[i:end], "image_generation")
				t.advisor = t.advisor || hasPrefixDecoded(b[i:end], "advisor_")
				t.containers = t.containers || hasPrefixDecoded(b[i:end], "code_interpreter") ||
					hasPrefixDecoded(b[i:end], "shell") || hasPrefixDecoded(b[i:end], "code_execution_")
			}
		case jsonscan.KeyIs(key, "googleSearch"), jsonscan.KeyIs(key, "google_search"), jsonscan.KeyIs(key, "googleSearchRetrieval"):
			t.search = true
		case jsonscan.KeyIs(key, "googleMaps"), jsonscan.KeyIs(key, "google_maps"):
			t.maps = true
		case jsonscan.KeyIs(key, "max_uses"):
			if jsonscan.IsNumber(b[i]) {
				if n, err := positiveWhole(b[i:jsonscan.SkipNumber(b, i)]); err == nil && n > 0 {
					t.maxUses = n
				}
			}
		}
		if i = jsonscan.SkipSpace(b, jsonscan.SkipValue(b, i)); b[i] == ',' {
			i = jsonscan.SkipSpace(b, i+1)
		}
	}
	return t
}

// configKeys are the keys of an output cap, and of a count of choices, inside the
// settings object named key (Gemini's generationConfig, as its REST API also takes it
// in snake case; Bedrock Converse's inferenceConfig, which has no choices); nil caps for
// any other key. quoted says whether a string holding a decimal integer counts as that
// number: Google reads a request as proto3 JSON, which takes an int32 written so
// ("candidateCount": "8" generates, and bills, eight candidates); Bedrock does not.
func configKeys(key []byte) (caps, choices []string, quoted bool) {
	switch {
	case jsonscan.KeyIs(key, "generationConfig"), jsonscan.KeyIs(key, "generation_config"):
		return generationCaps, generationChoices, true
	case jsonscan.KeyIs(key, "inferenceConfig"):
		return inferenceCaps, nil, false
	}
	return nil, nil, false
}

// The keys configKeys names (package variables: a slice made per call is an allocation).
var (
	generationCaps    = []string{"maxOutputTokens", "max_output_tokens"}
	generationChoices = []string{"candidateCount", "candidate_count"}
	inferenceCaps     = []string{"maxTokens"}
)

// The caps of Amazon Bedrock InvokeModel's bodies in their models' own names (InvokeCap).
var (
	titanCaps = []string{"maxTokenCount"}
	novaCaps  = []string{"max_new_tokens"}
)

// InvokeCap is the output cap an Amazon Bedrock InvokeModel body (POST
// /model/{modelId}/invoke, /invoke-with-response-stream) gives in its model's own
// names, which Input does not read (no other API reads them): Meta Llama's top-level
// max_gen_len, Amazon Titan Text's textGenerationConfig.maxTokenCount and Amazon Nova's
// (v1) inferenceConfig.max_new_tokens (AWS's Bedrock model parameters). The largest
// positive whole number among them (at most 2^53, as OutputCap), each key by its exact
// name; 0 when none is, or the body is not one well-formed JSON object. The front door
// that knows the path is an InvokeModel's takes it into OutputCap
// (requestbody.BedrockInvoke).
func InvokeCap(body []byte) int64 {
	if !jsonscan.WellFormed(body) {
		return 0
	}
	i := jsonscan.SkipSpace(body, 0)
	if body[i] != '{' {
		return 0
	}
	var most int64
	for i = jsonscan.SkipSpace(body, i+1); body[i] != '}'; {
		end := jsonscan.SkipString(body, i)
		key := body[i:end]
		i = jsonscan.SkipSpace(body, jsonscan.SkipSpace(body, end)+1) // past the colon
		switch {
		case jsonscan.KeyIs(key, "max_gen_len") && jsonscan.IsNumber(body[i]):
			if n, err := positiveWhole(body[i:jsonscan.SkipNumber(body, i)]); err == nil {
				most = max(most, n)
			}
		case jsonscan.KeyIs(key, "textGenerationConfig") && body[i] == '{':
			most = max(most, configCap(body, i, titanCaps, false))
		case jsonscan.KeyIs(key, "inferenceConfig") && body[i] == '{':
			most = max(most, configCap(body, i, novaCaps, false))
		}
		if i = jsonscan.SkipSpace(body, jsonscan.SkipValue(body, i)); body[i] == ',' {
			i = jsonscan.SkipSpace(body, i+1)
		}
	}
	return most
}

// configCap is the largest positive whole number among the members of the object at
// b[i] named one of keys (0 when none is): the output cap of a settings object, or its
// count of choices; with quoted, a string holding a decimal integer too (configKeys).
func configCap(b []byte, i int, keys []string, quoted bool) int64 {
	var most int64
	for i = jsonscan.SkipSpace(b, i+1); b[i] != '}'; {
		end := jsonscan.SkipString(b, i)
		key := b[i:end]
		i = jsonscan.SkipSpace(b, jsonscan.SkipSpace(b, end)+1) // past the colon
		for _, k := range keys {
			switch {
			case !jsonscan.KeyIs(key, k):
			case jsonscan.IsNumber(b[i]):
				if n, err := positiveWhole(b[i:jsonscan.SkipNumber(b, i)]); err == nil {
					most = max(most, n)
				}
			case quoted && b[i] == '"':
				most = max(most, quotedWhole(b[i:jsonscan.SkipString(b, i)]))
			}
		}
		if i = jsonscan.SkipSpace(b, jsonscan.SkipValue(b, i)); b[i] == ',' {
			i = jsonscan.SkipSpace(b, i+1)
		}
	}
	return most
}

// quotedWhole is the positive decimal integer a well-formed JSON string holds, as
// proto3 JSON reads an integer written as a string (at most maxCap), else 0. It
// decodes (allocating) only a string with an escape.
func quotedWhole(quoted []byte) int64 {
	s := quoted[1 : len(quoted)-1]
	if bytes.IndexByte(s, '\\') >= 0 {
		s = []byte(jsonscan.DecodeString(quoted))
	}
	if len(s) > 0 && s[0] == '-' {
		return 0
	}
	var n int64
	for j, c := range s {
		if c < '0' || c > '9' {
			return 0
		}
		if n = min(n*10+int64(c-'0'), maxCap); j == len(s)-1 {
			return n
		}
	}
	return 0 // ""
}

// hasPrefixDecoded tells whether a quoted JSON string starts with prefix once decoded;
// it decodes (allocating) only a string with an escape.
func hasPrefixDecoded(quoted []byte, prefix string) bool {
	if bytes.IndexByte(quoted, '\\') < 0 {
		return bytes.HasPrefix(quoted[1:], []byte(prefix))
	}
	return strings.HasPrefix(jsonscan.DecodeString(quoted), prefix)
}

// PositiveWhole is the count a JSON number num asks for, as the estimator reads every
// count of a request (n, max_tokens, ...): its value when it is a positive whole number
// however written (4, 4.0, 4e0; at most 2^53, a number beyond float64's range too), else
// 0. Other readers of a request's counts use it, so that a count reads the same
// everywhere (requestbody.ImageOutputTokens).
func PositiveWhole(num string) int64 {
	if num == "" || !jsonscan.IsNumber(num[0]) {
		return 0
	}
	n, _ := positiveWhole([]byte(num))
	return n
}

// positiveWhole is a JSON number's value when it is a positive whole number (at most
// maxCap), else 0. A number beyond float64's range is infinity, as Python's json reads
// it: maxCap when positive, the dearest count (an error only for what is no number).
func positiveWhole(num []byte) (int64, error) {
	n, err := strconv.ParseFloat(string(num), 64)
	if err != nil && !math.IsInf(n, 0) {
		return 0, err
	}
	if n >= 1 && n == math.Trunc(n) {
		return int64(min(n, maxCap)), nil
	}
	return 0, nil
}
