// Package requestbody owns what the enforcer reads and rewrites in an inference
// request body before it goes upstream, whichever front door saw it (the ext_proc
// request-body filter, the gateway): asking an OpenAI chat-completions stream for its
// usage (WithIncludeUsage) and keeping a model name only when it is safe to carry
// (CleanModel), telling the endpoints the providers do not charge (Unbilled),
// decoding a compressed body (Decode), and reading the request's query as the providers
// read it (QueryParams; UnreadableAnswer, ResponseFieldMask: Google's system parameters
// that would hide the usage).
package requestbody

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/tollgate-dev/tollgate/enforcer/estimate"
	"github.com/tollgate-dev/tollgate/enforcer/internal/jsonscan"
	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
)

// UsageUnasked tells whether the OpenAI-compatible chat API at host ends every stream
// with its usage unasked, so that its streams are sent as the client wrote them
// (WithIncludeUsage is not applied; host may carry a port):
//   - Mistral's API (api.mistral.ai) refuses a body that asks, 422 "Extra inputs are not
//     permitted", and its streams' last chunk carries the usage anyway: asked, every
//     stream through the front door would fail.
//   - OpenRouter (openrouter.ai) includes the usage, with its cost, in every stream's
//     last event and documents stream_options.include_usage as deprecated, of no
//     effect. Asked, its usage event would be the gateway's to leave out for a client
//     that did not ask (package usagechunk), which would take from the client an event
//     OpenRouter sends it (since 2026-12-06).
func UsageUnasked(host string) bool {
	switch pricecatalog.HostName(host) {
	case "api.mistral.ai", "openrouter.ai":
		return true
	}
	return false
}

// AsksStreamUsage tells whether a request to path (with its query, rawQuery, as it
// came) is an OpenAI-shaped completion whose stream reports its usage only when asked
// (stream_options.include_usage): a chat completion (.../chat/completions) or a legacy
// completion (.../completions: OpenAI's /v1/completions, Azure OpenAI's
// /openai/deployments/{deployment}/completions, the OpenAI-compatible servers' own),
// whose stream otherwise ends with no usage and is settled at an estimate from its
// prompt and text (since 2026-12-03; before, a legacy completion's stream was never
// asked). Not Mistral's fill-in-the-middle (.../fim/completions), which sends its usage
// unasked and refuses the member, on whichever of Mistral's hosts it is served; nor a
// request of an Azure OpenAI API version from before stream_options
// (AzureVersionWithoutStreamOptions), which Azure answers 400.
func AsksStreamUsage(path, rawQuery string) bool {
	return strings.HasSuffix(path, "/completions") && !strings.HasSuffix(path, "/fim/completions") &&
		!AzureVersionWithoutStreamOptions(rawQuery)
}

// azureStreamOptionsSince is the first Azure OpenAI API version whose chat completions
// take stream_options (2024-08-01-preview; the GA versions from 2024-10-21).
const azureStreamOptionsSince = "2024-08-01"

// AzureVersionWithoutStreamOptions tells whether a query names an Azure OpenAI API
// version (api-version, a date, "-preview" or not) from before stream_options. Each
// Azure API version is a frozen contract, and those before 2024-08-01-preview answer a
// body with stream_options 400 "Unknown parameter: 'stream_options'." (older ones
// "Unrecognized request argument supplied: stream_options"): asked for its usage, every
// stream of a program on such a version (2024-02-01, 2024-06-01 and 2023-05-15 are
// common) failed through the enforcer, where against Azure it runs. Such a stream goes
// as the client wrote it and is charged an estimate from its prompt and text, reported
// as such. A version that is not a date (Azure's v1 API's "preview", "latest") and a
// query without one are not before it. Only the query is read: any upstream that names
// api-version is Azure's API, or a proxy of it.
func AzureVersionWithoutStreamOptions(rawQuery string) bool {
	for p := range QueryParams(rawQuery) { // nothing to read in a request without a query
		// Any of them: a query naming two versions may be read by either.
		if v := p.Value; p.Name == "api-version" && len(v) >= len(azureStreamOptionsSince) &&
			isDate(v[:len(azureStreamOptionsSince)]) && v[:len(azureStreamOptionsSince)] < azureStreamOptionsSince {
			return true
		}
	}
	return false
}

