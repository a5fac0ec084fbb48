// Package usage owns reading what an upstream inference response says it
// cost: it turns a response, seen as its headers and then its body in
// chunks, into a Usage (model, input, output and cached-input tokens, an
// upstream-reported cost, and whether the usage was fully reported).
//
// The enforcer's ext_proc handler creates one Extractor per response with New
// (the content type, the lower-cased response headers and the Limits), calls
// Write with every body chunk in order as Envoy hands them over, and calls
// Finish once at the end of the stream, or when the stream breaks off.
//
// # What it must not do
//
// It must not buffer a whole body or a whole stream event, delay or alter a
// chunk, retain a slice passed to Write, do I/O, read a clock, log, or know
// about prices, members or settlement. A JSON body or an SSE stream of any
// size is read by an incremental scanner that keeps a bounded amount of
// state (about 2 KiB with the default Limits: the JSON nesting as one bit per
// level up to MaxDepth, the last key, and the few short strings it looks
// for), so memory does not grow with the response. Write allocates nothing (unless a model name holds invalid
// UTF-8, which is replaced as encoding/json does).
//
// # Shapes
//
// Non-streamed JSON (any content type ending in json) and server-sent events
// (text/event-stream). Other or missing content types are sniffed from the
// first byte that is not white space: '{' or '[' means JSON, anything else
// SSE.
//
//   - openai-chat: OpenAI chat/completions and legacy completions JSON,
//     usage {prompt_tokens, completion_tokens, prompt_tokens_details.cached_tokens}.
//   - openai-responses: OpenAI Responses API JSON (object "response"),
//     usage {input_tokens, output_tokens, input_tokens_details.cached_tokens}.
//   - anthropic-messages: Anthropic Messages JSON (type "message"), usage
//     {input_tokens, output_tokens, cache_read_input_tokens,
//     cache_creation_input_tokens}.
//   - openai-chat-sse: chat.completion.chunk events; with
//     stream_options.include_usage the last chunk carries usage (earlier
//     ones carry "usage": null). The last usage object seen wins.
//   - openai-responses-sse: "response.*" events; the terminal events
//     response.completed, response.incomplete and response.failed carry
//     response.usage.
//   - anthropic-sse: message_start carries message.model and the input
//     usage; each message_delta carries cumulative usage (output_tokens,
//     sometimes the input counts too): every field it reports replaces the
//     earlier value.
//
// A body without usage (an error body, a stream without include_usage) gives
// a Usage that is not Complete; Format still names the shape when it was
// recognised, so the caller can tell "no usage requested" from "unknown body".
//
// # Normalised token counts
//
// InputTokens counts every input token, cached or not; CachedInputTokens is
// the part of it read from a prompt cache and CacheCreationInputTokens the
// part written to one. OpenAI already reports this way (prompt_tokens and
// input_tokens include cached_tokens). Anthropic reports the three parts
// separately, so InputTokens = input_tokens + cache_read_input_tokens +
// cache_creation_input_tokens there. A price is therefore
// (In-Cached)*input + Cached*cachedInput + Out*output.
//
// # Completeness
//
// Complete is true only when Finish(true) is called (the stream ended
// normally) and the shape's final usage report was seen with both an input
// and an output count:
//
//   - JSON: the body is one well-formed JSON value (nothing but white space
//     after it) whose top-level usage has both counts;
//   - openai-chat-sse: a chunk whose usage object has prompt_tokens and
//     completion_tokens. By the protocol that chunk is the last data chunk,
//     so "data: [DONE]" is not required on top of it: the end of stream is
//     what proves nothing was cut;
//   - openai-responses-sse: a response.completed, response.incomplete or
//     response.failed event whose response.usage has both counts (an
//     incomplete response, say one cut by max_output_tokens, is still fully
//     reported usage);
//   - anthropic-sse: a message_delta with usage.output_tokens, after the
//     input count (from message_start or the delta itself). message_delta is
//     where Anthropic reports the final output count; message_stop carries
//     nothing and is not required. A stream that sends an error event instead
//     is not Complete, and reports the counts of message_start.
//
// A stream that breaks off (Finish(false)) is never Complete and reports
// whatever usage it had seen; a count or a model cut in the middle is not
// reported at all. Malformed input never fails a Write: a JSON body that is
// malformed (or followed by anything but white space) is not Complete, and
// keeps the counts read before the error; in an SSE event, the JSON values
// before a syntax error count and the rest of the event is skipped.
//
// The SSE reader follows the HTML event-stream rules (one leading BOM
// dropped, LF, CRLF or CR line ends, comments, "data:" with one optional
// space, the data lines of one event joined by a newline) with one
// leniency: each JSON value in the data is used as soon as it is complete,
// so a last event without the blank line after it still counts, and so do
// the values of events that forgot the blank line between them.
//
// Within one JSON document a field that occurs twice takes its last value,
// and a value of the wrong type (a count that is not a non-negative integer
// written without fraction or exponent, a model that is not a string) counts
// as absent: what decoding the document into map[string]any would give. The
// tests check the scanner against exactly that, done with encoding/json.
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
// When both are present and valid the micro-USD one wins. Invalid values
// (signs, NaN, overflow, stray characters) are ignored. The cost is reported
// independently of Complete.
//
// # Content encodings
//
// A body with a Content-Encoding other than identity (gzip, br, zstd...) is
// not decoded: inflating would need a decoder and buffers per response for a
// case the deployment can avoid by asking the upstream for identity (Envoy
// can set accept-encoding on the upstream request). Such a response gives
// Format "unsupported-encoding", is never Complete, and still reports the
// cost header.
package usage
