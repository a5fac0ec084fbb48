// Package responseusage owns reading what an upstream inference response says it
// cost: it turns a response, seen as its headers and then its body in
// chunks, into a Usage (model, input, output and cached-input tokens, or the
// duration of input audio for a model billed by it, an upstream-reported cost,
// whether the usage was fully reported, and how much output text the response
// carried, for an estimate when it was not).
//
// The enforcer's ext_proc handler creates one Extractor per response with New
// (the content type, the lower-cased response headers and the Limits), calls
// Write with every body chunk in order as Envoy hands them over (still
// content-encoded), and calls Finish once at the end of the stream, or when
// the stream breaks off. Finish must be called: it also ends the decoder of
// a compressed body.
//
// # What it must not do
//
// It must not buffer a whole body or a whole stream event, delay or alter a
// chunk, retain a slice passed to Write, do I/O, read a clock, log, or know
// about prices, members or settlement. A JSON body or an SSE stream of any
// size is read by an incremental scanner that keeps a bounded amount of
// state (about 1.7 KiB with the default Limits: the JSON nesting as one bit per
// level up to MaxDepth, the last key, and the few short strings it looks
// for), so memory does not grow with the response. On an identity body Write
// allocates nothing (unless a model name holds invalid UTF-8, which is
// replaced as encoding/json does, or is longer than 64 bytes: its buffer
// grows once); for a compressed one see Content encodings.
//
// # Shapes
//
// Non-streamed JSON (any content type ending in json) and server-sent events
// (text/event-stream). Other or missing content types are sniffed from the
// first byte that is not white space: '{' or '[' means JSON, anything else
// SSE. A JSON body that is a top-level array is read element by element, each
// element a document of a stream (gemini-json-stream).
//
//   - openai-chat: OpenAI chat/completions and legacy completions JSON,
//     usage {prompt_tokens, completion_tokens, prompt_tokens_details.cached_tokens
//     and .cache_write_tokens}, DeepSeek's prompt_cache_hit_tokens (the cached input
//     where cached_tokens is absent, at most prompt_tokens), and total_tokens: the
//     output is at least what the total leaves beyond the prompt (xAI leaves a
//     reasoning model's thinking out of completion_tokens, which OpenAI counts it in,
//     and counts it in the total); the
//     usage's cost, OpenRouter's usage.cost (USD), Perplexity's usage.cost.total_cost
//     (its cost an object of parts) or xAI's usage.cost_in_usd_ticks (an integer of
//     1e-10 USD, in the Responses API's usage too), is the upstream's cost (CostMicroUSD),
//     and the audio parts prompt_tokens_details.audio_tokens and
//     completion_tokens_details.audio_tokens (no split of the cached tokens by
//     modality: CachedAudioInputReported stays false).
//   - openai-responses: OpenAI Responses API JSON (object "response"),
//     usage {input_tokens, output_tokens, input_tokens_details.cached_tokens and
//     .cache_write_tokens}, and beside it tool_usage.image_gen {input_tokens,
//     cached_tokens}: the input of its image generation tool's image model, billed
//     apart (ImageToolInputTokens; nothing else of tool_usage is read).
//   - anthropic-messages: Anthropic Messages JSON (type "message"), usage
//     {input_tokens, output_tokens, cache_read_input_tokens,
//     cache_creation_input_tokens}, plus the counts of the usage.iterations[]
//     entries the top-level ones leave out (every type but "message" and
//     "fallback_message": compaction, advisor_message), which are billed.
//   - openai-embeddings: OpenAI embeddings JSON (object "list"), usage
//     {prompt_tokens, total_tokens}: input alone, since an embedding model
//     generates nothing (a list whose usage has completion_tokens is read
//     as openai-chat).
//   - gemini: Google's Gemini API (generateContent) JSON, usage in usageMetadata
//     {promptTokenCount (cached ones included), candidatesTokenCount,
//     thoughtsTokenCount, cachedContentTokenCount, toolUsePromptTokenCount}, the model
//     in modelVersion. Output is candidates + thoughts (thinking is billed as output);
//     input is the prompt + the results of its tools given back to the model
//     (toolUsePromptTokenCount: URL context, code execution, Search, billed as input). Gemini
//     leaves a count of 0 out, so the input count is the whole report. The
//     lists promptTokensDetails, candidatesTokensDetails and cacheTokensDetails
//     ([{modality, tokenCount}]) split the input, the output and the cached
//     input by modality: their AUDIO entries are AudioInputTokens,
//     AudioOutputTokens and CachedAudioInputTokens (at most the cached count).
//     Gemini lists only the modalities it counted: a list without an AUDIO
//     entry reports 0 audio, no list leaves the split unreported. The Interactions
//     API's answer (POST /v1beta/interactions) is read as this shape: its usage names
//     the same counts total_input_tokens, total_output_tokens, total_thought_tokens,
//     total_cached_tokens and total_tool_use_tokens, its lists *_tokens_by_modality
//     ([{modality, tokens}], "audio" in lower case), and its grounding_tool_count's
//     google_search entry counts Search's queries (WebSearchRequests).
//   - openai-audio-duration: OpenAI's audio transcriptions and translations
//     by a model billed per minute of input audio (whisper-1), JSON (the json
//     and verbose_json response formats), usage {"type": "duration",
//     "seconds": N}: AudioInputMillis is N seconds in milliseconds, the token
//     counts are 0 and reported (a duration is the whole report). It is read
//     from a top-level usage that has seconds and no token count; one that
//     also counts tokens is read by its tokens (gpt-4o-transcribe's JSON,
//     {"type": "tokens", input_tokens, output_tokens, ...}, is openai-responses,
//     its input_tokens counting the audio tokens too). Never streamed.
//   - openai-conversation: OpenAI's conversation object (object "conversation",
//     no usage), the answer of its conversations' create and update, which store
//     items and generate nothing: no count, Complete when the body was one
//     well-formed JSON value, and settled as an unbilled request's answer
//     (inflight.FromResponse). Mistral's conversations, at the same paths, answer
//     "conversation.response" with a usage (openai-chat).
//   - gemini-sse: streamGenerateContent?alt=sse: every chunk carries the usage
//     so far; the chunk whose candidate gives its finishReason is the last. The
//     Interactions API's stream too: its events' event_type is read as a type,
//     step.stop and interaction.status_update carry the usage so far, and
//     interaction.completed, the last, carries the interaction (read as a response
//     root: its model, its whole usage, lists included).
//   - gemini-json-stream: streamGenerateContent without alt=sse, as Google's REST
//     API answers a client that leaves it out (curl, hand-written clients):
//     application/json, a top-level array of the chunks gemini-sse carries
//     ("[{...}\r\n,\r\n{...}\r\n]"), each element sent as it is generated. Each
//     element is read when it completes, as the same chunk of the event stream is;
//     an element that is not a Gemini chunk adds only its output text (an array of
//     anything else reports no usage: no other API answers with an array of usage
//     reports).
//   - openai-chat-sse: chat.completion.chunk events; with
//     stream_options.include_usage the last chunk carries usage (earlier
//     ones carry "usage": null, which reports nothing). Groq's last chunk
//     carries it in x_groq.usage too, asked or not: its prompt_tokens,
//     completion_tokens, total_tokens and prompt_tokens_details.cached_tokens
//     are read as the top-level usage's (since 2026-12-06; before, a Groq
//     stream not asked for its usage reported none and was estimated).
//   - openai-responses-sse: "response.*" events; the terminal events
//     response.completed, response.incomplete and response.failed carry
//     response.usage (and response.tool_usage, read as a JSON body's tool_usage).
//   - anthropic-sse: message_start carries message.model and the input
//     usage; each message_delta carries cumulative usage (output_tokens,
//     sometimes the input counts too).
//   - openai-transcription-sse: a streamed transcription (gpt-4o-transcribe
//     and the like with stream=true): transcript.text.delta events, then
//     transcript.text.done whose usage has input_tokens and output_tokens
//     (read as the Responses API's are).
//   - audio: an answer of an audio/* media type (OpenAI's speech in its default
//     shape, whatever its response_format), which reports nothing: it is never
//     sniffed as JSON or events, and its duration is read from its container's
//     headers by package audiolength into AudioOutputMillis (0 for a container
//     it does not read). Never Complete: the settlement counts the duration as
//     estimated output tokens (enforcer/inflight).
//
// The speed tier a request ran at (Usage.Tier, dearer than the catalog's standard
// prices) is read where each provider says it, any document of the shape saying so
// being enough:
//   - OpenAI's top-level "service_tier" (a chat document's, a Responses object's, a
//     Responses event's response.service_tier): "priority" and "fast" are the fast
//     tier, "ultrafast" the ultrafast one. A Responses stream's terminal event
//     (response.completed, .incomplete, .failed) says the tier it ran at and wins over
//     its earlier events, which echo the tier the request asked for;
//   - Anthropic's usage.speed (a message's, message_start's message.usage,
//     message_delta's usage) "fast": its fast mode. A usage's speed never overrides a
//     service_tier of the same object. Anthropic's usage.service_tier "priority" (its
//     Priority Tier, a capacity commitment without a per-token surcharge) is not read;
//   - Gemini's usageMetadata.trafficType ON_DEMAND_PRIORITY (Vertex AI, whose chunks
//     before its last carry a usageMetadata of the trafficType alone, no count: read as
//     Gemini's, so that a stream cut before its counts keeps its tier and model) or
//     usageMetadata.serviceTier "priority" (the Gemini API), and the Gemini API's
//     response header X-Gemini-Service-Tier "priority" (HeaderGeminiServiceTier),
//     whatever the body;
//   - Amazon Bedrock Converse's serviceTier.type "priority" (its answer, its stream's
//     metadata event), InvokeModel's response header X-Amzn-Bedrock-Service-Tier
//     "priority" (HeaderBedrockServiceTier), whatever the body;
//   - Amazon Bedrock's latency-optimized inference: Converse's
//     performanceConfig.latency "optimized" (its answer, its stream's metadata event),
//     InvokeModel's response header X-Amzn-Bedrock-PerformanceConfig-Latency
//     "optimized" (HeaderBedrockLatency), whatever the body. Bedrock says "standard"
//     when it served the request at standard latency (the quota spent), and bills it so.
//
// Flex, the tier below standard (half the price), is the answer's only where every
// document of the shape that names a tier names it and none names a dearer one:
// OpenAI's service_tier "flex" (a chat document's or chunk's, a Responses object's or
// terminal event's: the earlier events' echo of the request is not read as flex), Gemini's
// usageMetadata.trafficType ON_DEMAND_FLEX (Vertex AI's Flex PayGo) or serviceTier
// "flex" (the Gemini API; its header alone is not read). Bedrock's "flex" (Converse's
// serviceTier.type, the InvokeModel header) is standard: AWS publishes no ratio.
//
// A body without usage (an error body, a stream without include_usage) gives
// a Usage that is not Complete; Format still names the shape when it was
// recognised, so the caller can tell "no usage requested" from "unknown body".
// InputReported and OutputReported say which counts the response reported at
// all, so that a count of 0 is not mistaken for a missing one.
//
// # Which usage counts when there are several
//
// A response may report usage more than once: an event stream in several
// events (an OpenAI chunk per choice or a proxy's extra chunk, Anthropic's
// message_start then each message_delta, the Responses API's in-progress
// events then its terminal one), a JSON body with "usage" twice. Each count
// (input, output, cached, cache creation, audio duration, the audio parts)
// is the LARGEST valid value any of them reported, the usage object of each
// recognised place and every repetition of a key within it alike. A later, smaller report never lowers
// a count: cumulative reports only grow, a report that shrinks is a bug or a
// forgery, and charging the larger one never undercharges. A null usage or
// a count of the wrong type reports nothing (it does not erase an earlier
// count). The model, "type" and "object" are strings, not counts: within one
// document the last occurrence wins. Once the final report of the shape was
// seen, later reports can raise counts but not undo Complete.
//
// # Normalised token counts
//
// InputTokens counts every input token, cached or not; CachedInputTokens is
// the part of it read from a prompt cache and CacheCreationInputTokens the
// part written to one. OpenAI already reports this way (prompt_tokens and
// input_tokens include cached_tokens, and cache_write_tokens, the cache writes
// OpenAI bills from GPT-5.6 on). Anthropic reports the three parts
// separately, so InputTokens = input_tokens + cache_read_input_tokens +
// cache_creation_input_tokens there. A price is therefore
// (In-Cached)*input + Cached*cachedInput + Out*output.
//
// The audio parts, where reported, split these further: AudioInputTokens is
// the audio part of InputTokens, cached audio included, and
// CachedAudioInputTokens the audio part of CachedInputTokens, so the uncached
// audio is their difference.
//
// # Completeness
//
// Complete is true only when Finish(true) is called (the stream ended
// normally) and the shape's final usage report was seen with both an input
// and an output count:
//
//   - JSON: the body is one well-formed JSON value (nothing but white space
//     after it) whose top-level usage has both counts (openai-embeddings: its
//     input count, the output being 0; openai-audio-duration: its seconds);
//   - openai-chat-sse: a chunk whose usage object has prompt_tokens and
//     completion_tokens. By the protocol that chunk is the last data chunk,
//     so "data: [DONE]" is not required on top of it: the end of stream, or
//     the "[DONE]" after it (below), is what proves nothing was cut;
//   - openai-responses-sse: a response.completed, response.incomplete or
//     response.failed event whose response.usage has both counts (an
//     incomplete response, say one cut by max_output_tokens, is still fully
//     reported usage);
//   - openai-transcription-sse: a transcript.text.done event whose usage has
//     both counts (a stream cut before it is not Complete);
//   - gemini-sse: the chunk whose candidate gives its finishReason, with the
//     input count, or whose promptFeedback gives a blockReason (a prompt Gemini
//     refused: its one chunk, no candidate; since 2026-12-07, before which such a
//     stream was incomplete); gemini-json-stream: the same, and the array closed (nothing
//     but white space after its ']'). An array cut anywhere is not Complete, and
//     reports what its complete elements did (their text too), as a cut event
//     stream does;
//   - anthropic-sse: a message_delta with usage.output_tokens, after the
//     input count (from message_start or the delta itself). message_delta is
//     where Anthropic reports the final output count; message_stop carries
//     nothing and is not required. A stream that sends an error event instead
//     is not Complete, and reports the counts of message_start.
//
// A stream that breaks off (Finish(false)) is not Complete and reports
// whatever usage it had seen, unless it ended by its protocol first: an event
// closed by its blank line, after the final report of its shape (or being it),
// that is the shape's terminal event:
//
//   - openai-chat-sse: an event whose data is "[DONE]" (OpenAI's sentinel,
//     which Mistral's, DeepSeek's, xAI's... streams copy);
//   - openai-responses-sse: response.completed, response.incomplete or
//     response.failed (with its usage: it is the final report too);
//   - anthropic-sse: message_stop, after message_delta (Anthropic's on Bedrock
//     and Vertex AI too);
//   - openai-transcription-sse, openai-speech-sse: transcript.text.done,
//     speech.audio.done, each with its usage (an image stream's
//     image_generation.completed is not one: whether a stream of n images sends
//     one each is not documented, and ending at the first would settle the rest
//     complete at its usage; broken off, an image stream stays incomplete);
//   - gemini-sse read from the Interactions API: interaction.completed (or the
//     "[DONE]" after it);
//   - bedrock-converse-stream: the metadata event (after messageStop), a whole
//     frame whose CRC matched; bedrock-invoke-stream (and a Claude model's
//     events through InvokeModelWithResponseStream): the chunk carrying
//     amazon-bedrock-invocationMetrics, which Bedrock sends in the last chunk
//     of every model's stream (Llama's, Nova's, Mistral's, Cohere's...);
//   - gemini-json-stream: the array's closing ']' (its syntax ends it: a
//     client's JSON decoder may stop there and close).
//
// Nothing the answer bills follows it, and a client may close as soon as it
// reads it: the official Go SDK (openai-go) does at "[DONE]", and a program
// that breaks out of its loop at message_stop or response.completed makes the
// OpenAI and Anthropic SDKs abort the request, before the body's end (a chunked
// terminator, HTTP/2's END_STREAM) arrives; Envoy then resets the stream before
// ext_proc sees its end_of_stream (since 2026-12-03; TestStreamEndedByDone,
// TestStreamEndedByItsTerminalEvent, TestBedrockStreamEndedByItsLastEvent,
// TestGeminiJSONArray). Gemini's event stream (streamGenerateContent with
// alt=sse) has no terminal event: the chunk with finishReason and the final
// usageMetadata is the last, but nothing in it says so, so such a stream
// broken off after it stays incomplete (it still reports that usage,
// whole: a client that leaves there is charged what it was answered, its
// receipt marked incomplete). A compressed stream ends so too, since the end of
// 2026-12-03: its terminal event once decoded, its coding's end (a checksum)
// not waited for, unless the coding failed on its content (see below). A
// count or a model cut in the middle is not
// reported at all. Malformed input never fails a Write: a JSON body that is
// malformed (or followed by anything but white space) is not Complete, and
// keeps the counts read before the error; in an SSE event, the JSON values
// before a syntax error count and the rest of the event is skipped. One
// leading UTF-8 BOM of a JSON body, or of one whose type is unknown, is
// dropped before it is read or sniffed, as fetch's json() and Python's
// json.loads drop it (since 2026-12-02; before, such an answer read as
// nothing and its output was charged as 0 tokens).
//
// The SSE reader follows the HTML event-stream rules (one leading BOM
// dropped, LF, CRLF or CR line ends, comments, "data:" with one optional
// space, the data lines of one event joined by a newline) with one
// leniency: each JSON value in the data is used as soon as it is complete,
// so a last event without the blank line after it still counts, and so do
// the values of events that forgot the blank line between them.
//
// A value of the wrong type (a count that is not a non-negative integer
// written without fraction or exponent, a model that is not a string) counts
// as absent. The one number that may have a fraction is a duration's
// usage.seconds: it is read exactly to the millisecond, a remainder rounding
// up to the next one (9.0001 s is 9001 ms, 0.0004 s is 1 ms), and counts as
// absent when negative, written with an exponent (9e1: no provider writes
// one) or beyond an int64 of milliseconds. The tests check the scanner against a reference that decodes
// each document with encoding/json (keeping repeated keys) and applies the
// same rules.
//
// # Output text
//
// TextBytes counts the output text the response carried, in bytes of UTF-8
// as encoding/json would decode it (escapes resolved; each byte that is not
// part of valid UTF-8 counted as U+FFFD, 3 bytes). It is read, whether or
// not usage was reported, from:
//
//   - OpenAI chat completions: choices[].delta (streamed) or
//     choices[].message: content, refusal, reasoning_content, reasoning,
//     tool_calls[].function.arguments, function_call.arguments, audio.transcript;
//     legacy completions: choices[].text. A streamed answer in audio's
//     choices[].delta.audio.data (base64 PCM16 at 24 kHz) is no text: its length is
//     the audio's duration, AudioOutputMillis (64 characters a millisecond);
//   - OpenAI Responses, streamed: the "delta" string of every response.*.delta
//     event (output text, refusal, reasoning, function-call arguments...)
//     but response.audio.delta, which is base64 audio; not streamed:
//     output[].content[].text and .refusal, output[].arguments,
//     output[].summary[].text;
//   - OpenAI transcriptions, streamed: the "delta" string of every
//     transcript.text.delta event. The top-level "text" of a non-streamed
//     transcription is not counted: it would estimate output tokens where
//     whisper-1 bills none;
//   - Anthropic, streamed: content_block_delta's delta.text,
//     delta.partial_json and delta.thinking; not streamed: content[].text,
//     content[].thinking, and content[].input (a tool call's input object),
//     counted as its JSON text as sent.
//
// A streamed response is counted from its deltas only, so the full text a
// terminal event repeats (response.completed, transcript.text.done) is not
// counted twice. In an
// event stream only complete JSON values count; in a JSON body, the text
// read before the body broke off counts. The caller turns it into an
// estimate of the output tokens when they were not reported.
//
// # Upstream cost
//
// An upstream (or a gateway in front of it) may report the cost itself in a
// response header. Two spellings are read, and a valid one sets CostMicroUSD,
// which the control plane prefers to its own price list:
//
//   - HeaderCostMicroUSD, "x-upstream-cost-micro-usd": a non-negative integer
//     number of micro-USD, such as "1234";
//   - HeaderCostUSD, "x-upstream-cost-usd": a non-negative decimal USD amount
//     such as "0.001234", also with an exponent as float printers write it
//     ("1.5e-05"). It is converted without floating point; digits below one
//     micro-USD round the amount up to the next micro-USD, so an upstream's
//     sub-micro precision never makes a charge smaller than the real cost.
//
// LiteLLM proxy's own header, HeaderLiteLLMCost ("x-litellm-response-cost", USD),
// is read like the second. When several are present and valid the micro-USD one
// wins, then Tollgate's USD one. Invalid values (signs, NaN, overflow, stray
// characters) are ignored. The cost is reported independently of Complete.
//
// A body may report it too: OpenRouter's usage.cost (in a chat completion, or a
// stream's last chunk) is the request's cost in USD, a JSON number read as the
// USD header is (exactly, rounded up to the micro-USD; a number longer than 32
// bytes or negative is ignored), the largest a stream's documents reported. A
// header wins over it. With OpenRouter's "bring your own key" (usage.is_byok true)
// usage.cost is only OpenRouter's fee, and the provider billed the key
// usage.cost_details.upstream_inference_cost (read alike): the cost is their sum.
// Without, it is the larger of the two (OpenRouter reports them equal).
//
// # Content encodings
//
// gzip (also x-gzip, several members in a row), deflate and br bodies are
// decoded while they stream, and so are two of them stacked ("gzip, br":
// undone in the reverse order of the header); "identity" is skipped. RFC
// 9110's deflate is a zlib stream, but some servers send raw deflate: a body
// whose first two bytes are a valid zlib header is read as zlib, any other as
// raw deflate. Complete then also needs the compressed stream to have ended
// properly (gzip's trailer and CRC, zlib's checksum, deflate's final block,
// brotli's last meta-block), or, for a stream, its terminal event decoded
// with no failure of the coding before it (its end carries no byte of the
// answer; a checksum that came and did not match leaves it incomplete);
// bytes after that end are ignored.
//
// The decompressors (compress/gzip, compress/flate, compress/zlib and
// github.com/andybalholm/brotli) pull their input from a reader and cannot
// resume after the reader fails, while Write has chunks pushed to it. Each
// compressed response's decoder therefore runs as a coroutine (iter.Pull):
// Write hands it the chunk and resumes it; it reads the chunk, scans what it
// decodes, and yields back when the chunk is used up. Write and decoder never
// run at once, the chunk is not retained, and when Write returns everything
// the decompressor could produce from it has been scanned (a server that
// streams events compressed flushes after each, so each event is read as it
// arrives). A goroutine fed over channels does the same at a higher cost
// per chunk (BenchmarkDecodeDriver). Finish ends the coroutine.
//
// Memory stays bounded per response, whatever the body's size: the scanner's
// state plus the decompressor's, which is 32 KiB of window for gzip and
// deflate and, for br, the stream's window (at most 16 MiB, grown only as the
// output reaches it) and a 32 KiB input buffer. Decompressors and buffers
// are pooled across responses, so a compressed response allocates only the
// coroutine besides what an identity one does (about 7 more small
// allocations per response, none per chunk), except that the brotli library
// allocates for each meta-block (a server's flush: about 3 allocations per
// streamed event). Nothing is buffered whole, so a decompression bomb costs CPU
// (decoding and scanning what it inflates to, at the rates of
// BenchmarkSSE) but no memory; a Write whose chunk inflates to gigabytes
// takes as long as scanning them.
//
// Corrupt compressed data never fails a Write or panics (a panicking
// decompressor is recovered), and a decompressor that stops making progress
// is stopped: the usage read before the corruption stands, is not Complete,
// and the body bytes that could not be decoded (all of them when nothing
// could be, as for a body that is not in its stated encoding; else those
// from the point of failure on, as far as the decompressor had read) are
// added to TextBytes with TextBytesFromRaw set, so an estimate stays
// possible. A body cut short (Finish(false), or a compressed stream that
// just stops) loses only what the decompressor had not yet released: up to
// its window of output for gzip and deflate when the server did not flush.
//
// Any other coding (zstd, compress, more than two codings) is not decoded:
// the response gives Format "unsupported-encoding", is never Complete, still
// reports the cost header, and its TextBytes is the count of body bytes as
// received, with TextBytesFromRaw set.
package responseusage