// isDate tells whether s is a date written YYYY-MM-DD (digits where the digits go).
func isDate(s string) bool {
	if len(s) != 10 || s[4] != '-' || s[7] != '-' {
		return false
	}
	for i, c := range []byte(s) {
		if i != 4 && i != 7 && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// includeUsageMember is spliced in when a streaming request has no stream_options.
var includeUsageMember = []byte(`"stream_options":{"include_usage":true},`)

// WithIncludeUsage returns an OpenAI chat-completions request body that asks for the
// stream's usage: when body is one JSON object with "stream": true whose
// stream_options.include_usage is not true, a copy with it set, and true; otherwise
// false (nothing to change, or not a body this understands).
//
// Every other byte stays as it was (numbers, escapes, key order, white space): the
// member is spliced in after the opening brace when stream_options is absent, and only
// the value of stream_options is rewritten when it is present (null, or an object
// without include_usage true; its other members are kept). Of keys given twice the last
// counts, as in the parsers upstreams use.
//
// It allocates nothing unless it rewrites: it runs for every chat-completions request
// the gateway proxies, whose garbage would otherwise fragment the heap that its
// streams' long-lived buffers sit in.
func WithIncludeUsage(body []byte) ([]byte, bool) {
	// jsonscan.WellFormed checks the whole body (one value, nothing after it) without
	// allocating; what follows walks a document known to be well-formed, so it only
	// has to find where each value ends.
	if !jsonscan.WellFormed(body) {
		return nil, false
	}
	open := jsonscan.SkipSpace(body, 0)
	if body[open] != '{' {
		return nil, false
	}
	stream := false
	optsStart, optsEnd := -1, -1
	eachMember(body, open, func(key []byte, start, end int) {
		switch {
		case jsonscan.KeyIs(key, "stream"):
			stream = string(body[start:end]) == "true"
		case jsonscan.KeyIs(key, "stream_options"):
			optsStart, optsEnd = start, end
		}
	})
	if !stream {
		return nil, false
	}
	return includeUsage(body, open+1, optsStart, optsEnd)
}

// AskStreamUsage is WithIncludeUsage for a front door that read the body's estimate
// first (gate.BodyHint): est is what estimate.Input read from these very bytes, or nil
// when it read nothing from them. The estimate says all that is needed: whether the
// body is a stream (est.Stream) and where its stream_options lie (est.StreamOptions),
// in a body it found well-formed. So the body is neither checked nor walked again:
// on an agent's 200 KiB body those were WithIncludeUsage's whole time
// (BenchmarkAskStreamUsageLargeBody). A body with no estimate, or not of the length the
// estimate read (est.BodyBytes: not the body it was read from), is checked and walked
// as WithIncludeUsage does, so that a malformed body is never rewritten.
func AskStreamUsage(body []byte, est *estimate.Request) ([]byte, bool) {
	switch {
	case est == nil || est.BodyBytes != len(body) || est.BodyBytes == 0:
		return WithIncludeUsage(body)
	case !est.Stream:
		return nil, false
	}
	optsStart, optsEnd := -1, -1
	if est.StreamOptions[1] > 0 {
		optsStart, optsEnd = est.StreamOptions[0], est.StreamOptions[1]
	}
	return includeUsage(body, jsonscan.SkipSpace(body, 0)+1, optsStart, optsEnd)
}

// includeUsage rewrites a well-formed stream body to ask for its usage: open is just
// after the body's opening brace, body[optsStart:optsEnd] its stream_options value
// (-1, -1 when it has none).
func includeUsage(body []byte, open, optsStart, optsEnd int) ([]byte, bool) {
	if optsStart < 0 {
		return splice(body, open, open, includeUsageMember), true
	}
	opts := body[optsStart:optsEnd]
	var replacement []byte
	switch opts[0] {
	case 'n': // null
		replacement = []byte(`{"include_usage":true}`)
	case '{':
		already := false
		eachMember(opts, 0, func(key []byte, start, end int) {
			if jsonscan.KeyIs(key, "include_usage") {
				already = string(opts[start:end]) == "true"
			}
		})
		if already {
			return nil, false
		}
		var members map[string]json.RawMessage
		if err := json.Unmarshal(opts, &members); err != nil {
			return nil, false
		}
		members["include_usage"] = json.RawMessage("true")
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(members); err != nil {
			return nil, false
		}
		replacement = bytes.TrimRight(b.Bytes(), "\n")
	default:
		return nil, false // not an object: the upstream will say so
	}
	return splice(body, optsStart, optsEnd, replacement), true
}

// The helpers below walk JSON already known to be well-formed (jsonscan.WellFormed).

// eachMember calls fn with each member of the object whose opening brace is at b[i]:
// its key as written (quotes and escapes included), and where its value starts and
// ends (without the space around it).
func eachMember(b []byte, i int, fn func(key []byte, start, end int)) {
	i = jsonscan.SkipSpace(b, i+1)
	if b[i] == '}' {
		return
	}
	for {
		k := i
		i = jsonscan.SkipString(b, i)
		key := b[k:i]
		i = jsonscan.SkipSpace(b, jsonscan.SkipSpace(b, i)+1) // past the colon
		start := i
		i = jsonscan.SkipValue(b, i)
		fn(key, start, i)
		i = jsonscan.SkipSpace(b, i)
		if b[i] == '}' {
			return
		}
		i = jsonscan.SkipSpace(b, i+1) // past the comma
	}
}

// MaxModelBytes bounds a model name taken from a request body.
const MaxModelBytes = 256

// CleanModel keeps a model name from a request body only when it is short, valid UTF-8
// without control characters; otherwise the settlement goes without it (the response's
// model, when it names one, wins anyway).
func CleanModel(s string) string {
	if len(s) > MaxModelBytes || !utf8.ValidString(s) {
		return ""
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return ""
		}
	}
	return s
}
