package responseusage

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/tollgate-dev/tollgate/internal/testaudio"
	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
)

const (
	ctJSON = "application/json"
	ctSSE  = "text/event-stream; charset=utf-8"
)

func i64(v int64) *int64 { return &v }

// run feeds chunks to a new Extractor and finishes it. Each chunk is passed
// through a buffer that is overwritten after Write returns, so a retained
// slice would show up as a different result.
func run(ct string, h map[string]string, lim Limits, chunks [][]byte, endOfStream bool) Usage {
	e := New(ct, h, lim)
	var buf []byte
	for _, c := range chunks {
		buf = append(buf[:0], c...)
		if err := e.Write(buf); err != nil {
			panic(err)
		}
		for i := range buf {
			buf[i] = '"'
		}
	}
	return e.Finish(endOfStream)
}

// splitAt cuts body at the given increasing offsets.
func splitAt(body []byte, cuts ...int) [][]byte {
	var out [][]byte
	prev := 0
	for _, c := range cuts {
		out = append(out, body[prev:c])
		prev = c
	}
	return append(out, body[prev:])
}

// randomSplit cuts body into pieces of random sizes, many of them tiny.
func randomSplit(body []byte, r *rand.Rand) [][]byte {
	var out [][]byte
	for len(body) > 0 {
		n := 1 + r.IntN(min(len(body), 1+r.IntN(64)))
		out = append(out, body[:n])
		body = body[n:]
	}
	return out
}

func bytewise(body []byte) [][]byte {
	out := make([][]byte, len(body))
	for i := range body {
		out[i] = body[i : i+1]
	}
	return out
}

func seedOf(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return h.Sum64()
}

// checkSplits asserts that every way of cutting body gives want.
func checkSplits(t *testing.T, ct string, h map[string]string, body []byte, want Usage) {
	t.Helper()
	check := func(how string, chunks [][]byte) {
		t.Helper()
		if got := run(ct, h, Limits{}, chunks, true); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s:\n got %s\nwant %s", how, show(got), show(want))
		}
	}
	check("whole", [][]byte{body})
	check("empty chunks", [][]byte{nil, body[:len(body)/2], {}, body[len(body)/2:], nil})
	check("byte by byte", bytewise(body))
	for i := 0; i <= len(body); i++ {
		check(fmt.Sprintf("split at %d", i), splitAt(body, i))
	}
	r := rand.New(rand.NewPCG(seedOf(t.Name()), 1))
	for i := range 200 {
		check(fmt.Sprintf("random split %d", i), randomSplit(body, r))
	}
}

func show(u Usage) string {
	c := "nil"
	if u.CostMicroUSD != nil {
		c = fmt.Sprint(*u.CostMicroUSD)
	}
	return fmt.Sprintf("{Model:%q In:%d Out:%d Cached:%d CacheCreation:%d CacheCreation1h:%d AudioMs:%d Pages:%d AudioTokens:%d/%d(%v/%v) CachedAudio:%d(%v) ImageTool:%d/%d Cost:%s Complete:%v Format:%q Tier:%v Regional:%v Reported:%v/%v Text:%d FromRaw:%v}",
		u.Model, u.InputTokens, u.OutputTokens, u.CachedInputTokens, u.CacheCreationInputTokens, u.CacheCreation1hInputTokens, u.AudioInputMillis, u.OCRPages,
		u.AudioInputTokens, u.AudioOutputTokens, u.AudioInputReported, u.AudioOutputReported, u.CachedAudioInputTokens, u.CachedAudioInputReported,
		u.ImageToolInputTokens, u.ImageToolCachedInputTokens, c, u.Complete, u.Format, u.Tier, u.Regional, u.InputReported, u.OutputReported, u.TextBytes, u.TextBytesFromRaw)
}

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type fixtureCase struct {
	name    string
	file    string
	ct      string
	headers map[string]string
	want    Usage
}

var fixtureCases = []fixtureCase{
	{
		name: "openai chat json", file: "openai_chat.json", ct: "application/json",
		want: Usage{Model: "gpt-4o-2024-08-06", InputTokens: 1117, OutputTokens: 46, CachedInputTokens: 1024, Complete: true, Format: FormatOpenAIChat, InputReported: true, OutputReported: true, AudioInputReported: true, AudioOutputReported: true, TextBytes: 172},
	},
	{
		name: "openai chat json with tool call arguments that mention usage", file: "openai_chat_tools.json", ct: "application/json; charset=utf-8",
		want: Usage{Model: "gpt-4o-mini-2024-07-18", InputTokens: 82, OutputTokens: 17, Complete: true, Format: FormatOpenAIChat, InputReported: true, OutputReported: true, AudioInputReported: true, AudioOutputReported: true, TextBytes: 61},
	},
	{
		name: "openai legacy completions json", file: "openai_completions.json", ct: "application/json",
		want: Usage{Model: "gpt-3.5-turbo-instruct", InputTokens: 5, OutputTokens: 7, Complete: true, Format: FormatOpenAIChat, InputReported: true, OutputReported: true, TextBytes: 23},
	},
	{
		name: "openai responses json", file: "openai_responses.json", ct: "application/json",
		want: Usage{Model: "o4-mini-2025-04-16", InputTokens: 328, OutputTokens: 952, CachedInputTokens: 256, Complete: true, Format: FormatOpenAIResponses, InputReported: true, OutputReported: true, TextBytes: 103},
	},
	{
		name: "anthropic messages json", file: "anthropic_messages.json", ct: "application/json",
		want: Usage{Model: "claude-sonnet-4-20250514", InputTokens: 12 + 4096 + 2048, OutputTokens: 37, CachedInputTokens: 4096, CacheCreationInputTokens: 2048, Complete: true, Format: FormatAnthropicMessages, InputReported: true, OutputReported: true, TextBytes: 77},
	},
	{
		name: "openai error body has no usage", file: "openai_error.json", ct: "application/json",
		want: Usage{},
	},
	{
		name: "openai chat sse with include_usage", file: "openai_chat_stream.sse", ct: ctSSE,
		want: Usage{Model: "gpt-4.1-mini-2025-04-14", InputTokens: 1930, OutputTokens: 12, CachedInputTokens: 1792, Complete: true, Format: FormatOpenAIChatSSE, InputReported: true, OutputReported: true, AudioInputReported: true, AudioOutputReported: true, TextBytes: 83},
	},
	{
		name: "openai chat sse without include_usage", file: "openai_chat_stream_no_usage.sse", ct: ctSSE,
		want: Usage{Model: "gpt-4.1-mini-2025-04-14", Format: FormatOpenAIChatSSE, TextBytes: 83},
	},
	{
		name: "openai-compatible sse with comments, ids and multi-line data", file: "openai_chat_stream_multiline.sse", ct: "text/event-stream",
		want: Usage{Model: "meta-llama/llama-3.3-70b-instruct", InputTokens: 31, OutputTokens: 2, Complete: true, Format: FormatOpenAIChatSSE, InputReported: true, OutputReported: true, TextBytes: 3},
	},
	{
		name: "openai responses sse", file: "openai_responses_stream.sse", ct: ctSSE,
		want: Usage{Model: "gpt-4.1-2025-04-14", InputTokens: 2241, OutputTokens: 9, CachedInputTokens: 2048, Complete: true, Format: FormatOpenAIResponsesSSE, InputReported: true, OutputReported: true, TextBytes: 25},
	},
	{
		name: "openai responses sse ending in response.incomplete", file: "openai_responses_stream_incomplete.sse", ct: ctSSE,
		want: Usage{Model: "gpt-4.1-nano-2025-04-14", InputTokens: 40, OutputTokens: 16, Complete: true, Format: FormatOpenAIResponsesSSE, InputReported: true, OutputReported: true, TextBytes: 16},
	},
	{
		name: "anthropic sse", file: "anthropic_stream.sse", ct: ctSSE,
		want: Usage{Model: "claude-3-5-haiku-20241022", InputTokens: 472 + 3072 + 1536, OutputTokens: 15, CachedInputTokens: 3072, CacheCreationInputTokens: 1536, Complete: true, Format: FormatAnthropicSSE, InputReported: true, OutputReported: true, TextBytes: 37},
	},
	{
		name: "anthropic sse whose message_delta reports input counts", file: "anthropic_stream_tools.sse", ct: ctSSE,
		want: Usage{Model: "claude-opus-4-1-20250805", InputTokens: 412 + 128, OutputTokens: 89, CachedInputTokens: 128, Complete: true, Format: FormatAnthropicSSE, InputReported: true, OutputReported: true, TextBytes: 68},
	},
	{
		name: "anthropic sse ending in an error event", file: "anthropic_stream_error.sse", ct: ctSSE,
		want: Usage{Model: "claude-3-5-haiku-20241022", InputTokens: 472 + 3072 + 1536, OutputTokens: 2, CachedInputTokens: 3072, CacheCreationInputTokens: 1536, Format: FormatAnthropicSSE, InputReported: true, OutputReported: true, TextBytes: 4},
	},
	{
		// whisper-1 (response_format json): billed per minute of input audio, its
		// usage is the duration alone. The top-level "text" is not counted (text.go).
		name: "openai whisper-1 json", file: "openai_whisper.json", ct: ctJSON,
		want: Usage{AudioInputMillis: 9000, Complete: true, Format: FormatOpenAIAudioDuration, InputReported: true, OutputReported: true},
	},
	{
		name: "openai whisper-1 verbose_json with decimal seconds", file: "openai_whisper_verbose.json", ct: ctJSON,
		want: Usage{AudioInputMillis: 9210, Complete: true, Format: FormatOpenAIAudioDuration, InputReported: true, OutputReported: true},
	},
	{
		// gpt-4o-transcribe: a token usage with the Responses API's names, read as
		// it was before audio durations were.
		name: "openai gpt-4o-transcribe json", file: "openai_transcribe.json", ct: ctJSON,
		want: Usage{InputTokens: 14, OutputTokens: 45, AudioInputTokens: 14, AudioInputReported: true, Complete: true, Format: FormatOpenAIResponses, InputReported: true, OutputReported: true},
	},
	{
		name: "openai gpt-4o-transcribe sse", file: "openai_transcribe_stream.sse", ct: ctSSE,
		want: Usage{InputTokens: 14, OutputTokens: 45, AudioInputTokens: 14, AudioInputReported: true, Complete: true, Format: FormatOpenAITranscriptionSSE, InputReported: true, OutputReported: true, TextBytes: 29},
	},
	{
		// Gemini's streamGenerateContent?alt=sse, and the same chunks without alt=sse: a
		// JSON array of them, streamed (geminiarray_test.go). The second chunk has no
		// usageMetadata; its text counts all the same.
		name: "gemini sse", file: "gemini_stream.sse", ct: ctSSE,
		want: geminiStreamFixture(FormatGeminiSSE),
	},
	{
		name: "gemini json array (streamGenerateContent without alt=sse)", file: "gemini_stream.json", ct: "application/json; charset=UTF-8",
		want: geminiStreamFixture(FormatGeminiJSONStream),
	},
	{
		name: "gemini json array sniffed without content type", file: "gemini_stream.json", ct: "",
		want: geminiStreamFixture(FormatGeminiJSONStream),
	},
	{
		name: "json sniffed without content type", file: "anthropic_messages.json", ct: "",
		want: Usage{Model: "claude-sonnet-4-20250514", InputTokens: 12 + 4096 + 2048, OutputTokens: 37, CachedInputTokens: 4096, CacheCreationInputTokens: 2048, Complete: true, Format: FormatAnthropicMessages, InputReported: true, OutputReported: true, TextBytes: 77},
	},
	{
		name: "sse sniffed under a wrong content type", file: "anthropic_stream.sse", ct: "text/plain",
		want: Usage{Model: "claude-3-5-haiku-20241022", InputTokens: 472 + 3072 + 1536, OutputTokens: 15, CachedInputTokens: 3072, CacheCreationInputTokens: 1536, Complete: true, Format: FormatAnthropicSSE, InputReported: true, OutputReported: true, TextBytes: 37},
	},
	{
		name: "upstream cost header in USD", file: "openai_chat.json", ct: ctJSON,
		headers: map[string]string{HeaderCostUSD: "0.0031675", "content-encoding": "identity"},
		want:    Usage{Model: "gpt-4o-2024-08-06", InputTokens: 1117, OutputTokens: 46, CachedInputTokens: 1024, CostMicroUSD: i64(3168), Complete: true, Format: FormatOpenAIChat, InputReported: true, OutputReported: true, AudioInputReported: true, AudioOutputReported: true, TextBytes: 172},
	},
	{
		name: "upstream cost header in micro-USD wins", file: "anthropic_stream.sse", ct: ctSSE,
		headers: map[string]string{HeaderCostUSD: "1", HeaderCostMicroUSD: "2707"},
		want:    Usage{Model: "claude-3-5-haiku-20241022", InputTokens: 472 + 3072 + 1536, OutputTokens: 15, CachedInputTokens: 3072, CacheCreationInputTokens: 1536, CostMicroUSD: i64(2707), Complete: true, Format: FormatAnthropicSSE, InputReported: true, OutputReported: true, TextBytes: 37},
	},
	{
		name: "zstd body is not read, cost header still is, text is the raw bytes", file: "openai_chat.json", ct: ctJSON,
		headers: map[string]string{"content-encoding": "zstd", HeaderCostMicroUSD: "99"},
		want:    Usage{CostMicroUSD: i64(99), Format: FormatUnsupportedEncoding, TextBytes: 987, TextBytesFromRaw: true},
	},
	{
		name: "three codings are not read", file: "openai_chat.json", ct: ctJSON,
		headers: map[string]string{"content-encoding": "identity, gzip, br, gzip"},
		want:    Usage{Format: FormatUnsupportedEncoding, TextBytes: 987, TextBytesFromRaw: true},
	},
}

func TestFixtures(t *testing.T) {
	for _, tc := range fixtureCases {
		t.Run(tc.name, func(t *testing.T) {
			body := readFixture(t, tc.file)
			checkSplits(t, tc.ct, tc.headers, body, tc.want)
			if strings.HasSuffix(tc.file, ".sse") {
				t.Run("CRLF", func(t *testing.T) {
					crlf := bytes.ReplaceAll(bytes.ReplaceAll(body, []byte("\r\n"), []byte("\n")), []byte("\n"), []byte("\r\n"))
					checkSplits(t, tc.ct, tc.headers, crlf, tc.want)
				})
				t.Run("CR", func(t *testing.T) {
					cr := bytes.ReplaceAll(bytes.ReplaceAll(body, []byte("\r\n"), []byte("\n")), []byte("\n"), []byte("\r"))
					checkSplits(t, tc.ct, tc.headers, cr, tc.want)
				})
			}
		})
	}
}

// TestFixturesMatchReference compares the incremental reader with the
// encoding/json reference on every fixture.
func TestFixturesMatchReference(t *testing.T) {
	for _, tc := range fixtureCases {
		if tc.headers != nil || tc.ct == "" || tc.ct == "text/plain" {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			body := readFixture(t, tc.file)
			var want Usage
			if strings.HasSuffix(tc.file, ".sse") {
				want = oracleSSE(body, Limits{})
			} else {
				want = oracleJSON(body, Limits{})
			}
			if !reflect.DeepEqual(want, tc.want) {
				t.Fatalf("reference disagrees with the table:\n ref %s\nwant %s", show(want), show(tc.want))
			}
		})
	}
}

// TestBrokenOff cuts every fixture at every byte: a stream that breaks off is
// never Complete, and whatever usage it had is reported the same however the
// prefix was chunked.
func TestBrokenOff(t *testing.T) {
	for _, tc := range fixtureCases {
		t.Run(tc.name, func(t *testing.T) {
			body := readFixture(t, tc.file)
			for n := 0; n <= len(body); n++ {
				prefix := body[:n]
				got := run(tc.ct, tc.headers, Limits{}, [][]byte{prefix}, false)
				// Only a stream that ended by its protocol, a "[DONE]" after its final
				// report, is complete though broken off (TestStreamEndedByDone).
				if got.Complete && !endedAt(tc.ct, prefix) {
					t.Fatalf("prefix of %d bytes: Complete after a broken-off stream", n)
				}
				if again := run(tc.ct, tc.headers, Limits{}, splitAt(prefix, n/3, 2*n/3), false); !reflect.DeepEqual(got, again) {
					t.Fatalf("prefix of %d bytes: %s whole, %s in three", n, show(got), show(again))
				}
				if n == len(body) {
					want := tc.want
					want.Complete = want.Complete && endedAt(tc.ct, body)
					if !reflect.DeepEqual(got, want) {
						t.Fatalf("whole body broken off at the end:\n got %s\nwant %s", show(got), show(want))
					}
				}
			}
		})
	}
}

func TestBrokenOffKeepsWhatWasSeen(t *testing.T) {
	anth := readFixture(t, "anthropic_stream.sse")
	afterStart := anth[:bytes.Index(anth, []byte("event: content_block_start"))]
	// In the middle of the third text delta: the two before it count, the
	// unfinished event does not.
	anthMidText := anth[:bytes.Index(anth, []byte(`"text":" a r`))+len(`"text":" a r`)]
	const anthTextSoFar = int64(len("Okay") + len(", here is"))
	chat := readFixture(t, "openai_chat.json")
	midCount := chat[:bytes.Index(chat, []byte(`"completion_tokens": 46`))+len(`"completion_tokens": 4`)]
	afterCount := chat[:bytes.Index(chat, []byte(`"completion_tokens": 46`))+len(`"completion_tokens": 46,`)]
	midText := chat[:bytes.Index(chat, []byte(`"content": "Bonjour ! `))+len(`"content": "Bonjour ! `)]
	resp := readFixture(t, "openai_responses_stream.sse")
	beforeCompleted := resp[:bytes.Index(resp, []byte("event: response.completed"))]

	cases := []struct {
		name string
		ct   string
		body []byte
		eos  bool
		want Usage
	}{
		{"anthropic after message_start", ctSSE, afterStart, false,
			Usage{Model: "claude-3-5-haiku-20241022", InputTokens: 5080, OutputTokens: 2, CachedInputTokens: 3072, CacheCreationInputTokens: 1536, Format: FormatAnthropicSSE, InputReported: true, OutputReported: true}},
		{"anthropic after message_start, ended normally", ctSSE, afterStart, true,
			Usage{Model: "claude-3-5-haiku-20241022", InputTokens: 5080, OutputTokens: 2, CachedInputTokens: 3072, CacheCreationInputTokens: 1536, Format: FormatAnthropicSSE, InputReported: true, OutputReported: true}},
		{"anthropic cut in the middle of the text", ctSSE, anthMidText, false,
			Usage{Model: "claude-3-5-haiku-20241022", InputTokens: 5080, OutputTokens: 2, CachedInputTokens: 3072, CacheCreationInputTokens: 1536, Format: FormatAnthropicSSE, InputReported: true, OutputReported: true, TextBytes: anthTextSoFar}},
		{"json cut inside a count keeps no partial count", ctJSON, midCount, false,
			Usage{Model: "gpt-4o-2024-08-06", InputTokens: 1117, Format: FormatOpenAIChat, InputReported: true, TextBytes: 172}},
		{"json cut after the counts", ctJSON, afterCount, false,
			Usage{Model: "gpt-4o-2024-08-06", InputTokens: 1117, OutputTokens: 46, Format: FormatOpenAIChat, InputReported: true, OutputReported: true, TextBytes: 172}},
		{"json cut after the counts, ended normally", ctJSON, afterCount, true,
			Usage{Model: "gpt-4o-2024-08-06", InputTokens: 1117, OutputTokens: 46, Format: FormatOpenAIChat, InputReported: true, OutputReported: true, TextBytes: 172}},
		{"json cut inside the text keeps the text seen", ctJSON, midText, false,
			Usage{Model: "gpt-4o-2024-08-06", Format: FormatOpenAIChat, TextBytes: 10}},
		{"responses before response.completed", ctSSE, beforeCompleted, false,
			Usage{Model: "gpt-4.1-2025-04-14", Format: FormatOpenAIResponsesSSE, TextBytes: 25}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, chunks := range [][][]byte{{tc.body}, bytewise(tc.body)} {
				if got := run(tc.ct, nil, Limits{}, chunks, tc.eos); !reflect.DeepEqual(got, tc.want) {
					t.Fatalf("\n got %s\nwant %s", show(got), show(tc.want))
				}
			}
		})
	}
}

func TestJSONEdgeCases(t *testing.T) {
	chat := func(in, out int64) Usage {
		return Usage{InputTokens: in, OutputTokens: out, Complete: true, Format: FormatOpenAIChat, InputReported: true, OutputReported: true}
	}
	incomplete := func(u Usage) Usage { u.Complete = false; return u }
	outOnly := func(out int64) Usage {
		return Usage{OutputTokens: out, Format: FormatOpenAIChat, OutputReported: true}
	}
	withModel := func(m string, u Usage) Usage { u.Model = m; return u }
	cases := []struct {
		name string
		body string
		want Usage
	}{
		{"minimal", `{"usage":{"prompt_tokens":1,"completion_tokens":2}}`, chat(1, 2)},
		{"white space everywhere", " \r\n\t{ \"usage\" :\n{ \"prompt_tokens\" : 1 ,\t\"completion_tokens\" : 2 } }\n\n", chat(1, 2)},
		{"escaped keys", `{"\u0075sage":{"prompt\u005ftokens":1,"completion_tokens":2}}`, chat(1, 2)},
		{"escaped model", `{"model":"gpt-4o\/mini \"x\" \u00e9\ud83d\ude00","usage":{"prompt_tokens":1,"completion_tokens":2}}`,
			withModel("gpt-4o/mini \"x\" é😀", chat(1, 2))},
		{"lone surrogate becomes U+FFFD", `{"model":"a\ud800b\udc00\ud800\u0041","usage":{"prompt_tokens":1,"completion_tokens":2}}`,
			withModel("a\uFFFDb\uFFFD\uFFFDA", chat(1, 2))},
		{"invalid utf-8 in model becomes U+FFFD", "{\"model\":\"m\xff\xfe\",\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}",
			withModel("m\uFFFD\uFFFD", chat(1, 2))},
		{"model too long is dropped", `{"model":"` + strings.Repeat("m", 257) + `","usage":{"prompt_tokens":1,"completion_tokens":2}}`, chat(1, 2)},
		{"model of 256 bytes is kept", `{"model":"` + strings.Repeat("m", 256) + `","usage":{"prompt_tokens":1,"completion_tokens":2}}`,
			withModel(strings.Repeat("m", 256), chat(1, 2))},
		{"model not a string", `{"model":["gpt"],"usage":{"prompt_tokens":1,"completion_tokens":2}}`, chat(1, 2)},
		{"duplicate model: the last wins", `{"model":"a","model":"b","usage":{"prompt_tokens":1,"completion_tokens":2}}`, withModel("b", chat(1, 2))},
		{"duplicate model: a last one that is not a string leaves none", `{"model":"a","model":null,"usage":{"prompt_tokens":1,"completion_tokens":2}}`, chat(1, 2)},
		// Two usage objects in one body: each count keeps its largest value.
		{"duplicate usage, the later smaller: the larger counts win", `{"usage":{"prompt_tokens":10,"completion_tokens":20},"usage":{"prompt_tokens":3,"completion_tokens":4}}`, chat(10, 20)},
		{"duplicate usage, the later partial and larger", `{"usage":{"prompt_tokens":1,"completion_tokens":2},"usage":{"prompt_tokens":3}}`, chat(3, 2)},
		{"duplicate count: the largest wins", `{"usage":{"prompt_tokens":7,"completion_tokens":2,"prompt_tokens":1}}`, chat(7, 2)},
		{"duplicate count, the later larger", `{"usage":{"prompt_tokens":1,"completion_tokens":2,"prompt_tokens":7}}`, chat(7, 2)},
		{"count then invalid count: the valid one stays", `{"usage":{"prompt_tokens":1,"completion_tokens":2,"prompt_tokens":"7"}}`, chat(1, 2)},
		{"usage then null: null reports nothing", `{"usage":{"prompt_tokens":1,"completion_tokens":2},"usage":null}`, chat(1, 2)},
		{"duplicate details: the largest cached count", `{"usage":{"prompt_tokens":9,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":5},"prompt_tokens_details":{"cached_tokens":3}}}`,
			Usage{InputTokens: 9, OutputTokens: 2, CachedInputTokens: 5, Complete: true, Format: FormatOpenAIChat, InputReported: true, OutputReported: true}},
		// OpenAI's cache writes (GPT-5.6 on): a part of the input, as cached_tokens is
		// (the prompt-caching guide's example: 2,600 input, 2,000 cached, 400 written).
		{"chat cache writes", `{"usage":{"prompt_tokens":2600,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":2000,"cache_write_tokens":400}}}`,
			Usage{InputTokens: 2600, OutputTokens: 2, CachedInputTokens: 2000, CacheCreationInputTokens: 400, Complete: true, Format: FormatOpenAIChat, InputReported: true, OutputReported: true}},
		{"responses cache writes", `{"object":"response","usage":{"input_tokens":2600,"output_tokens":2,"input_tokens_details":{"cached_tokens":2000,"cache_write_tokens":400}}}`,
			Usage{InputTokens: 2600, OutputTokens: 2, CachedInputTokens: 2000, CacheCreationInputTokens: 400, Complete: true, Format: FormatOpenAIResponses, InputReported: true, OutputReported: true}},
		{"cache writes above the uncached input: at most it", `{"usage":{"prompt_tokens":2600,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":2000,"cache_write_tokens":900}}}`,
			Usage{InputTokens: 2600, OutputTokens: 2, CachedInputTokens: 2000, CacheCreationInputTokens: 600, Complete: true, Format: FormatOpenAIChat, InputReported: true, OutputReported: true}},
		// The Decisions APIs (openai 7's POST /v1/decisions, Gemini's /v1/decisions): a
		// classification's answers with a Responses-shaped usage (OpenAI's, with its
		// model), or an interaction's usage (Google's, its model only in the request).
		{"openai decision", `{"answers":[{"name":"spam","probability":0.1,"type":"predicate"}],"model":"gpt-6-luna",` +
			`"usage":{"input_tokens":1200,"input_tokens_details":{"cache_write_tokens":0,"cached_tokens":1000},"output_tokens":3,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":1203}}`,
			Usage{Model: "gpt-6-luna", InputTokens: 1200, OutputTokens: 3, CachedInputTokens: 1000, Complete: true, Format: FormatOpenAIResponses, InputReported: true, OutputReported: true}},
		{"gemini decision", `{"answers":{"spam":{"noul":{"probability":0.1}}},"usage":{"total_input_tokens":1200,"total_output_tokens":3,"total_tokens":1203}}`,
			Usage{InputTokens: 1200, OutputTokens: 3, Complete: true, Format: FormatGemini, InputReported: true, OutputReported: true}},
		{"cache writes without an input count: none", `{"usage":{"completion_tokens":2,"prompt_tokens_details":{"cache_write_tokens":400}}}`, outOnly(2)},
		{"cache writes under another detail are not ours", `{"usage":{"prompt_tokens":9,"completion_tokens":2,"completion_tokens_details":{"cache_write_tokens":4}}}`, chat(9, 2)},
		{"usage null", `{"object":"chat.completion","model":"m","usage":null}`, Usage{Model: "m", Format: FormatOpenAIChat}},
		{"float count", `{"usage":{"prompt_tokens":1.0,"completion_tokens":2}}`, outOnly(2)},
		{"exponent count", `{"usage":{"prompt_tokens":1e2,"completion_tokens":2}}`, outOnly(2)},
		{"negative count", `{"usage":{"prompt_tokens":-1,"completion_tokens":2}}`, outOnly(2)},
		{"largest count", `{"usage":{"prompt_tokens":9223372036854775807,"completion_tokens":2}}`, chat(9223372036854775807, 2)},
		{"overflowing count", `{"usage":{"prompt_tokens":9223372036854775808,"completion_tokens":2}}`, outOnly(2)},
		{"anthropic input sum overflows", `{"type":"message","usage":{"input_tokens":9223372036854775807,"cache_read_input_tokens":1,"output_tokens":2}}`,
			Usage{OutputTokens: 2, CachedInputTokens: 1, Format: FormatAnthropicMessages, OutputReported: true}},
		// Embeddings: usage at the end of a list of vectors, input alone, and complete.
		{"embeddings", `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1,-0.2,3e-05]},{"object":"embedding","index":1,"embedding":"AAAAAA=="}],"model":"text-embedding-3-small","usage":{"prompt_tokens":8,"total_tokens":8}}`,
			Usage{Model: "text-embedding-3-small", InputTokens: 8, Complete: true, Format: FormatOpenAIEmbeddings, InputReported: true, OutputReported: true}},
		{"embeddings cut before the end", `{"object":"list","data":[],"model":"text-embedding-3-small","usage":{"prompt_tokens":8,"total_tokens":8}`,
			Usage{Model: "text-embedding-3-small", InputTokens: 8, Format: FormatOpenAIEmbeddings, InputReported: true, OutputReported: true}},
		{"a list without usage is nothing", `{"object":"list","data":[{"id":"gpt-4o"}]}`, Usage{}},
		{"a list with completion tokens is a chat usage", `{"object":"list","usage":{"prompt_tokens":8,"completion_tokens":0,"total_tokens":8}}`, chat(8, 0)},
		{"a list without a prompt count is not embeddings", `{"object":"list","usage":{"total_tokens":8}}`, Usage{}},
		{"usage nested deeper is not ours", `{"choices":[{"usage":{"prompt_tokens":1,"completion_tokens":2}}]}`, Usage{}},
		{"usage in an array at the top", `[{"usage":{"prompt_tokens":1,"completion_tokens":2}}]`, Usage{}},
		{"responses shape without object", `{"usage":{"input_tokens":5,"output_tokens":6}}`,
			Usage{InputTokens: 5, OutputTokens: 6, Complete: true, Format: FormatOpenAIResponses, InputReported: true, OutputReported: true}},
		{"anthropic shape without type", `{"usage":{"input_tokens":5,"cache_read_input_tokens":0,"output_tokens":6}}`,
			Usage{InputTokens: 5, OutputTokens: 6, Complete: true, Format: FormatAnthropicMessages, InputReported: true, OutputReported: true}},
		{"trailing garbage", `{"usage":{"prompt_tokens":1,"completion_tokens":2}} x`, incomplete(chat(1, 2))},
		{"two documents", `{"usage":{"prompt_tokens":1,"completion_tokens":2}}{}`, incomplete(chat(1, 2))},
		{"missing close", `{"usage":{"prompt_tokens":1,"completion_tokens":2}`, incomplete(chat(1, 2))},
		{"trailing comma", `{"usage":{"prompt_tokens":1,"completion_tokens":2,}}`, incomplete(chat(1, 2))},
		{"bad escape", `{"usage":{"prompt_tokens":1,"completion_tokens":2},"x":"\q"}`, incomplete(chat(1, 2))},
		{"control character in string", "{\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2},\"x\":\"a\nb\"}", incomplete(chat(1, 2))},
		{"bad literal", `{"usage":{"prompt_tokens":1,"completion_tokens":2},"x":nul}`, incomplete(chat(1, 2))},
		{"bad number", `{"usage":{"prompt_tokens":1,"completion_tokens":2},"x":01}`, incomplete(chat(1, 2))},
		{"empty body", ``, Usage{}},
		{"white space only", " \n ", Usage{}},
		{"not json", `<html><body>502 Bad Gateway</body></html>`, Usage{}},
		{"deep nesting within the limit", `{"usage":{"prompt_tokens":1,"completion_tokens":2},"x":` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `}`, chat(1, 2)},
		{"deep nesting past the limit", `{"usage":{"prompt_tokens":1,"completion_tokens":2},"x":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`, incomplete(chat(1, 2))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body := []byte(tc.body)
			if len(body) < 2000 {
				checkSplits(t, ctJSON, nil, body, tc.want)
			} else if got := run(ctJSON, nil, Limits{}, randomSplit(body, rand.New(rand.NewPCG(1, 2))), true); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("\n got %s\nwant %s", show(got), show(tc.want))
			}
			if json.Valid(body) {
				if ref := oracleJSON(body, Limits{}); !reflect.DeepEqual(ref, tc.want) {
					t.Fatalf("reference:\n got %s\nwant %s", show(ref), show(tc.want))
				}
			}
		})
	}
}

func TestSSEEdgeCases(t *testing.T) {
	usage := `{"object":"chat.completion.chunk","model":"m","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}`
	done := Usage{Model: "m", InputTokens: 1, OutputTokens: 2, Complete: true, Format: FormatOpenAIChatSSE, InputReported: true, OutputReported: true}
	chunk := func(usage string) string {
		return "data: {\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[],\"usage\":" + usage + "}\n\n"
	}
	counts := func(in, out int64, complete bool) Usage {
		u := done
		u.InputTokens, u.OutputTokens, u.Complete = in, out, complete
		return u
	}
	cases := []struct {
		name string
		body string
		want Usage
	}{
		{"no space after colon", "data:" + usage + "\n\n", done},
		{"last event without blank line", "data: " + usage, done},
		{"events without blank lines between them", "data: {\"object\":\"chat.completion.chunk\",\"usage\":null}\ndata: " + usage + "\ndata: [DONE]\n", done},
		{"two spaces: JSON does not mind", "data:  " + usage + "\n\n", done},
		{"field name with trailing space is another field", "data : " + usage + "\n\n", Usage{}},
		{"event and id fields are skipped", "event: x\nid: 7\nretry: 10\n: comment\ndata: " + usage + "\n\n", done},
		{"event split over data lines", "data: {\"object\":\"chat.completion.chunk\",\ndata:\"model\":\"m\",\"choices\":[],\ndata\ndata: \"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}\n\n", done},
		{"malformed event is skipped", "data: {\"object\":\"chat.completion.chunk\",\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":6}\n\ndata: [DONE]\n\n",
			Usage{}},
		{"an event cut by a blank line is dropped", "data: {\"object\":\"chat.completion.chunk\",\n\ndata: \"usage\":{\"prompt_tokens\":5,\"completion_tokens\":6}}\n\n", Usage{}},
		{"a later, larger usage wins", "data: " + usage + "\n\ndata: {\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\n\n",
			counts(3, 4, true)},
		// The issue's case: two usage objects, the later smaller.
		{"a later, smaller usage does not win", chunk(`{"prompt_tokens":30,"completion_tokens":40}`) + chunk(`{"prompt_tokens":3,"completion_tokens":4}`), counts(30, 40, true)},
		{"each count keeps its largest", chunk(`{"prompt_tokens":30,"completion_tokens":4}`) + chunk(`{"prompt_tokens":3,"completion_tokens":40}`), counts(30, 40, true)},
		{"a later partial usage keeps the final report final", chunk(`{"prompt_tokens":3,"completion_tokens":4}`) + chunk(`{"prompt_tokens":1}`), counts(3, 4, true)},
		{"usage null chunks before the usage do not count", chunk("null") + chunk("null") + chunk(`{"prompt_tokens":3,"completion_tokens":4}`), counts(3, 4, true)},
		{"anthropic: a smaller message_delta does not lower the count",
			"data: {\"type\":\"message_start\",\"message\":{\"model\":\"c\",\"usage\":{\"input_tokens\":4,\"output_tokens\":1}}}\n\n" +
				"data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":90}}\n\n" +
				"data: {\"type\":\"message_delta\",\"usage\":{\"input_tokens\":2,\"output_tokens\":9}}\n\n",
			Usage{Model: "c", InputTokens: 4, OutputTokens: 90, Complete: true, Format: FormatAnthropicSSE, InputReported: true, OutputReported: true}},
		{"responses: a terminal usage smaller than an earlier one",
			"data: {\"type\":\"response.in_progress\",\"response\":{\"model\":\"r\",\"usage\":{\"input_tokens\":10,\"output_tokens\":20}}}\n\n" +
				"data: {\"type\":\"response.completed\",\"response\":{\"model\":\"r\",\"usage\":{\"input_tokens\":1,\"output_tokens\":2}}}\n\n",
			Usage{Model: "r", InputTokens: 10, OutputTokens: 20, Complete: true, Format: FormatOpenAIResponsesSSE, InputReported: true, OutputReported: true}},
		{"usage null after usage changes nothing", "data: " + usage + "\n\ndata: {\"object\":\"chat.completion.chunk\",\"usage\":null}\n\n", done},
		{"partial usage is not final", "data: {\"object\":\"chat.completion.chunk\",\"usage\":{\"prompt_tokens\":3}}\n\n",
			Usage{InputTokens: 3, Format: FormatOpenAIChatSSE, InputReported: true}},
		{"responses usage outside a terminal event is not final",
			"data: {\"type\":\"response.in_progress\",\"response\":{\"model\":\"r\",\"usage\":{\"input_tokens\":1,\"output_tokens\":2}}}\n\n",
			Usage{Model: "r", InputTokens: 1, OutputTokens: 2, Format: FormatOpenAIResponsesSSE, InputReported: true, OutputReported: true}},
		{"responses failed with usage is final",
			"data: {\"type\":\"response.failed\",\"response\":{\"model\":\"r\",\"usage\":{\"input_tokens\":1,\"output_tokens\":0}}}\n\n",
			Usage{Model: "r", InputTokens: 1, Complete: true, Format: FormatOpenAIResponsesSSE, InputReported: true, OutputReported: true}},
		{"anthropic delta without start has no input",
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":9}}\n\n",
			Usage{OutputTokens: 9, Format: FormatAnthropicSSE, OutputReported: true}},
		{"anthropic delta with input only",
			"data: {\"type\":\"message_delta\",\"usage\":{\"input_tokens\":4,\"output_tokens\":null}}\n\n",
			Usage{InputTokens: 4, Format: FormatAnthropicSSE, InputReported: true}},
		{"anthropic start with usage in the wrong place",
			"data: {\"type\":\"message_start\",\"usage\":{\"input_tokens\":4,\"output_tokens\":1},\"message\":{\"model\":\"c\"}}\n\n",
			Usage{Model: "c", Format: FormatAnthropicSSE}},
		{"a shape change starts over",
			"data: {\"type\":\"message_start\",\"message\":{\"model\":\"c\",\"usage\":{\"input_tokens\":4,\"output_tokens\":1}}}\n\ndata: " + usage + "\n\n", done},
		{"unknown events change nothing", "data: " + usage + "\n\ndata: {\"type\":\"error\",\"error\":{}}\n\ndata: 42\n\ndata: \"x\"\n\n", done},
		{"only comments", ": a\n: b\n\n", Usage{}},
		{"a leading BOM is dropped", "\xef\xbb\xbfdata: " + usage + "\n\n", done},
		{"only one BOM is dropped", "\xef\xbb\xbf\xef\xbb\xbfdata: " + usage + "\n\n", Usage{}},
		{"a partial BOM starts another field", "\xef\xbbdata: " + usage + "\n\n", Usage{}},
		{"a partial BOM alone on its line", "\xef\xbb\ndata: " + usage + "\n\n", done},
		{"empty", "", Usage{}},
		{"binary noise", "\x00\xff\xfe\r\r\n\n:::\xef\xbb\xbf", Usage{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			checkSplits(t, ctSSE, nil, []byte(tc.body), tc.want)
			if ref := oracleSSE([]byte(tc.body), Limits{}); !reflect.DeepEqual(ref, tc.want) {
				t.Fatalf("reference:\n got %s\nwant %s", show(ref), show(tc.want))
			}
		})
	}
}

// Headers gives New the fields it reads, each name's lines joined with ", " (two
// Content-Encoding lines are two codings), and leaves the others out. The lines of one
// name are joined once, in one allocation however many they are: joined one at a time,
// each line copied all the earlier ones again (a line's allocation, n²/2 bytes copied:
// 100,000 lines of one header took seconds of CPU before an answer was relayed).
func TestHeaders(t *testing.T) {
	h := http.Header{}
	h.Add("Content-Encoding", "gzip")
	h.Add("Content-Encoding", "br")
	h.Add("X-Upstream-Cost-Usd", "0.5")
	h.Add("X-Amzn-Bedrock-Input-Token-Count", "7")
	h.Add("X-Trace", "a")
	h.Add("Content-Type", "application/json")
	want := map[string]string{"content-encoding": "gzip, br", HeaderCostUSD: "0.5", headerBedrockInput: "7"}
	if got := Headers(h); !maps.Equal(got, want) {
		t.Fatalf("Headers: %q, want %q", got, want)
	}

	lines := func(n int) http.Header {
		h := http.Header{"Content-Encoding": make([]string, n), "X-Trace": make([]string, n)}
		for i := range n {
			h["Content-Encoding"][i], h["X-Trace"][i] = "identity", "ab"
		}
		return h
	}
	allocs := func(h http.Header) float64 {
		return testing.AllocsPerRun(3, func() { headersSink = Headers(h) })
	}
	few, many := allocs(lines(10)), allocs(lines(10_000))
	if many != few {
		t.Fatalf("Headers allocated %v times for 10 lines of each header, %v times for 10,000: not one join per name", few, many)
	}
	if got := Headers(lines(100_000))["content-encoding"]; len(got) != 100_000*len("identity, ")-len(", ") {
		t.Fatalf("100,000 lines joined into %d bytes", len(got))
	}
}

// headersSink keeps TestHeaders' allocations on the heap.
var headersSink map[string]string

func TestCostHeaders(t *testing.T) {
	cases := []struct {
		name    string
		headers map[string]string
		want    *int64
	}{
		{"none", nil, nil},
		{"micro", map[string]string{HeaderCostMicroUSD: "1234"}, i64(1234)},
		{"micro zero", map[string]string{HeaderCostMicroUSD: "0"}, i64(0)},
		{"micro with spaces", map[string]string{HeaderCostMicroUSD: " 7 "}, i64(7)},
		{"micro max", map[string]string{HeaderCostMicroUSD: "9223372036854775807"}, i64(9223372036854775807)},
		{"micro overflow", map[string]string{HeaderCostMicroUSD: "9223372036854775808"}, nil},
		{"micro negative", map[string]string{HeaderCostMicroUSD: "-5"}, nil},
		{"micro decimal", map[string]string{HeaderCostMicroUSD: "5.0"}, nil},
		{"usd whole", map[string]string{HeaderCostUSD: "2"}, i64(2_000_000)},
		{"usd fraction", map[string]string{HeaderCostUSD: "0.001234"}, i64(1234)},
		{"usd leading zeros", map[string]string{HeaderCostUSD: "00.5"}, i64(500_000)},
		{"usd sub-micro rounds up", map[string]string{HeaderCostUSD: "0.0000001"}, i64(1)},
		{"usd sub-micro zeros are exact", map[string]string{HeaderCostUSD: "0.0012340000"}, i64(1234)},
		{"usd many digits round up", map[string]string{HeaderCostUSD: "0.00123400000000000001"}, i64(1235)},
		{"usd exponent", map[string]string{HeaderCostUSD: "1.5e-05"}, i64(15)},
		{"usd exponent upper case and plus", map[string]string{HeaderCostUSD: "2E+2"}, i64(200_000_000)},
		{"usd exponent rounds up", map[string]string{HeaderCostUSD: "1.23e-7"}, i64(1)},
		{"usd tiny exponent rounds up", map[string]string{HeaderCostUSD: "5e-99"}, i64(1)},
		{"usd zero with exponent", map[string]string{HeaderCostUSD: "0.0e-99"}, i64(0)},
		{"usd max", map[string]string{HeaderCostUSD: "9223372036854.775807"}, i64(9223372036854775807)},
		{"usd overflow", map[string]string{HeaderCostUSD: "9223372036854.775808"}, nil},
		{"usd overflow by rounding", map[string]string{HeaderCostUSD: "9223372036854.7758071"}, nil},
		{"usd overflow by exponent", map[string]string{HeaderCostUSD: "1e99"}, nil},
		{"usd negative", map[string]string{HeaderCostUSD: "-0.5"}, nil},
		{"usd plus sign", map[string]string{HeaderCostUSD: "+0.5"}, nil},
		{"usd no whole part", map[string]string{HeaderCostUSD: ".5"}, nil},
		{"usd no fraction digits", map[string]string{HeaderCostUSD: "5."}, nil},
		{"usd three-digit exponent", map[string]string{HeaderCostUSD: "5e100"}, nil},
		{"usd empty exponent", map[string]string{HeaderCostUSD: "5e"}, nil},
		{"usd NaN", map[string]string{HeaderCostUSD: "NaN"}, nil},
		{"usd Inf", map[string]string{HeaderCostUSD: "Inf"}, nil},
		{"usd with unit", map[string]string{HeaderCostUSD: "0.5 USD"}, nil},
		{"usd too long", map[string]string{HeaderCostUSD: "0." + strings.Repeat("0", 70)}, nil},
		{"invalid micro falls back to usd", map[string]string{HeaderCostMicroUSD: "x", HeaderCostUSD: "0.25"}, i64(250_000)},
		{"header names are lower-case", map[string]string{"X-Upstream-Cost-USD": "1"}, nil},
		{"LiteLLM's header", map[string]string{HeaderLiteLLMCost: "3.2e-05"}, i64(32)},
		{"Tollgate's USD header wins over LiteLLM's", map[string]string{HeaderLiteLLMCost: "1", HeaderCostUSD: "0.5"}, i64(500_000)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := New(ctJSON, tc.headers, Limits{}).Finish(true).CostMicroUSD
			if (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
				g, w := "nil", "nil"
				if got != nil {
					g = fmt.Sprint(*got)
				}
				if tc.want != nil {
					w = fmt.Sprint(*tc.want)
				}
				t.Fatalf("got %s, want %s", g, w)
			}
		})
	}
}

func TestFinish(t *testing.T) {
	e := New(ctJSON, nil, Limits{})
	if err := e.Write([]byte(`{"usage":{"prompt_tokens":1,"completion_tokens":2}}`)); err != nil {
		t.Fatal(err)
	}
	first := e.Finish(true)
	if !first.Complete {
		t.Fatalf("not complete: %s", show(first))
	}
	if err := e.Write([]byte(" ")); !errors.Is(err, ErrFinished) {
		t.Fatalf("Write after Finish: %v, want ErrFinished", err)
	}
	if again := e.Finish(false); !reflect.DeepEqual(again, first) {
		t.Fatalf("second Finish: %s, first %s", show(again), show(first))
	}
}

func TestLimits(t *testing.T) {
	body := []byte(`{"model":"abcdefgh","usage":{"prompt_tokens":1,"completion_tokens":2},"x":[[[]]]}`)
	cases := []struct {
		lim  Limits
		want Usage
	}{
		{Limits{MaxModelBytes: 8}, Usage{Model: "abcdefgh", InputTokens: 1, OutputTokens: 2, Complete: true, Format: FormatOpenAIChat, InputReported: true, OutputReported: true}},
		{Limits{MaxModelBytes: 7}, Usage{InputTokens: 1, OutputTokens: 2, Complete: true, Format: FormatOpenAIChat, InputReported: true, OutputReported: true}},
		{Limits{MaxDepth: 4}, Usage{Model: "abcdefgh", InputTokens: 1, OutputTokens: 2, Complete: true, Format: FormatOpenAIChat, InputReported: true, OutputReported: true}},
		{Limits{MaxDepth: 3}, Usage{Model: "abcdefgh", InputTokens: 1, OutputTokens: 2, Format: FormatOpenAIChat, InputReported: true, OutputReported: true}},
	}
	for _, tc := range cases {
		for _, chunks := range [][][]byte{{body}, bytewise(body)} {
			if got := run(ctJSON, nil, tc.lim, chunks, true); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("%+v:\n got %s\nwant %s", tc.lim, show(got), show(tc.want))
			}
		}
	}
}

// TestWriteDoesNotAllocate keeps the per-chunk path free of allocations.
func TestWriteDoesNotAllocate(t *testing.T) {
	for _, file := range []string{"openai_chat_stream.sse", "anthropic_stream.sse", "openai_responses_stream.sse", "openai_chat.json",
		"openai_transcribe_stream.sse", "openai_whisper_verbose.json", "gemini_stream.json"} {
		body := readFixture(t, file)
		chunks := randomSplit(body, rand.New(rand.NewPCG(3, 4)))
		ct := ctSSE
		if strings.HasSuffix(file, ".json") {
			ct = ctJSON
		}
		var e *Extractor
		allocs := testing.AllocsPerRun(20, func() {
			e = New(ct, nil, Limits{})
			for _, c := range chunks {
				_ = e.Write(c)
			}
		})
		// New allocates the Extractor (its string buffers are in it); Write
		// nothing.
		if allocs > 1 {
			t.Errorf("%s: %v allocations for New and %d writes", file, allocs, len(chunks))
		}
	}
}

// Gemini's native API (generateContent, and streamGenerateContent?alt=sse): usage in
// usageMetadata, its model in modelVersion, its text in candidates[].content.parts[].
// Output is candidates plus thoughts (thinking is billed as output); a count of 0 is
// left out, so the input count with the answer's end is the whole report. A stream is
// complete at the chunk whose candidate gives its finishReason.
func TestGemini(t *testing.T) {
	const geminiJSON = `{"candidates":[{"content":{"parts":[{"text":"Tolls are "},{"text":"paid."}],"role":"model"},"finishReason":"STOP","index":0}],` +
		`"usageMetadata":{"promptTokenCount":120,"candidatesTokenCount":4,"totalTokenCount":224,"cachedContentTokenCount":100,"thoughtsTokenCount":100,` +
		`"promptTokensDetails":[{"modality":"TEXT","tokenCount":120}]},"modelVersion":"gemini-2.5-flash","responseId":"abc"}`
	checkSplits(t, ctJSON, nil, []byte(geminiJSON), Usage{Model: "gemini-2.5-flash", InputTokens: 120, OutputTokens: 104, CachedInputTokens: 100,
		AudioInputReported: true, Complete: true, Format: FormatGemini, InputReported: true, OutputReported: true, TextBytes: 15})
	// Blocked before any output: no candidates count at all, still the whole report.
	checkSplits(t, ctJSON, nil, []byte(`{"promptFeedback":{"blockReason":"SAFETY"},"usageMetadata":{"promptTokenCount":9,"totalTokenCount":9},"modelVersion":"gemini-2.5-pro"}`),
		Usage{Model: "gemini-2.5-pro", InputTokens: 9, Complete: true, Format: FormatGemini, InputReported: true, OutputReported: true})

	chunk := func(text, finish string, usage string) string {
		f := ""
		if finish != "" {
			f = `,"finishReason":"` + finish + `"`
		}
		return `data: {"candidates":[{"content":{"parts":[{"text":"` + text + `"}],"role":"model"}` + f + `,"index":0}],"usageMetadata":` + usage +
			`,"modelVersion":"gemini-2.5-flash"}` + "\r\n\r\n"
	}
	stream := chunk("Tolls ", "", `{"promptTokenCount":12,"totalTokenCount":12}`) +
		chunk("are ", "", `{"promptTokenCount":12,"candidatesTokenCount":2,"totalTokenCount":14}`) +
		chunk("paid.", "STOP", `{"promptTokenCount":12,"candidatesTokenCount":3,"thoughtsTokenCount":40,"totalTokenCount":55}`)
	want := Usage{Model: "gemini-2.5-flash", InputTokens: 12, OutputTokens: 43, Complete: true, Format: FormatGeminiSSE,
		InputReported: true, OutputReported: true, TextBytes: 15}
	checkSplits(t, ctSSE, nil, []byte(stream), want)
	// Cut before its last chunk: what was reported, not complete.
	cut := stream[:strings.LastIndex(stream, "data:")]
	if got := run(ctSSE, nil, Limits{}, [][]byte{[]byte(cut)}, false); got.Complete || got.InputTokens != 12 || got.OutputTokens != 2 {
		t.Fatalf("a cut stream: %s", show(got))
	}
	// Ended without a finishReason: not complete either (the settlement estimates).
	if got := run(ctSSE, nil, Limits{}, [][]byte{[]byte(cut)}, true); got.Complete {
		t.Fatalf("a stream without its last chunk: %s", show(got))
	}
}

// OpenAI says which service tier a request ran at (service_tier), Anthropic which speed
// (usage.speed): "priority", "fast" and "ultrafast" cost more than the catalog's standard
// prices, and the settlement charges them so (Usage.Tier). Any chunk of a stream saying
// so is enough; another API's service_tier is not read.
func TestPriorityTier(t *testing.T) {
	// Every name the catalog charges as a dear tier fits the tier's capture, and is read so.
	for _, n := range pricecatalog.TierNames {
		body := `{"object":"chat.completion","service_tier":"` + n.Name + `","usage":{"prompt_tokens":1,"completion_tokens":2}}`
		if got := run(ctJSON, nil, Limits{}, [][]byte{[]byte(body)}, true); len(n.Name) > maxTierBytes || got.Tier != n.Tier {
			t.Errorf("service_tier %q (capture of %d bytes): %s", n.Name, maxTierBytes, show(got))
		}
	}
	const (
		std       = pricecatalog.Standard
		fast      = pricecatalog.Fast
		ultrafast = pricecatalog.Ultrafast
		latency   = pricecatalog.LatencyOptimized
		flex      = pricecatalog.Flex
	)
	for _, tc := range []struct {
		name, ct, body string
		want           pricecatalog.Tier
	}{
		{"chat, priority", ctJSON, `{"object":"chat.completion","model":"gpt-5","service_tier":"priority","usage":{"prompt_tokens":1,"completion_tokens":2}}`, fast},
		{"chat, default", ctJSON, `{"object":"chat.completion","model":"gpt-5","service_tier":"default","usage":{"prompt_tokens":1,"completion_tokens":2}}`, std},
		// The tier below standard: OpenAI's flex, the answer's say alone.
		{"chat, flex", ctJSON, `{"object":"chat.completion","service_tier":"flex","usage":{"prompt_tokens":1,"completion_tokens":2}}`, flex},
		{"Responses object, flex", ctJSON, `{"object":"response","service_tier":"flex","usage":{"input_tokens":1,"output_tokens":2}}`, flex},
		{"chat stream, flex", ctSSE, "data: {\"object\":\"chat.completion.chunk\",\"service_tier\":\"flex\",\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n" +
			"data: {\"object\":\"chat.completion.chunk\",\"service_tier\":\"flex\",\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n", flex},
		{"chat stream, flex then default: standard", ctSSE, "data: {\"object\":\"chat.completion.chunk\",\"service_tier\":\"flex\",\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n" +
			"data: {\"object\":\"chat.completion.chunk\",\"service_tier\":\"default\",\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n", std},
		{"chat stream, flex then priority: fast", ctSSE, "data: {\"object\":\"chat.completion.chunk\",\"service_tier\":\"flex\",\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n" +
			"data: {\"object\":\"chat.completion.chunk\",\"service_tier\":\"priority\",\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n", fast},
		{"Responses stream, flex", ctSSE, "data: {\"type\":\"response.created\",\"response\":{\"service_tier\":\"flex\"}}\n\n" +
			"data: {\"type\":\"response.completed\",\"response\":{\"service_tier\":\"flex\",\"usage\":{\"input_tokens\":1,\"output_tokens\":2}}}\n\n", flex},
		{"Responses stream, asked flex, ran at default", ctSSE, "data: {\"type\":\"response.created\",\"response\":{\"service_tier\":\"flex\"}}\n\n" +
			"data: {\"type\":\"response.completed\",\"response\":{\"service_tier\":\"default\",\"usage\":{\"input_tokens\":1,\"output_tokens\":2}}}\n\n", std},
		{"Responses stream, flex in the terminal event alone", ctSSE, "data: {\"type\":\"response.created\",\"response\":{\"service_tier\":\"auto\"}}\n\n" +
			"data: {\"type\":\"response.completed\",\"response\":{\"service_tier\":\"flex\",\"usage\":{\"input_tokens\":1,\"output_tokens\":2}}}\n\n", flex},
		{"Vertex AI, Flex PayGo", ctJSON, `{"candidates":[{"content":{"parts":[{"text":"x"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":1,"candidatesTokenCount":2,"trafficType":"ON_DEMAND_FLEX"},"modelVersion":"gemini-3-flash-preview"}`, flex},
		{"the Gemini API, flex", ctJSON, `{"candidates":[{"content":{"parts":[{"text":"x"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":1,"candidatesTokenCount":2,"serviceTier":"flex"}}`, flex},
		{"Vertex AI stream, Flex PayGo in every chunk", ctSSE, "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"x\"}]}}],\"usageMetadata\":{\"trafficType\":\"ON_DEMAND_FLEX\"}}\r\n\r\n" +
			"data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"y\"}]},\"finishReason\":\"STOP\"}],\"usageMetadata\":{\"promptTokenCount\":1,\"candidatesTokenCount\":2,\"trafficType\":\"ON_DEMAND_FLEX\"}}\r\n\r\n", flex},
		{"Vertex AI stream, one chunk on demand: standard", ctSSE, "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"x\"}]}}],\"usageMetadata\":{\"trafficType\":\"ON_DEMAND_FLEX\"}}\r\n\r\n" +
			"data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"y\"}]},\"finishReason\":\"STOP\"}],\"usageMetadata\":{\"promptTokenCount\":1,\"candidatesTokenCount\":2,\"trafficType\":\"ON_DEMAND\"}}\r\n\r\n", std},
		// Amazon Bedrock's flex: AWS publishes no ratio, so it is charged as standard.
		{"Bedrock Converse, flex: standard", ctJSON, `{"output":{"message":{"role":"assistant","content":[{"text":"x"}]}},"stopReason":"end_turn","usage":{"inputTokens":1,"outputTokens":2,"totalTokens":3},"serviceTier":{"type":"flex"}}`, std},
		{"Responses object", ctJSON, `{"object":"response","service_tier":"priority","usage":{"input_tokens":1,"output_tokens":2}}`, fast},
		// The priority tier's name since 2026-07-30, which the models after GPT-5.6
		// answer with, and the dearer "ultrafast".
		{"chat, fast", ctJSON, `{"object":"chat.completion","model":"gpt-6-sol","service_tier":"fast","usage":{"prompt_tokens":1,"completion_tokens":2}}`, fast},
		{"Responses object, ultrafast", ctJSON, `{"object":"response","service_tier":"ultrafast","usage":{"input_tokens":1,"output_tokens":2}}`, ultrafast},
		{"a tier that is no tier of ours", ctJSON, `{"object":"chat.completion","service_tier":"faster","usage":{"prompt_tokens":1,"completion_tokens":2}}`, std},
		{"a tier too long to be one", ctJSON, `{"object":"chat.completion","service_tier":"priority-and-then-some","usage":{"prompt_tokens":1,"completion_tokens":2}}`, std},
		{"nested is not the request's", ctJSON, `{"object":"chat.completion","metadata":{"service_tier":"priority"},"usage":{"prompt_tokens":1,"completion_tokens":2}}`, std},
		// A usage's speed never overrides a service_tier, before or after it.
		{"chat: service_tier wins over a usage's speed", ctJSON, `{"object":"chat.completion","service_tier":"priority","usage":{"prompt_tokens":1,"completion_tokens":2,"speed":"standard"}}`, fast},
		{"chat: a speed before the service_tier", ctJSON, `{"usage":{"prompt_tokens":1,"completion_tokens":2,"speed":"fast"},"object":"chat.completion","service_tier":"default"}`, std},
		{"chat stream", ctSSE, "data: {\"object\":\"chat.completion.chunk\",\"service_tier\":\"priority\",\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n" +
			"data: {\"object\":\"chat.completion.chunk\",\"service_tier\":\"priority\",\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n", fast},
		{"Responses stream", ctSSE, "data: {\"type\":\"response.created\",\"response\":{\"service_tier\":\"auto\"}}\n\n" +
			"data: {\"type\":\"response.completed\",\"response\":{\"service_tier\":\"priority\",\"usage\":{\"input_tokens\":1,\"output_tokens\":2}}}\n\n", fast},
		{"Responses stream, fast", ctSSE, "data: {\"type\":\"response.created\",\"response\":{\"service_tier\":\"auto\"}}\n\n" +
			"data: {\"type\":\"response.completed\",\"response\":{\"service_tier\":\"fast\",\"usage\":{\"input_tokens\":1,\"output_tokens\":2}}}\n\n", fast},
		{"Responses stream, ultrafast", ctSSE, "data: {\"type\":\"response.created\",\"response\":{\"service_tier\":\"ultrafast\"}}\n\n" +
			"data: {\"type\":\"response.completed\",\"response\":{\"service_tier\":\"ultrafast\",\"usage\":{\"input_tokens\":1,\"output_tokens\":2}}}\n\n", ultrafast},
		// response.created and .in_progress echo the tier the request asked for; the
		// terminal event says the one it ran at, and OpenAI bills that.
		{"Responses stream, asked priority, ran at default", ctSSE, "data: {\"type\":\"response.created\",\"response\":{\"service_tier\":\"priority\"}}\n\n" +
			"data: {\"type\":\"response.in_progress\",\"response\":{\"service_tier\":\"priority\"}}\n\n" +
			"data: {\"type\":\"response.completed\",\"response\":{\"service_tier\":\"default\",\"usage\":{\"input_tokens\":1,\"output_tokens\":2}}}\n\n", std},
		{"Responses stream, asked ultrafast, ran fast", ctSSE, "data: {\"type\":\"response.created\",\"response\":{\"service_tier\":\"ultrafast\"}}\n\n" +
			"data: {\"type\":\"response.incomplete\",\"response\":{\"service_tier\":\"fast\",\"usage\":{\"input_tokens\":1,\"output_tokens\":2}}}\n\n", fast},
		{"Responses stream, a terminal event without a tier keeps the earlier one", ctSSE, "data: {\"type\":\"response.created\",\"response\":{\"service_tier\":\"priority\"}}\n\n" +
			"data: {\"type\":\"response.completed\",\"response\":{\"service_tier\":null,\"usage\":{\"input_tokens\":1,\"output_tokens\":2}}}\n\n", fast},
		// Anthropic: its fast mode in usage.speed; usage.service_tier "priority" (its
		// Priority Tier, a capacity commitment) has no surcharge, and is not read.
		{"Anthropic's usage.service_tier is not read", ctJSON, `{"type":"message","usage":{"input_tokens":1,"output_tokens":2,"service_tier":"priority"}}`, std},
		{"Anthropic message, fast", ctJSON, `{"type":"message","model":"claude-opus-5","usage":{"input_tokens":1,"output_tokens":2,"service_tier":"standard","speed":"fast"}}`, fast},
		{"Anthropic message, standard speed", ctJSON, `{"type":"message","usage":{"input_tokens":1,"output_tokens":2,"speed":"standard"}}`, std},
		{"Anthropic message, the last speed", ctJSON, `{"type":"message","usage":{"speed":"standard","input_tokens":1,"output_tokens":2,"speed":"fast"}}`, fast},
		{"Anthropic message, a speed that is no string", ctJSON, `{"type":"message","usage":{"speed":"fast","input_tokens":1,"output_tokens":2,"speed":null}}`, std},
		{"Anthropic: a speed elsewhere is not the request's", ctJSON, `{"type":"message","speed":"fast","metadata":{"usage":{"speed":"fast"}},"usage":{"input_tokens":1,"output_tokens":2}}`, std},
		// Vertex AI: usageMetadata.trafficType ON_DEMAND_PRIORITY, its priority tier.
		{"Vertex AI, priority", ctJSON, `{"candidates":[{"content":{"parts":[{"text":"x"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":1,"candidatesTokenCount":2,"trafficType":"ON_DEMAND_PRIORITY"},"modelVersion":"gemini-3-pro-preview"}`, fast},
		{"Vertex AI, on demand", ctJSON, `{"candidates":[{"content":{"parts":[{"text":"x"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":1,"candidatesTokenCount":2,"trafficType":"ON_DEMAND"},"modelVersion":"gemini-3-pro-preview"}`, std},
		{"Vertex AI, the last trafficType", ctJSON, `{"candidates":[{"content":{"parts":[{"text":"x"}]},"finishReason":"STOP"}],"usageMetadata":{"trafficType":"ON_DEMAND_PRIORITY","promptTokenCount":1,"candidatesTokenCount":2,"trafficType":"ON_DEMAND"}}`, std},
		{"Vertex AI, the last trafficType: flex", ctJSON, `{"candidates":[{"content":{"parts":[{"text":"x"}]},"finishReason":"STOP"}],"usageMetadata":{"trafficType":"ON_DEMAND_PRIORITY","promptTokenCount":1,"candidatesTokenCount":2,"trafficType":"ON_DEMAND_FLEX"}}`, flex},
		{"the Gemini API, priority", ctJSON, `{"candidates":[{"content":{"parts":[{"text":"x"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":1,"candidatesTokenCount":2,"serviceTier":"priority"}}`, fast},
		{"the Gemini API, standard", ctJSON, `{"candidates":[{"content":{"parts":[{"text":"x"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":1,"candidatesTokenCount":2,"serviceTier":"standard"}}`, std},
		// Amazon Bedrock's Converse: serviceTier.type "priority".
		{"Bedrock Converse, priority", ctJSON, `{"output":{"message":{"role":"assistant","content":[{"text":"x"}]}},"stopReason":"end_turn","usage":{"inputTokens":1,"outputTokens":2,"totalTokens":3},"metrics":{"latencyMs":9},"serviceTier":{"type":"priority"}}`, fast},
		{"Bedrock Converse, default", ctJSON, `{"output":{"message":{"role":"assistant","content":[{"text":"x"}]}},"stopReason":"end_turn","usage":{"inputTokens":1,"outputTokens":2,"totalTokens":3},"serviceTier":{"type":"default"}}`, std},
		// Its latency-optimized inference: performanceConfig.latency "optimized", the
		// answer's say (a request that asked for it and was served at standard latency,
		// once the quota was spent, says "standard"); priority, dearer, wins over it.
		{"Bedrock Converse, latency-optimized", ctJSON, `{"output":{"message":{"role":"assistant","content":[{"text":"x"}]}},"stopReason":"end_turn","usage":{"inputTokens":1,"outputTokens":2,"totalTokens":3},"metrics":{"latencyMs":9},"performanceConfig":{"latency":"optimized"}}`, latency},
		{"Bedrock Converse, standard latency", ctJSON, `{"output":{"message":{"role":"assistant","content":[{"text":"x"}]}},"stopReason":"end_turn","usage":{"inputTokens":1,"outputTokens":2,"totalTokens":3},"performanceConfig":{"latency":"standard"}}`, std},
		{"Bedrock Converse, the last latency", ctJSON, `{"performanceConfig":{"latency":"optimized","latency":"standard"},"output":{"message":{"role":"assistant","content":[{"text":"x"}]}},"usage":{"inputTokens":1,"outputTokens":2},"performanceConfig":{"latency":"optimized"}}`, latency},
		{"Bedrock Converse, a latency that is no string", ctJSON, `{"output":{"message":{"role":"assistant","content":[{"text":"x"}]}},"usage":{"inputTokens":1,"outputTokens":2},"performanceConfig":{"latency":"optimized","latency":{"x":"optimized"}}}`, std},
		{"Bedrock Converse, a latency elsewhere is not the request's", ctJSON, `{"output":{"message":{"role":"assistant","content":[{"text":"x"}]}},"usage":{"inputTokens":1,"outputTokens":2},"latency":"optimized","metrics":{"latency":"optimized"},"performanceConfig":{"config":{"latency":"optimized"}}}`, std},
		{"Bedrock Converse, priority and optimized", ctJSON, `{"output":{"message":{"role":"assistant","content":[{"text":"x"}]}},"usage":{"inputTokens":1,"outputTokens":2},"performanceConfig":{"latency":"optimized"},"serviceTier":{"type":"priority"}}`, fast},
		{"Bedrock Converse, a tier that is no object", ctJSON, `{"output":{"message":{"role":"assistant","content":[{"text":"x"}]}},"stopReason":"end_turn","usage":{"inputTokens":1,"outputTokens":2,"totalTokens":3},"serviceTier":"priority"}`, std},
		{"Vertex AI: a trafficType elsewhere is not the request's", ctJSON, `{"candidates":[{"content":{"parts":[{"text":"x"}]},"finishReason":"STOP"}],"metadata":{"trafficType":"ON_DEMAND_PRIORITY"},"usageMetadata":{"promptTokenCount":1,"candidatesTokenCount":2}}`, std},
		{"Vertex AI stream, priority in a chunk", ctSSE, "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"x\"}]}}],\"usageMetadata\":{\"promptTokenCount\":1,\"trafficType\":\"ON_DEMAND_PRIORITY\"}}\r\n\r\n" +
			"data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"y\"}]},\"finishReason\":\"STOP\"}],\"usageMetadata\":{\"promptTokenCount\":1,\"candidatesTokenCount\":2}}\r\n\r\n", fast},
		{"Anthropic stream, fast in message_start", ctSSE, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-opus-5\",\"usage\":{\"input_tokens\":1,\"output_tokens\":1,\"speed\":\"fast\"}}}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":2}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", fast},
		{"Anthropic stream, fast in message_delta", ctSSE, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-opus-5\",\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":2,\"speed\":\"fast\"}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", fast},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := []byte(tc.body)
			got := run(tc.ct, nil, Limits{}, bytewise(body), true)
			if got.Tier != tc.want || !got.Complete {
				t.Fatalf("%s", show(got))
			}
			var ref Usage
			if tc.ct == ctJSON {
				ref = oracleJSON(body, Limits{})
			} else {
				ref = oracleSSE(body, Limits{})
			}
			if !reflect.DeepEqual(got, ref) {
				t.Fatalf("differs from the reference:\n got %s\n ref %s", show(got), show(ref))
			}
		})
	}
}

// A Responses stream cut before its terminal event is charged the dearest tier its
// events said (what the request asked for): nothing said it ran at another. Not flex:
// the echo of the request's ask is not the answer's say, and a cut stream is standard.
func TestResponsesStreamCutKeepsTheAskedTier(t *testing.T) {
	flex := "data: {\"type\":\"response.created\",\"response\":{\"service_tier\":\"flex\"}}\n\n" +
		"data: {\"type\":\"response.output_text.delta\",\"delta\":\"hello\"}\n\n"
	if got := run(ctSSE, nil, Limits{}, bytewise([]byte(flex)), false); got.Tier != pricecatalog.Standard || got.Complete {
		t.Fatalf("flex: %s", show(got))
	}
	body := "data: {\"type\":\"response.created\",\"response\":{\"service_tier\":\"priority\"}}\n\n" +
		"data: {\"type\":\"response.output_text.delta\",\"delta\":\"hello\"}\n\n"
	if got := run(ctSSE, nil, Limits{}, bytewise([]byte(body)), false); got.Tier != pricecatalog.Fast || got.Complete {
		t.Fatalf("%s", show(got))
	}
}

// Anthropic says how many cache writes were for an hour (usage.cache_creation
// .ephemeral_1h_input_tokens), which cost more than the default five-minute writes.
func TestAnthropicOneHourCacheWrites(t *testing.T) {
	const msg = `{"type":"message","model":"claude-sonnet-4-5","content":[{"type":"text","text":"ok"}],` +
		`"usage":{"input_tokens":10,"cache_creation_input_tokens":3000,"cache_read_input_tokens":500,` +
		`"cache_creation":{"ephemeral_5m_input_tokens":1000,"ephemeral_1h_input_tokens":2000},"output_tokens":7}}`
	checkSplits(t, ctJSON, nil, []byte(msg), Usage{Model: "claude-sonnet-4-5", InputTokens: 3510, OutputTokens: 7, CachedInputTokens: 500,
		CacheCreationInputTokens: 3000, CacheCreation1hInputTokens: 2000, Complete: true, Format: FormatAnthropicMessages,
		InputReported: true, OutputReported: true, TextBytes: 2})
	stream := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-sonnet-4-5\",\"usage\":{\"input_tokens\":10," +
		"\"cache_creation_input_tokens\":3000,\"cache_read_input_tokens\":0,\"cache_creation\":{\"ephemeral_5m_input_tokens\":0,\"ephemeral_1h_input_tokens\":3000},\"output_tokens\":1}}}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":9}}\n\n"
	checkSplits(t, ctSSE, nil, []byte(stream), Usage{Model: "claude-sonnet-4-5", InputTokens: 3010, OutputTokens: 9,
		CacheCreationInputTokens: 3000, CacheCreation1hInputTokens: 3000, Complete: true, Format: FormatAnthropicSSE,
		InputReported: true, OutputReported: true})
	// More one-hour writes than writes: never more than the writes.
	if got := run(ctJSON, nil, Limits{}, [][]byte{[]byte(`{"type":"message","usage":{"input_tokens":1,"cache_creation_input_tokens":5,"cache_creation":{"ephemeral_1h_input_tokens":9},"output_tokens":1}}`)}, true); got.CacheCreation1hInputTokens != 5 {
		t.Fatalf("%s", show(got))
	}
}

// OpenAI's audio endpoints. whisper-1 is billed per minute of input audio and reports
// usage {"type":"duration","seconds":N}, read into AudioInputMillis (a fraction of a
// millisecond rounds up; a negative, exponent, overflowing or non-number value reports
// nothing). gpt-4o-transcribe reports tokens, as a JSON body (read as openai-responses,
// as before) or at the end of a stream of transcript.text.* events.
//
// TextBytes: the top-level "text" of a non-streamed transcription is not counted (nor
// segments[].text), so TextBytes stays 0 for whisper-1 and gpt-4o-transcribe bodies;
// streamed, the transcript.text.delta strings are counted and the full text that
// transcript.text.done repeats is not.
func TestAudioTranscription(t *testing.T) {
	whisper := func(seconds string) string {
		return `{"text":"Hello there.","usage":{"type":"duration","seconds":` + seconds + `}}`
	}
	duration := func(ms int64) Usage {
		return Usage{AudioInputMillis: ms, Complete: true, Format: FormatOpenAIAudioDuration, InputReported: true, OutputReported: true}
	}
	incomplete := func(u Usage) Usage { u.Complete = false; return u }
	const transcribeUsage = `{"type":"tokens","input_tokens":14,"input_token_details":{"text_tokens":0,"audio_tokens":14},"output_tokens":45,"total_tokens":59}`
	const transcribe = `{"text":"Hello there.","usage":` + transcribeUsage + `}`
	tokens := Usage{InputTokens: 14, OutputTokens: 45, AudioInputTokens: 14, AudioInputReported: true, Complete: true, Format: FormatOpenAIResponses, InputReported: true, OutputReported: true}
	const (
		delta1 = `data: {"type":"transcript.text.delta","delta":"Hel"}` + "\n\n"
		delta2 = `data: {"type":"transcript.text.delta","delta":"lo."}` + "\n\n"
		done   = `data: {"type":"transcript.text.done","text":"Hello.","usage":` + transcribeUsage + "}\n\n"
	)
	streamed := Usage{InputTokens: 14, OutputTokens: 45, AudioInputTokens: 14, AudioInputReported: true, Complete: true, Format: FormatOpenAITranscriptionSSE, InputReported: true, OutputReported: true, TextBytes: 6}
	deltasOnly := Usage{Format: FormatOpenAITranscriptionSSE, TextBytes: 6}
	gz := func(body string) string { return string(compress("gzip", []byte(body), nil)) }
	gzipped := map[string]string{"content-encoding": "gzip"}

	cases := []struct {
		name    string
		ct      string
		headers map[string]string
		body    string
		eos     bool
		want    Usage
	}{
		{"whisper-1 json, integer seconds", ctJSON, nil, whisper("9"), true, duration(9000)},
		{"whisper-1 verbose_json, decimal seconds, duration and segments", ctJSON, nil,
			`{"task":"transcribe","language":"english","duration":9.21,"text":"Hello there.","segments":[{"id":0,"seek":0,"start":0.0,"end":9.21,` +
				`"text":" Hello there.","tokens":[50364,2425,456,13,50824],"temperature":0.0,"avg_logprob":-0.31,"compression_ratio":0.8,"no_speech_prob":0.01,"seconds":99}],` +
				`"usage":{"type":"duration","seconds":9.21}}`, true, duration(9210)},
		{"whisper-1 verbose_json with usage before the segments", ctJSON, nil,
			`{"usage":{"type":"duration","seconds":10},"task":"translate","duration":9.21,"text":"Hi.","segments":[]}`, true, duration(10000)},
		{"whisper-1 gzip", ctJSON, gzipped, gz(whisper("9.5")), true, duration(9500)},
		{"whisper-1 gzip, cut", ctJSON, gzipped, gz(whisper("9.5")), false, incomplete(duration(9500))},
		{"whisper-1 sniffed without content type", "", nil, whisper("9"), true, duration(9000)},

		// Decimal seconds: exact to the millisecond, any remainder rounds up.
		{"one decimal", ctJSON, nil, whisper("9.5"), true, duration(9500)},
		{"three decimals", ctJSON, nil, whisper("9.123"), true, duration(9123)},
		{"a fourth decimal rounds up", ctJSON, nil, whisper("9.0001"), true, duration(9001)},
		{"below a millisecond rounds up to one", ctJSON, nil, whisper("0.0004"), true, duration(1)},
		{"rounds up from the last of many digits", ctJSON, nil, whisper("1.99900000000000000000000001"), true, duration(2000)},
		{"trailing zeros are exact", ctJSON, nil, whisper("9.0000000000"), true, duration(9000)},
		{"zero seconds", ctJSON, nil, whisper("0"), true, duration(0)},
		{"zero with decimals", ctJSON, nil, whisper("0.000"), true, duration(0)},
		{"largest", ctJSON, nil, whisper("9223372036854775.807"), true, duration(9223372036854775807)},

		// Not reported: the usage then reports nothing, so the body is not recognised.
		{"overflow by the milliseconds", ctJSON, nil, whisper("9223372036854775.808"), true, Usage{}},
		{"overflow by rounding up", ctJSON, nil, whisper("9223372036854775.8071"), true, Usage{}},
		{"overflow of an integer that fits int64", ctJSON, nil, whisper("9223372036854775807"), true, Usage{}},
		{"overflow of the integer digits", ctJSON, nil, whisper("92233720368547758070"), true, Usage{}},
		{"absurdly long", ctJSON, nil, whisper(strings.Repeat("9", 400) + ".5"), true, Usage{}},
		{"negative", ctJSON, nil, whisper("-9"), true, Usage{}},
		{"negative decimal", ctJSON, nil, whisper("-0.5"), true, Usage{}},
		{"negative zero", ctJSON, nil, whisper("-0"), true, Usage{}},
		{"exponent", ctJSON, nil, whisper("9e1"), true, Usage{}},
		{"exponent after decimals", ctJSON, nil, whisper("9.5E0"), true, Usage{}},
		{"negative exponent", ctJSON, nil, whisper("1e-3"), true, Usage{}},
		{"a string", ctJSON, nil, whisper(`"9"`), true, Usage{}},
		{"null", ctJSON, nil, whisper("null"), true, Usage{}},
		{"an object", ctJSON, nil, whisper(`{"seconds":9}`), true, Usage{}},
		{"an array", ctJSON, nil, whisper("[9]"), true, Usage{}},
		{"an invalid value after a valid one keeps the valid one", ctJSON, nil, `{"usage":{"seconds":9,"seconds":"x","seconds":-1}}`, true, duration(9000)},
		{"repeated: the largest wins", ctJSON, nil, `{"usage":{"seconds":9.5},"usage":{"seconds":3,"seconds":9.4999}}`, true, duration(9500)},
		{"seconds outside usage are not the duration", ctJSON, nil, `{"text":"x","duration":9.21,"seconds":9,"x":{"usage":{"seconds":9}}}`, true, Usage{}},

		// Malformed or cut bodies: what was read, not complete.
		{"malformed after the usage", ctJSON, nil, whisper("9") + "x", true, incomplete(duration(9000))},
		{"cut after the seconds", ctJSON, nil, `{"text":"Hello there.","usage":{"type":"duration","seconds":9.5}`, false, incomplete(duration(9500))},
		{"cut inside the seconds reports nothing", ctJSON, nil, `{"text":"Hello there.","usage":{"type":"duration","seconds":9.5`, false, Usage{}},
		{"a malformed number reports nothing", ctJSON, nil, whisper("9."), true, Usage{}},

		// A usage with token counts keeps its family; its seconds are not read.
		{"gpt-4o-transcribe json", ctJSON, nil, transcribe, true, tokens},
		{"gpt-4o-transcribe json, gzip", ctJSON, gzipped, gz(transcribe), true, tokens},
		{"tokens and seconds", ctJSON, nil, `{"usage":{"type":"tokens","seconds":9,"input_tokens":14,"output_tokens":45,"input_token_details":{"audio_tokens":14}}}`, true, tokens},
		{"chat usage with seconds", ctJSON, nil, `{"usage":{"prompt_tokens":1,"completion_tokens":2,"seconds":3}}`, true,
			Usage{InputTokens: 1, OutputTokens: 2, Complete: true, Format: FormatOpenAIChat, InputReported: true, OutputReported: true}},
		{"seconds in a recognised object is not a duration", ctJSON, nil, `{"object":"response","usage":{"seconds":9}}`, true, Usage{Format: FormatOpenAIResponses}},
		{"seconds alone in a stream is not read", ctSSE, nil, "data: " + whisper("9") + "\n\n", true, Usage{}},

		// Streamed transcriptions.
		{"transcript stream", ctSSE, nil, delta1 + delta2 + done, true, streamed},
		{"transcript stream without blank lines", ctSSE, nil, strings.ReplaceAll(delta1+delta2+done, "\n\n", "\n"), true, streamed},
		{"transcript stream, gzip", ctSSE, gzipped, gz(delta1 + delta2 + done), true, streamed},
		{"transcript stream cut before done", ctSSE, nil, delta1 + delta2, false, deltasOnly},
		{"transcript stream ended before done", ctSSE, nil, delta1 + delta2, true, deltasOnly},
		{"transcript stream cut inside done", ctSSE, nil, delta1 + delta2 + done[:len(done)-10], false, deltasOnly},
		// transcript.text.done ends the stream by its protocol (TestStreamEndedByItsTerminalEvent):
		// before 2026-12-03, a client that left on it made the whole answer incomplete.
		{"transcript stream cut after done", ctSSE, nil, delta1 + delta2 + done, false, streamed},
		{"transcript stream cut before done's blank line", ctSSE, nil, delta1 + delta2 + strings.TrimSuffix(done, "\n"), false, incomplete(streamed)},
		{"done without usage", ctSSE, nil, delta1 + `data: {"type":"transcript.text.done","text":"Hel"}` + "\n\n", true,
			Usage{Format: FormatOpenAITranscriptionSSE, TextBytes: 3}},
		{"done with the input count alone", ctSSE, nil, delta1 + `data: {"type":"transcript.text.done","usage":{"input_tokens":14}}` + "\n\n", true,
			Usage{InputTokens: 14, Format: FormatOpenAITranscriptionSSE, InputReported: true, TextBytes: 3}},
		{"usage before done is not final", ctSSE, nil, `data: {"type":"transcript.text.delta","delta":"Hel","usage":{"input_tokens":14,"output_tokens":45}}` + "\n\n", true,
			Usage{InputTokens: 14, OutputTokens: 45, Format: FormatOpenAITranscriptionSSE, InputReported: true, OutputReported: true, TextBytes: 3}},
		{"a later smaller done does not lower the counts", ctSSE, nil, done + strings.ReplaceAll(done, `"output_tokens":45`, `"output_tokens":4`), true,
			Usage{InputTokens: 14, OutputTokens: 45, AudioInputTokens: 14, AudioInputReported: true, Complete: true, Format: FormatOpenAITranscriptionSSE, InputReported: true, OutputReported: true}},
		{"a delta that is not a string", ctSSE, nil, `data: {"type":"transcript.text.delta","delta":7}` + "\n\n" + `data: {"type":"transcript.text.delta","delta":null}` + "\n\n" + delta2, true,
			Usage{Format: FormatOpenAITranscriptionSSE, TextBytes: 3}},
		{"another transcript event's delta is not text", ctSSE, nil, `data: {"type":"transcript.text.segment","delta":"Hel","text":"Hel"}` + "\n\n", true,
			Usage{Format: FormatOpenAITranscriptionSSE}},
		{"a prefix alone is no event of the family", ctSSE, nil, `data: {"type":"transcript.text.","usage":{"input_tokens":14,"output_tokens":45}}` + "\n\n", true, Usage{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body := []byte(tc.body)
			check := func(how string, chunks [][]byte) {
				t.Helper()
				if got := run(tc.ct, tc.headers, Limits{}, chunks, tc.eos); !reflect.DeepEqual(got, tc.want) {
					t.Fatalf("%s:\n got %s\nwant %s", how, show(got), show(tc.want))
				}
			}
			check("whole", [][]byte{body})
			check("byte by byte", bytewise(body))
			r := rand.New(rand.NewPCG(seedOf(t.Name()), 4))
			for i := range 50 {
				check(fmt.Sprintf("random split %d", i), randomSplit(body, r))
			}
			if tc.headers != nil || !tc.eos {
				return
			}
			ref, ok := oracleFor(tc.ct, body)
			if !ok {
				return
			}
			if !reflect.DeepEqual(ref, tc.want) {
				t.Fatalf("reference:\n got %s\nwant %s", show(ref), show(tc.want))
			}
		})
	}
}

// TestAudioSecondsMatchReference compares the scanner's milliseconds with the
// reference's exact rational arithmetic over random JSON numbers, many of them near
// the int64 boundary, where the scaling and the rounding up can overflow.
func TestAudioSecondsMatchReference(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	digits := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = '0' + byte(r.IntN(10))
			if r.IntN(3) == 0 {
				b[i] = "09"[r.IntN(2)] // runs of 0 and 9 reach the exact and the rounding edges
			}
		}
		return string(b)
	}
	reported := 0
	for range 5000 {
		var n string
		switch r.IntN(4) {
		case 0: // around the largest value that fits: 9223372036854775.807 s
			n = "9223372036854775." + digits(1+r.IntN(6))
			if r.IntN(2) == 0 {
				n = "922337203685477" + digits(1) + "." + "80" + digits(r.IntN(5))
			}
		default:
			n = strings.TrimLeft(digits(1+r.IntN(20)), "0")
			if n == "" {
				n = "0"
			}
			if r.IntN(4) > 0 {
				n += "." + digits(1+r.IntN(25))
			}
		}
		if r.IntN(20) == 0 {
			n += "e" + digits(1)
		}
		if r.IntN(20) == 0 {
			n = "-" + n
		}
		body := []byte(`{"text":"x","usage":{"type":"duration","seconds":` + n + `}}`)
		if !json.Valid(body) {
			t.Fatalf("generated invalid JSON %s", body)
		}
		got := run(ctJSON, nil, Limits{}, randomSplit(body, r), true)
		if ref := oracleJSON(body, Limits{}); !reflect.DeepEqual(got, ref) {
			t.Fatalf("seconds %s:\n got %s\n ref %s", n, show(got), show(ref))
		}
		if got.Complete {
			reported++
		}
	}
	// Most are reported, and some are not (overflow, exponent, sign): both ways are tried.
	if reported < 2500 || reported > 4900 {
		t.Fatalf("%d of 5000 durations reported", reported)
	}
}

// A transcript in a text format (whisper-1's response_format text, srt or vtt, sent as
// text/plain) reports no usage: all of it is output text, counted byte for byte and
// marked PlainText, so that the settlement can estimate it, and can tell it from an error
// page (inflight.FromResponse). A stream or a JSON body sent as text/plain is still read
// as one; other content types are not plain text.
func TestPlainTextTranscript(t *testing.T) {
	const transcript = "Tolls are paid in tokens.\n"
	const srt = "1\n00:00:00,000 --> 00:00:02,500\nTolls are paid in tokens.\n\n"
	gz := map[string]string{"content-encoding": "gzip"}
	plain := func(n int) Usage { return Usage{TextBytes: int64(n), PlainText: true} }
	for _, tc := range []struct {
		name, ct string
		headers  map[string]string
		body     string
		eos      bool
		want     Usage
	}{
		{"text", "text/plain; charset=utf-8", nil, transcript, true, plain(len(transcript))},
		{"text, cut", "text/plain", nil, transcript[:10], false, plain(10)},
		{"srt", "text/plain", nil, srt, true, plain(len(srt))},
		{"vtt", "text/vtt", nil, "WEBVTT\n\n" + srt, true, plain(len("WEBVTT\n\n" + srt))},
		{"subrip", "application/x-subrip", nil, srt, true, plain(len(srt))},
		{"gzip: the decoded text", "text/plain", gz, string(compress("gzip", []byte(transcript), nil)), true, plain(len(transcript))},
		{"empty", "text/plain", nil, "", true, plain(0)},
		{"JSON sent as text/plain is read as JSON", "text/plain", nil, `{"text":"Hi.","usage":{"type":"duration","seconds":9}}`, true,
			Usage{AudioInputMillis: 9000, Complete: true, Format: FormatOpenAIAudioDuration, InputReported: true, OutputReported: true}},
		{"a stream sent as text/plain is read as a stream", "text/plain", nil,
			`data: {"type":"transcript.text.delta","delta":"Hel"}` + "\n\n", true, Usage{Format: FormatOpenAITranscriptionSSE, TextBytes: 3}},
		{"HTML is not plain text", "text/html", nil, "<html>Bad gateway</html>", true, Usage{}},
		{"no content type is not plain text", "", nil, transcript, true, Usage{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for how, chunks := range map[string][][]byte{"whole": {[]byte(tc.body)}, "byte by byte": bytewise([]byte(tc.body))} {
				if got := run(tc.ct, tc.headers, Limits{}, chunks, tc.eos); !reflect.DeepEqual(got, tc.want) {
					t.Fatalf("%s:\n got %s plain %v\nwant %s plain %v", how, show(got), got.PlainText, show(tc.want), tc.want.PlainText)
				}
			}
		})
	}
}

// Speech in SSE (gpt-4o-mini-tts, stream_format "sse"): base64 audio deltas (not text),
// then speech.audio.done with the usage, whose output counts the audio tokens.
func TestSpeechSSE(t *testing.T) {
	const (
		delta = `data: {"type":"speech.audio.delta","audio":"SUQzBAAAAAAAI1RTU0UAAAAPAAADTGF2ZjU4Ljc2LjEwMAAAAAAAAAAAAAAA"}` + "\n\n"
		done  = `data: {"type":"speech.audio.done","usage":{"input_tokens":14,"output_tokens":101,"total_tokens":115}}` + "\n\n"
	)
	full := Usage{InputTokens: 14, OutputTokens: 101, Complete: true, Format: FormatOpenAISpeechSSE, InputReported: true, OutputReported: true}
	for _, tc := range []struct {
		name string
		body string
		eos  bool
		want Usage
	}{
		{"complete", delta + delta + done, true, full},
		{"cut before done: nothing reported, no text", delta + delta, false, Usage{Format: FormatOpenAISpeechSSE}},
		{"cut after done: its protocol ended it", delta + done, false, full},
		{"cut before done's blank line", delta + strings.TrimSuffix(done, "\n"), false, func() Usage { u := full; u.Complete = false; return u }()},
		{"done without counts", delta + `data: {"type":"speech.audio.done"}` + "\n\n", true, Usage{Format: FormatOpenAISpeechSSE}},
	} {
		t.Run(tc.name, func(t *testing.T) { checkWholeAndBytewise(t, ctSSE, tc.body, tc.eos, tc.want) })
	}
}

// checkWholeAndBytewise reads body whole and byte by byte, ended as eos says, and
// compares both with want, and, for a body that ended, the reference's reading too.
func checkWholeAndBytewise(t *testing.T, ct, body string, eos bool, want Usage) {
	t.Helper()
	for how, chunks := range map[string][][]byte{"whole": {[]byte(body)}, "byte by byte": bytewise([]byte(body))} {
		if got := run(ct, nil, Limits{}, chunks, eos); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s:\n got %s\nwant %s", how, show(got), show(want))
		}
	}
	if ref, _ := oracleFor(ct, []byte(body)); eos && !reflect.DeepEqual(ref, want) {
		t.Fatalf("reference:\n got %s\nwant %s", show(ref), show(want))
	}
}

// OpenAI's images (gpt-image-1) report token usage in the Responses API's names: in the
// JSON answer, and streamed in image_generation.completed (image_edit.completed) after
// partial images, whose base64 is not output text.
func TestImages(t *testing.T) {
	const (
		usage   = `"usage":{"total_tokens":4210,"input_tokens":50,"output_tokens":4160,"input_tokens_details":{"text_tokens":40,"image_tokens":10}}`
		b64     = `"b64_json":"iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="`
		json    = `{"created":1713833628,"background":"opaque","data":[{` + b64 + `}],"output_format":"png","quality":"high","size":"1024x1024",` + usage + `}`
		partial = `data: {"type":"image_generation.partial_image",` + b64 + `,"partial_image_index":0,"size":"1024x1024"}` + "\n\n"
		done    = `data: {"type":"image_generation.completed",` + b64 + `,"size":"1024x1024",` + usage + `}` + "\n\n"
	)
	stream := Usage{InputTokens: 50, OutputTokens: 4160, Complete: true, Format: FormatOpenAIImageSSE, InputReported: true, OutputReported: true}
	for _, tc := range []struct {
		name, ct, body string
		eos            bool
		want           Usage
	}{
		{"json", ctJSON, json, true, func() Usage { u := stream; u.Format = FormatOpenAIResponses; return u }()},
		{"stream", ctSSE, partial + partial + done, true, stream},
		{"edit stream", ctSSE, strings.ReplaceAll(partial+done, "image_generation.", "image_edit."), true, stream},
		{"stream cut before completed: nothing reported, no text", ctSSE, partial + partial, false, Usage{Format: FormatOpenAIImageSSE}},
		{"completed without counts", ctSSE, partial + `data: {"type":"image_generation.completed"}` + "\n\n", true, Usage{Format: FormatOpenAIImageSSE}},
	} {
		t.Run(tc.name, func(t *testing.T) { checkWholeAndBytewise(t, tc.ct, tc.body, tc.eos, tc.want) })
	}
}

// Anthropic bills its web search server tool apiece: usage.server_tool_use.
// web_search_requests, in a message and in a stream's message_delta (cumulative, so the
// largest wins). Another family's usage never carries it. OpenAI bills its web search
// tool per search action: the web_search_call items whose action is a search (or that
// have none), not a reasoning model's open_page and find_in_page items.
func TestWebSearchRequests(t *testing.T) {
	const msg = `{"type":"message","model":"claude-sonnet-4-5","usage":{"input_tokens":10,"output_tokens":20,"server_tool_use":{"web_search_requests":3}}}`
	stream := "data: " + `{"type":"message_start","message":{"model":"claude-sonnet-4-5","usage":{"input_tokens":10,"output_tokens":1}}}` + "\n\n" +
		"data: " + `{"type":"message_delta","usage":{"output_tokens":20,"server_tool_use":{"web_search_requests":2}}}` + "\n\n" +
		"data: " + `{"type":"message_delta","usage":{"output_tokens":20,"server_tool_use":{"web_search_requests":3}}}` + "\n\n"
	for _, tc := range []struct {
		name, ct, body string
		want           int64
	}{
		{"message", ctJSON, msg, 3},
		{"stream", ctSSE, stream, 3},
		{"none", ctJSON, `{"type":"message","usage":{"input_tokens":10,"output_tokens":20}}`, 0},
		{"not a count", ctJSON, `{"type":"message","usage":{"input_tokens":1,"output_tokens":2,"server_tool_use":{"web_search_requests":"3"}}}`, 0},
		{"outside usage", ctJSON, `{"type":"message","server_tool_use":{"web_search_requests":3},"usage":{"input_tokens":1,"output_tokens":2}}`, 0},
		{"an OpenAI usage does not carry it", ctJSON, `{"object":"chat.completion","usage":{"prompt_tokens":1,"completion_tokens":2,"server_tool_use":{"web_search_requests":3}}}`, 0},
		// OpenAI's Responses API bills its web search tool per call, and counts the calls
		// nowhere in its usage: each is an output item of type web_search_call.
		{"responses", ctJSON, responsesWithSearches, 2},
		{"responses stream", ctSSE, responsesStreamWithSearches, 2},
		{"responses stream cut after a search", ctSSE, responsesStreamWithSearches[:strings.Index(responsesStreamWithSearches, `{"type":"response.completed"`)-len("data: ")], 2},
		{"responses stream, the terminal lists more than its events", ctSSE, "data: " + `{"type":"response.web_search_call.completed","item_id":"ws_1"}` + "\n\n" + responsesStreamWithSearches[strings.Index(responsesStreamWithSearches, "data: "+`{"type":"response.completed"`):], 2},
		// A reasoning model's web_search_call items also record the pages it opened and
		// searched within (action open_page, find_in_page): OpenAI bills the search
		// actions alone. An item's action may come before its type.
		{"responses, page actions are no call", ctJSON, responsesWithPageActions, 1},
		{"responses, the action before the type", ctJSON, `{"object":"response","output":[{"action":{"type":"open_page"},"type":"web_search_call"},{"action":{"type":"search"},"type":"web_search_call"}],"usage":{"input_tokens":1,"output_tokens":2}}`, 1},
		{"responses stream, page actions are no call", ctSSE, responsesStreamWithPageActions, 1},
		{"responses stream, completion events and the terminal's items alone", ctSSE, pageActionEvents + "data: " + `{"type":"response.completed","response":` + responsesWithPageActions + `}` + "\n\n", 1},
		// Cut before the terminal response: each item's done event says its action; a
		// completion event whose item was not seen is charged (it may be a search).
		{"responses stream cut after its items", ctSSE, responsesStreamWithPageActions[:strings.Index(responsesStreamWithPageActions, `{"type":"response.completed"`)-len("data: ")], 1},
		{"responses stream cut before its last item's done event", ctSSE, responsesStreamWithPageActions[:strings.LastIndex(responsesStreamWithPageActions, `{"type":"response.output_item.done"`)-len("data: ")], 2},
		// Cut with completion events alone: every one is charged, never 0.
		{"responses stream cut with completion events alone", ctSSE, pageActionEvents, 4},
		{"a chat completion has no output items", ctJSON, `{"object":"chat.completion","output":[{"type":"web_search_call"}],"usage":{"prompt_tokens":1,"completion_tokens":2}}`, 0},
		// Gemini's Search grounding lists the queries it ran (billed per query on Gemini
		// 3, per grounded prompt before); its usageMetadata does not count them.
		{"gemini", ctJSON, geminiGrounded, 2},
		{"gemini stream", ctSSE, "data: " + `{"candidates":[{"content":{"parts":[{"text":"Spain "}]}}],"usageMetadata":{"promptTokenCount":9},"modelVersion":"gemini-3-pro-preview"}` + "\r\n\r\n" +
			"data: " + geminiGrounded + "\r\n\r\n", 2},
		// Gemini 3.1 Flash Image's grounding with image search lists its image queries
		// apart; Google bills each as a search query, as the web's.
		{"gemini image search queries", ctJSON, `{"candidates":[{"content":{"parts":[{"text":"a"}]},"finishReason":"STOP","groundingMetadata":{"webSearchQueries":["tolls"],"imageSearchQueries":["toll booth","toll plaza"],"groundingChunks":[{"image":{"uri":"https://e.com","image_uri":"https://e.com/b.jpg"}}]}}],"usageMetadata":{"promptTokenCount":1,"candidatesTokenCount":2},"modelVersion":"gemini-3.1-flash-image"}`, 3},
		{"gemini queries elsewhere, or not strings", ctJSON, `{"groundingMetadata":{"webSearchQueries":["a"]},"candidates":[{"groundingMetadata":{"webSearchQueries":[1,null,["b"],{"q":"c"}],"searchEntryPoint":{"webSearchQueries":["d"]}},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":1,"candidatesTokenCount":2}}`, 0},
		{"an output item's type only", ctJSON, `{"object":"response","output":[{"type":"message","action":{"type":"web_search_call"}},[{"type":"web_search_call"}]],"tools":[{"type":"web_search_call"}],"usage":{"input_tokens":1,"output_tokens":2}}`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cut := strings.Contains(tc.name, "cut")
			for how, chunks := range map[string][][]byte{"whole": {[]byte(tc.body)}, "byte by byte": bytewise([]byte(tc.body))} {
				if got := run(tc.ct, nil, Limits{}, chunks, true); got.WebSearchRequests != tc.want || got.Complete == cut {
					t.Fatalf("%s: %s with %d web searches, want %d, complete %v", how, show(got), got.WebSearchRequests, tc.want, !cut)
				}
			}
			if ref, _ := oracleFor(tc.ct, []byte(tc.body)); ref.WebSearchRequests != tc.want {
				t.Fatalf("reference: %d web searches, want %d", ref.WebSearchRequests, tc.want)
			}
		})
	}
}

// A Responses object with two calls of the web search tool (each with an action whose
// own type is not an item's), as OpenAI answers a request with tools [{"type":"web_search"}].
const responsesWithSearches = `{"id":"resp_1","object":"response","model":"gpt-5-2025-08-07","output":[` +
	`{"type":"web_search_call","id":"ws_1","status":"completed","action":{"type":"search","query":"tollgate"}},` +
	`{"type":"web_search_call","id":"ws_2","status":"completed","action":{"type":"search","query":"envoy ext_proc"}},` +
	`{"type":"message","id":"msg_1","role":"assistant","content":[{"type":"output_text","text":"Found it."}]}],` +
	`"tools":[{"type":"web_search"}],"usage":{"input_tokens":9000,"output_tokens":300,"input_tokens_details":{"cached_tokens":0}}}`

// The same answer streamed: each call's events, then response.completed with the whole
// response.
var responsesStreamWithSearches = "data: " + `{"type":"response.created","response":{"object":"response","model":"gpt-5-2025-08-07","output":[]}}` + "\n\n" +
	"data: " + `{"type":"response.output_item.added","output_index":0,"item":{"type":"web_search_call","id":"ws_1","status":"in_progress"}}` + "\n\n" +
	"data: " + `{"type":"response.web_search_call.searching","output_index":0,"item_id":"ws_1"}` + "\n\n" +
	"data: " + `{"type":"response.web_search_call.completed","output_index":0,"item_id":"ws_1"}` + "\n\n" +
	"data: " + `{"type":"response.output_item.done","output_index":0,"item":{"type":"web_search_call","id":"ws_1","status":"completed"}}` + "\n\n" +
	"data: " + `{"type":"response.web_search_call.completed","output_index":1,"item_id":"ws_2"}` + "\n\n" +
	"data: " + `{"type":"response.output_text.delta","output_index":2,"delta":"Found it."}` + "\n\n" +
	"data: " + `{"type":"response.completed","response":` + responsesWithSearches + `}` + "\n\n"

// A reasoning model's Responses object whose web search tool searched once, opened two
// pages and searched within one: four web_search_call items, one billed call.
const responsesWithPageActions = `{"id":"resp_2","object":"response","model":"o3-2025-04-16","status":"completed","output":[` +
	`{"type":"web_search_call","id":"ws_1","status":"completed","action":{"type":"search","query":"toll prices 2026"}},` +
	`{"type":"web_search_call","id":"ws_2","status":"completed","action":{"type":"open_page","url":"https://example.com/a"}},` +
	`{"type":"web_search_call","id":"ws_3","status":"completed","action":{"type":"open_page","url":"https://example.com/b"}},` +
	`{"type":"web_search_call","id":"ws_4","status":"completed","action":{"type":"find_in_page","url":"https://example.com/b","pattern":"toll"}},` +
	`{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Tolls rose.","annotations":[]}]}],` +
	`"usage":{"input_tokens":9000,"input_tokens_details":{"cached_tokens":0},"output_tokens":700,"output_tokens_details":{"reasoning_tokens":500},"total_tokens":9700}}`

// pageActionEvents are the completion events of responsesWithPageActions's four items,
// which do not say their action.
var pageActionEvents = func() string {
	var b strings.Builder
	for i := range 4 {
		fmt.Fprintf(&b, "data: {\"type\":\"response.web_search_call.completed\",\"item_id\":\"ws_%d\",\"output_index\":%d}\n\n", i+1, i)
	}
	return b.String()
}()

// responsesWithPageActions streamed: each item added (without its action yet), its
// completion event, its done event with the action; then the terminal response.
var responsesStreamWithPageActions = func() string {
	actions := []string{`{"type":"search","query":"toll prices 2026"}`, `{"type":"open_page","url":"https://example.com/a"}`,
		`{"type":"open_page","url":"https://example.com/b"}`, `{"type":"find_in_page","url":"https://example.com/b","pattern":"toll"}`}
	var b strings.Builder
	b.WriteString("data: " + `{"type":"response.created","response":{"object":"response","model":"o3-2025-04-16","output":[]}}` + "\n\n")
	for i, a := range actions {
		fmt.Fprintf(&b, "data: {\"type\":\"response.output_item.added\",\"output_index\":%d,\"item\":{\"type\":\"web_search_call\",\"id\":\"ws_%d\",\"status\":\"in_progress\"}}\n\n", i, i+1)
		fmt.Fprintf(&b, "data: {\"type\":\"response.web_search_call.completed\",\"output_index\":%d,\"item_id\":\"ws_%d\"}\n\n", i, i+1)
		fmt.Fprintf(&b, "data: {\"type\":\"response.output_item.done\",\"output_index\":%d,\"item\":{\"type\":\"web_search_call\",\"id\":\"ws_%d\",\"status\":\"completed\",\"action\":%s}}\n\n", i, i+1, a)
	}
	b.WriteString("data: " + `{"type":"response.output_text.delta","output_index":4,"delta":"Tolls rose."}` + "\n\n")
	b.WriteString("data: " + `{"type":"response.completed","response":` + responsesWithPageActions + `}` + "\n\n")
	return b.String()
}()

// A Gemini answer grounded with Google Search: two queries in the candidate's
// groundingMetadata (with the chunks and supports it cites, which are not searches).
const geminiGrounded = `{"candidates":[{"content":{"parts":[{"text":"Spain won Euro 2024."}],"role":"model"},"finishReason":"STOP",` +
	`"groundingMetadata":{"webSearchQueries":["euro 2024 winner","who won euro 2024"],"searchEntryPoint":{"renderedContent":"<style></style>"},` +
	`"groundingChunks":[{"web":{"uri":"https://example.com/a","title":"a"}}],"groundingSupports":[{"segment":{"endIndex":20,"text":"Spain won Euro 2024."},"groundingChunkIndices":[0]}]}}],` +
	`"usageMetadata":{"promptTokenCount":9,"candidatesTokenCount":6,"totalTokenCount":15},"modelVersion":"gemini-3-pro-preview"}`

// TestSpeechAudio: an answer in audio (OpenAI's speech in its default shape) reports no
// usage; its duration is read from the container (package audiolength), compressed or
// not, whole or cut.
func TestSpeechAudio(t *testing.T) {
	f, ok := testaudio.Speech("mp3")
	if !ok {
		t.Fatal("no mp3 fixture")
	}
	mp3, mp3Millis := f.Bytes, f.DecodedMillis // what ffmpeg decodes of it
	audio := func(ms int64) Usage { return Usage{Format: FormatAudio, AudioOutputMillis: ms} }
	for _, tc := range []struct {
		name, ct string
		h        map[string]string
		body     []byte
		eos      bool
		want     Usage
	}{
		{"mp3", "audio/mpeg", nil, mp3, true, audio(mp3Millis)},
		{"mp3, gzip", "audio/mpeg", map[string]string{"content-encoding": "gzip"}, compress("gzip", mp3, nil), true, audio(mp3Millis)},
		{"mp3 with an upstream cost", "audio/mpeg", map[string]string{HeaderCostMicroUSD: "77"}, mp3, true,
			func() Usage { u := audio(mp3Millis); c := int64(77); u.CostMicroUSD = &c; return u }()},
		{"an audio type not read: no text either", "audio/x-unknown", nil, mp3, true, audio(0)},
		{"not sniffed as events or JSON", "audio/mpeg", nil, []byte(`{"usage":{"input_tokens":1,"output_tokens":1}}`), true, audio(0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for how, chunks := range map[string][][]byte{"whole": {tc.body}, "byte by byte": bytewise(tc.body)} {
				if got := run(tc.ct, tc.h, Limits{}, chunks, tc.eos); !reflect.DeepEqual(got, tc.want) {
					t.Fatalf("%s:\n got %s\nwant %s", how, show(got), show(tc.want))
				}
			}
		})
	}
	cut := run("audio/mpeg", nil, Limits{}, [][]byte{mp3[:len(mp3)/2]}, false)
	if cut.Format != FormatAudio || cut.AudioOutputMillis < mp3Millis*4/10 || cut.AudioOutputMillis > mp3Millis*6/10 || cut.Complete {
		t.Fatalf("cut at half: %s, want about half of %d ms", show(cut), mp3Millis)
	}
}

// TestFileSearchCalls: OpenAI's Responses API bills its file search tool per call and
// counts the calls nowhere in its usage: each is an output item of type
// file_search_call, and a stream's response.file_search_call.completed events. Web
// searches and file searches in one answer are counted apart.
func TestFileSearchCalls(t *testing.T) {
	fileSearch := func(s string) string {
		s = strings.ReplaceAll(s, `"web_search_call"`, `"file_search_call"`)
		s = strings.ReplaceAll(s, "response.web_search_call.", "response.file_search_call.")
		return strings.ReplaceAll(s, `"tools":[{"type":"web_search"}]`, `"tools":[{"type":"file_search","vector_store_ids":["vs_1"]}]`)
	}
	stream := fileSearch(responsesStreamWithSearches)
	both := strings.Replace(responsesWithSearches, `"output":[`, `"output":[{"type":"file_search_call","id":"fs_9","status":"completed","queries":["web_search_call"]},`, 1)
	for _, tc := range []struct {
		name, ct, body string
		files, webs    int64
	}{
		{"responses", ctJSON, fileSearch(responsesWithSearches), 2, 0},
		{"responses stream", ctSSE, stream, 2, 0},
		{"responses stream cut after a call", ctSSE, stream[:strings.Index(stream, `{"type":"response.completed"`)-len("data: ")], 2, 0},
		{"the terminal lists more than its events", ctSSE, "data: " + `{"type":"response.file_search_call.completed","item_id":"fs_1"}` + "\n\n" + stream[strings.Index(stream, "data: "+`{"type":"response.completed"`):], 2, 0},
		{"with web searches", ctJSON, both, 1, 2},
		// Each event that lists the response's output lists all of it so far: the
		// largest list counts, not their sum.
		{"two events list the same call", ctSSE, "data: " + `{"type":"response.in_progress","response":{"object":"response","output":[{"type":"file_search_call","id":"fs_1"}],"usage":null}}` +
			"\n\ndata: " + `{"type":"response.completed","response":{"object":"response","model":"gpt-4.1","output":[{"type":"file_search_call","id":"fs_1"}],` +
			`"usage":{"input_tokens":1,"output_tokens":2,"total_tokens":3}}}` + "\n\n", 1, 0},
		{"a chat completion has no output items", ctJSON, `{"object":"chat.completion","output":[{"type":"file_search_call"}],"usage":{"prompt_tokens":1,"completion_tokens":2}}`, 0, 0},
		{"an Anthropic message has none", ctJSON, `{"type":"message","output":[{"type":"file_search_call"}],"usage":{"input_tokens":1,"output_tokens":2}}`, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cut := strings.Contains(tc.name, "cut")
			for how, chunks := range map[string][][]byte{"whole": {[]byte(tc.body)}, "byte by byte": bytewise([]byte(tc.body))} {
				got := run(tc.ct, nil, Limits{}, chunks, true)
				if got.FileSearchCalls != tc.files || got.WebSearchRequests != tc.webs || got.Complete == cut {
					t.Fatalf("%s: %s with %d file searches and %d web searches, want %d and %d, complete %v", how, show(got),
						got.FileSearchCalls, got.WebSearchRequests, tc.files, tc.webs, !cut)
				}
			}
			if ref, _ := oracleFor(tc.ct, []byte(tc.body)); ref.FileSearchCalls != tc.files || ref.WebSearchRequests != tc.webs {
				t.Fatalf("reference: %d file searches, %d web searches", ref.FileSearchCalls, ref.WebSearchRequests)
			}
		})
	}
}

// TestImageGenerationCalls: OpenAI's image generation tool in the Responses API bills
// each image apart from the usage: an output item of type image_generation_call, and
// in a stream a response.image_generation_call.in_progress event, counted once the
// generation began (a stream cut after it keeps its image).
func TestImageGenerationCalls(t *testing.T) {
	const image = `{"type":"image_generation_call","id":"ig_1","status":"completed","result":"aGVsbG8="}`
	whole := `{"id":"resp_1","object":"response","status":"completed","model":"gpt-4.1-mini","output":[` + image + `,` +
		strings.Replace(image, "ig_1", "ig_2", 1) + `,{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Two."}]}],` +
		`"tools":[{"type":"image_generation","quality":"low"}],"usage":{"input_tokens":40,"output_tokens":9,"total_tokens":49}}`
	event := func(s string) string {
		return "event: " + s[len(`{"type":"`):strings.Index(s, `",`)] + "\ndata: " + s + "\n\n"
	}
	started := event(`{"type":"response.created","response":{"id":"resp_1","object":"response","status":"in_progress","model":"gpt-4.1-mini","output":[],"usage":null}}`) +
		event(`{"type":"response.output_item.added","output_index":0,"item":{"type":"image_generation_call","id":"ig_1","status":"in_progress"}}`) +
		event(`{"type":"response.image_generation_call.in_progress","output_index":0,"item_id":"ig_1"}`) +
		event(`{"type":"response.image_generation_call.partial_image","output_index":0,"item_id":"ig_1","partial_image_index":0,"partial_image_b64":"aGk="}`)
	stream := started + event(`{"type":"response.image_generation_call.completed","output_index":0,"item_id":"ig_1"}`) +
		event(`{"type":"response.output_item.done","output_index":0,"item":`+image+`}`) +
		event(`{"type":"response.completed","response":{"id":"resp_1","object":"response","status":"completed","model":"gpt-4.1-mini","output":[`+image+`],`+
			`"usage":{"input_tokens":40,"output_tokens":9,"total_tokens":49}}}`)
	withSearch := strings.Replace(whole, `"output":[`, `"output":[{"type":"web_search_call","id":"ws_1","status":"completed"},`, 1)
	for _, tc := range []struct {
		name, ct, body string
		images, webs   int64
		complete       bool
	}{
		{"responses", ctJSON, whole, 2, 0, true},
		{"responses stream", ctSSE, stream, 1, 0, true},
		{"a stream cut while the image was made", ctSSE, started, 1, 0, false},
		{"with a web search", ctJSON, withSearch, 2, 1, true},
		{"a chat completion has no output items", ctJSON, `{"object":"chat.completion","output":[` + image + `],"usage":{"prompt_tokens":1,"completion_tokens":2}}`, 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for how, chunks := range map[string][][]byte{"whole": {[]byte(tc.body)}, "byte by byte": bytewise([]byte(tc.body))} {
				got := run(tc.ct, nil, Limits{}, chunks, true)
				if got.ImageGenerationCalls != tc.images || got.WebSearchRequests != tc.webs || got.Complete != tc.complete {
					t.Fatalf("%s: %s with %d images and %d web searches, want %d and %d, complete %v", how, show(got),
						got.ImageGenerationCalls, got.WebSearchRequests, tc.images, tc.webs, tc.complete)
				}
			}
			if ref, _ := oracleFor(tc.ct, []byte(tc.body)); ref.ImageGenerationCalls != tc.images || ref.WebSearchRequests != tc.webs {
				t.Fatalf("reference: %d images, %d web searches", ref.ImageGenerationCalls, ref.WebSearchRequests)
			}
		})
	}
}

// TestImageToolUsage: the input of the image model OpenAI's image generation tool ran, and
// its cached part, are read from a Responses answer's tool_usage.image_gen (its top level
// in a JSON body, a terminal event's response in a stream or a WebSocket session) into
// ImageToolInputTokens and ImageToolCachedInputTokens, in any chunking, agreeing with the
// reference reading; the response's own counts are not mixed with them either way, and
// nothing else under tool_usage, or elsewhere, is read as them.
func TestImageToolUsage(t *testing.T) {
	const (
		usage = `"usage":{"input_tokens":2000,"input_tokens_details":{"cached_tokens":500},"output_tokens":300,` +
			`"output_tokens_details":{"reasoning_tokens":0},"total_tokens":2300}`
		imageGen = `"image_gen":{"input_tokens":1234,"input_tokens_details":{"image_tokens":1000,"text_tokens":234},` +
			`"output_tokens":4160,"total_tokens":5394,"cached_tokens":100,"cached_tokens_details":{"cached_image_tokens":80,"cached_text_tokens":20},` +
			`"output_tokens_details":{"image_tokens":4160,"text_tokens":0}}`
		tools    = `"tool_usage":{` + imageGen + `,"web_search":{"num_requests":2}}`
		response = `{"id":"resp_1","object":"response","created_at":1760000000,"status":"completed","model":"gpt-5-2025-08-07","output":[` +
			`{"type":"image_generation_call","id":"ig_1","status":"completed","result":"aGk="},` +
			`{"type":"message","id":"msg_1","role":"assistant","content":[{"type":"output_text","text":"Done.","annotations":[]}]}],` +
			`"tools":[{"type":"image_generation"}],` + usage + `,` + tools + `}`
	)
	// The response's usage alone (its image call, its text); with gives it the tool's counts.
	plain := Usage{Model: "gpt-5-2025-08-07", InputTokens: 2000, OutputTokens: 300, CachedInputTokens: 500, ImageGenerationCalls: 1,
		Complete: true, Format: FormatOpenAIResponses, InputReported: true, OutputReported: true, TextBytes: int64(len("Done."))}
	with := func(u Usage, in, cached int64) Usage {
		u.ImageToolInputTokens, u.ImageToolCachedInputTokens = in, cached
		return u
	}
	// tooled is the response with its tool_usage replaced.
	tooled := func(toolUsage string) string { return strings.Replace(response, tools, `"tool_usage":`+toolUsage, 1) }
	streamed := func(u Usage) Usage {
		u.Format, u.TextBytes = FormatOpenAIResponsesSSE, int64(len("Done."))
		return u
	}
	event := func(doc string) string { return "event: x\ndata: " + doc + "\n\n" }
	started := event(`{"type":"response.created","response":{"id":"resp_1","object":"response","status":"in_progress","model":"gpt-5-2025-08-07","output":[],"usage":null,"tool_usage":null}}`) +
		event(`{"type":"response.image_generation_call.in_progress","output_index":0,"item_id":"ig_1"}`) +
		event(`{"type":"response.output_text.delta","output_index":1,"delta":"Done."}`)
	terminal := func(typ, resp string) string {
		return event(`{"type":"` + typ + `","sequence_number":9,"response":` + resp + `}`)
	}
	for _, tc := range []struct {
		name, ct, body string
		want           Usage
	}{
		{"responses", ctJSON, response, with(plain, 1234, 100)},
		{"tool_usage before usage", ctJSON, strings.Replace(strings.Replace(response, tools, `"x":0`, 1), usage, tools+`,`+usage, 1), with(plain, 1234, 100)},
		{"no tool_usage", ctJSON, strings.Replace(response, `,`+tools, "", 1), plain},
		{"tool_usage null", ctJSON, tooled(`null`), plain},
		{"image_gen null", ctJSON, tooled(`{"image_gen":null,"web_search":{"num_requests":2}}`), plain},
		{"families without usage: zero counts", ctJSON, tooled(`{"image_gen":{"input_tokens":0,"input_tokens_details":{"image_tokens":0,"text_tokens":0},"output_tokens":0,"total_tokens":0},"web_search":{"num_requests":0}}`), plain},
		{"cached_tokens absent", ctJSON, tooled(`{"image_gen":{"input_tokens":1234,"output_tokens":4160,"total_tokens":5394}}`), with(plain, 1234, 0)},
		{"not counts", ctJSON, tooled(`{"image_gen":{"input_tokens":"1234","cached_tokens":"100"}}`), plain},
		{"not integers or negative", ctJSON, tooled(`{"image_gen":{"input_tokens":12.5,"cached_tokens":-1},"image_gen":{"input_tokens":null,"cached_tokens":true}}`), plain},
		{"the largest of repetitions", ctJSON, tooled(`{"image_gen":{"input_tokens":1234,"input_tokens":9,"cached_tokens":7},"image_gen":{"cached_tokens":100,"input_tokens":"x"}}`), with(plain, 1234, 100)},
		{"cached more than the input: the input", ctJSON, tooled(`{"image_gen":{"input_tokens":50,"cached_tokens":80}}`), with(plain, 50, 50)},
		{"cached without the input", ctJSON, tooled(`{"image_gen":{"cached_tokens":80}}`), plain},
		// The key names the response's usage uses too: neither reads the other.
		{"its input is not the response's", ctJSON, strings.Replace(response, `"input_tokens":2000,`, "", 1), func() Usage {
			u := with(plain, 1234, 100)
			u.InputTokens, u.InputReported, u.Complete = 0, false, false
			return u
		}()},
		{"the response's input is not its", ctJSON, tooled(`{"image_gen":{"output_tokens":4160,"total_tokens":4160,"input_tokens_details":{"cached_tokens":3}}}`), plain},
		{"elsewhere than tool_usage.image_gen", ctJSON, strings.Replace(response, `,`+tools, `,"usage":{"tool_usage":{"image_gen":{"input_tokens":7}}},"image_gen":{"input_tokens":7},`+
			`"response":{`+tools+`},"tool_usage":{"web_search":{"input_tokens":7},"image_gen":[{"input_tokens":7}],"image_gen":{"details":{"input_tokens":7}}}`, 1), plain},
		{"a chat completion's is not read", ctJSON, `{"object":"chat.completion","model":"gpt-4o",` + tools + `,"usage":{"prompt_tokens":1,"completion_tokens":2}}`,
			Usage{Model: "gpt-4o", InputTokens: 1, OutputTokens: 2, Complete: true, Format: FormatOpenAIChat, InputReported: true, OutputReported: true}},
		{"an Anthropic message's is not read", ctJSON, `{"type":"message","model":"claude-sonnet-4-5",` + tools + `,"usage":{"input_tokens":1,"output_tokens":2}}`,
			Usage{Model: "claude-sonnet-4-5", InputTokens: 1, OutputTokens: 2, Complete: true, Format: FormatAnthropicMessages, InputReported: true, OutputReported: true}},

		{"responses stream", ctSSE, started + terminal("response.completed", response), streamed(with(plain, 1234, 100))},
		{"an incomplete response", ctSSE, started + terminal("response.incomplete", strings.Replace(response, `"completed"`, `"incomplete"`, 1)), streamed(with(plain, 1234, 100))},
		{"a failed response", ctSSE, started + terminal("response.failed", tooled(`{"image_gen":{"input_tokens":300}}`)), streamed(with(plain, 300, 0))},
		{"stream without tool_usage", ctSSE, started + terminal("response.completed", strings.Replace(response, `,`+tools, "", 1)), streamed(plain)},
		{"stream with tool_usage null", ctSSE, started + terminal("response.completed", tooled(`null`)), streamed(plain)},
		{"stream, not counts", ctSSE, started + terminal("response.completed", tooled(`{"image_gen":{"input_tokens":"1234","cached_tokens":"100"}}`)), streamed(plain)},
		// Each count is the largest any event reported, as the usage's are.
		{"a later, smaller report", ctSSE, started + terminal("response.in_progress", tooled(`{"image_gen":{"input_tokens":2000,"cached_tokens":10}}`)) +
			terminal("response.completed", response), streamed(with(plain, 2000, 100))},
		{"an event's own tool_usage is not the response's", ctSSE, started + event(`{"type":"response.completed",`+tools+`,"response":`+
			strings.Replace(response, `,`+tools, "", 1)+`}`), streamed(plain)},
		{"stream: its input is not the response's", ctSSE, started + terminal("response.completed", strings.Replace(response, `"input_tokens":2000,`, "", 1)), func() Usage {
			u := streamed(with(plain, 1234, 100))
			u.InputTokens, u.InputReported, u.Complete = 0, false, false
			return u
		}()},
		{"a stream cut before its terminal event", ctSSE, started, streamed(Usage{Model: "gpt-5-2025-08-07", ImageGenerationCalls: 1})},
		{"an Anthropic event's response is not read", ctSSE, event(`{"type":"message_start","message":{"model":"claude-sonnet-4-5","usage":{"input_tokens":10,"output_tokens":1}},"response":{`+tools+`}}`) +
			event(`{"type":"message_delta","usage":{"output_tokens":20}}`),
			Usage{Model: "claude-sonnet-4-5", InputTokens: 10, OutputTokens: 20, Complete: true, Format: FormatAnthropicSSE, InputReported: true, OutputReported: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkSplits(t, tc.ct, nil, []byte(tc.body), tc.want)
			if ref, ok := oracleFor(tc.ct, []byte(tc.body)); !ok || !reflect.DeepEqual(ref, tc.want) {
				t.Fatalf("reference:\n got %s\nwant %s", show(ref), show(tc.want))
			}
		})
	}
	// The Responses API's WebSocket mode: the terminal event's response, as a stream's.
	s := NewResponsesSession()
	s.Event([]byte(`{"type":"response.created","response":{"id":"resp_1","model":"gpt-5-2025-08-07","status":"in_progress"}}`))
	u, ev := s.Event([]byte(`{"type":"response.completed","sequence_number":9,"response":` + response + `}`))
	want := streamed(with(plain, 1234, 100))
	want.TextBytes = 0 // the terminal event's alone: its response's output is no delta
	if ev != ResponseEnded || !reflect.DeepEqual(u, want) {
		t.Fatalf("WebSocket: %s", show(u))
	}
}

// TestContainerIDs: the containers a response's code tools ran in, which their providers
// bill by the time each lives, are read where OpenAI's Responses API (code interpreter,
// hosted shell) and Anthropic's Messages API (code execution) name them, in any
// chunking, and agree with the reference reading; the same key in a tool's arguments,
// or in another API's answer, names no container.
func TestContainerIDs(t *testing.T) {
	const call = `{"type":"code_interpreter_call","id":"ci_1","status":"completed","code":"print(1)","container_id":"cntr_a1","outputs":null}`
	shell := `{"type":"shell_call","id":"sh_1","call_id":"c1","status":"completed","action":{"commands":["ls"]},` +
		`"environment":{"type":"container_reference","container_id":"cntr_b2"}}`
	text := `{"type":"message","role":"assistant","content":[{"type":"output_text","text":"1","annotations":[` +
		`{"type":"container_file_citation","container_id":"cntr_zz","file_id":"cfile_1"}]}]}`
	usage := `"usage":{"input_tokens":40,"output_tokens":9,"total_tokens":49}`
	responses := `{"id":"resp_1","object":"response","status":"completed","model":"gpt-5","output":[` + call + `,` + shell + `,` + text + `],` + usage + `}`
	event := func(s string) string {
		return "event: " + s[len(`{"type":"`):strings.Index(s, `",`)] + "\ndata: " + s + "\n\n"
	}
	started := event(`{"type":"response.created","response":{"id":"resp_1","object":"response","status":"in_progress","model":"gpt-5","output":[],"usage":null}}`) +
		event(`{"type":"response.output_item.added","output_index":0,"item":{"type":"code_interpreter_call","id":"ci_1","status":"in_progress","container_id":"cntr_a1"}}`)
	stream := started + event(`{"type":"response.output_item.done","output_index":0,"item":`+call+`}`) +
		event(`{"type":"response.output_item.done","output_index":1,"item":`+shell+`}`) +
		event(`{"type":"response.completed","response":{"id":"resp_1","object":"response","status":"completed","model":"gpt-5","output":[`+call+`,`+shell+`],`+usage+`}}`)
	message := `{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"tool_use","id":"tu_1","name":"f",` +
		`"input":{"container_id":"not_a_container","container":{"id":"nor_this"}}},{"type":"text","text":"Done."}],` +
		`"container":{"id":"container_011abc","expires_at":"2026-11-29T20:00:00Z"},"stop_reason":"end_turn",` +
		`"usage":{"input_tokens":12,"output_tokens":5}}`
	anthropicStream := "event: message_start\ndata: " + `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"container":null,"usage":{"input_tokens":12,"output_tokens":1}}}` + "\n\n" +
		"event: content_block_start\ndata: " + `{"type":"content_block_start","index":0,"content_block":{"type":"server_tool_use","id":"srvtoolu_1","name":"bash_code_execution","input":{}}}` + "\n\n" +
		"event: message_delta\ndata: " + `{"type":"message_delta","delta":{"stop_reason":"end_turn","container":{"id":"container_011abc","expires_at":"2026-11-29T20:00:00Z"}},"usage":{"output_tokens":5}}` + "\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	many := `{"id":"resp_1","object":"response","status":"completed","model":"gpt-5","output":[`
	for i := range 6 {
		many += strings.Replace(call, "cntr_a1", fmt.Sprintf("cntr_%d", i%5), 1) + ","
	}
	many += text + `],` + usage + `}`
	for _, tc := range []struct {
		name, ct, body string
		want           []string
	}{
		{"responses", ctJSON, responses, []string{"cntr_a1", "cntr_b2"}},
		{"responses stream", ctSSE, stream, []string{"cntr_a1", "cntr_b2"}},
		{"a stream cut once the call began", ctSSE, started, []string{"cntr_a1"}},
		{"at most four", ctJSON, many, []string{"cntr_0", "cntr_1", "cntr_2", "cntr_3"}},
		{"anthropic message", ctJSON, message, []string{"container_011abc"}},
		{"anthropic stream", ctSSE, anthropicStream, []string{"container_011abc"}},
		{"a chat completion has no containers", ctJSON, `{"object":"chat.completion","output":[` + call + `],"container":{"id":"x"},"usage":{"prompt_tokens":1,"completion_tokens":2}}`, nil},
		{"none", ctJSON, strings.Replace(responses, "container_id", "container_ref", -1), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for how, chunks := range map[string][][]byte{"whole": {[]byte(tc.body)}, "byte by byte": bytewise([]byte(tc.body))} {
				if got := run(tc.ct, nil, Limits{}, chunks, true); !slices.Equal(got.ContainerIDs, tc.want) {
					t.Fatalf("%s: containers %q, want %q (%s)", how, got.ContainerIDs, tc.want, show(got))
				}
			}
			if ref, _ := oracleFor(tc.ct, []byte(tc.body)); !slices.Equal(ref.ContainerIDs, tc.want) {
				t.Fatalf("reference: containers %q", ref.ContainerIDs)
			}
		})
	}
}

// Anthropic's usage.iterations[] lists a request's sampling iterations; its "message"
// entries are in the top-level counts, but a "compaction" entry (the server-side summary
// of a closed context) and an "advisor_message" one (an advisor model's sub-inference) are
// not, and are billed: a compaction's counts are added to the top level's, an advisor's
// summed apart (billed at the advisor model's prices). An entry whose counts come before
// its type is taken as apart (the dearer reading), with the top level's. Streamed,
// message_delta's usage is cumulative: its last iterations count once.
func TestAnthropicIterations(t *testing.T) {
	iterations := `"iterations":[{"type":"message","input_tokens":23000,"output_tokens":400},` +
		`{"type":"compaction","input_tokens":180000,"output_tokens":3500,"cache_read_input_tokens":1000,"cache_creation_input_tokens":0},` +
		`{"type":"message","input_tokens":2000,"output_tokens":600},` +
		`{"type":"advisor_message","model":"claude-opus-4-8","input_tokens":60000,"output_tokens":1600,"cache_creation_input_tokens":500}]`
	body := `{"type":"message","model":"claude-opus-4-8","content":[{"type":"text","text":"x"}],` +
		`"usage":{"input_tokens":25000,"output_tokens":1000,"cache_read_input_tokens":0,"cache_creation_input_tokens":0,` + iterations + `}}`
	want := Usage{Model: "claude-opus-4-8", InputTokens: 25000 + 180000 + 1000, OutputTokens: 1000 + 3500,
		CachedInputTokens: 1000, Complete: true, Format: FormatAnthropicMessages,
		AdvisorInputTokens: 60000 + 500, AdvisorOutputTokens: 1600, AdvisorCacheCreationInputTokens: 500,
		InputReported: true, OutputReported: true, TextBytes: 1}
	checkSplits(t, ctJSON, nil, []byte(body), want)
	if ref, ok := oracleFor(ctJSON, []byte(body)); !ok || !reflect.DeepEqual(ref, want) {
		t.Fatalf("the reference reads %s", show(ref))
	}
	// The type after the counts: taken as apart, even a message entry.
	late := `{"type":"message","usage":{"input_tokens":10,"output_tokens":2,"iterations":[{"input_tokens":10,"output_tokens":2,"type":"message"}]}}`
	if got := run(ctJSON, nil, Limits{}, [][]byte{[]byte(late)}, true); got.InputTokens != 20 || got.OutputTokens != 4 {
		t.Fatalf("counts before the type: %s", show(got))
	}
	lateAdvisor := strings.Replace(late, `"type":"message"}`, `"type":"advisor_message"}`, 1)
	if got := run(ctJSON, nil, Limits{}, [][]byte{[]byte(lateAdvisor)}, true); got.InputTokens != 20 || got.OutputTokens != 4 || got.AdvisorInputTokens != 0 {
		t.Fatalf("an advisor's counts before its type: %s", show(got))
	}
	// Streamed: an advisor's entries in message_delta's cumulative list, its cache reads.
	advised := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-haiku-4-5\",\"usage\":{\"input_tokens\":900,\"output_tokens\":1}}}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":80,\"iterations\":[{\"type\":\"message\",\"input_tokens\":400,\"output_tokens\":30},{\"type\":\"advisor_message\",\"model\":\"claude-opus-4-7\",\"input_tokens\":700,\"output_tokens\":200,\"cache_read_input_tokens\":300}]}}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":100,\"iterations\":[{\"type\":\"message\",\"input_tokens\":400,\"output_tokens\":30},{\"type\":\"advisor_message\",\"model\":\"claude-opus-4-7\",\"input_tokens\":700,\"output_tokens\":200,\"cache_read_input_tokens\":300},{\"type\":\"message\",\"input_tokens\":500,\"output_tokens\":70}]}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	wantAdvised := Usage{Model: "claude-haiku-4-5", InputTokens: 900, OutputTokens: 100, Complete: true, Format: FormatAnthropicSSE,
		AdvisorInputTokens: 1000, AdvisorOutputTokens: 200, AdvisorCachedInputTokens: 300, InputReported: true, OutputReported: true}
	checkSplits(t, ctSSE, nil, []byte(advised), wantAdvised)
	if ref, ok := oracleFor(ctSSE, []byte(advised)); !ok || !reflect.DeepEqual(ref, wantAdvised) {
		t.Fatalf("the reference reads %s", show(ref))
	}
	// Message entries alone add nothing; null iterations neither.
	for _, b := range []string{
		`{"type":"message","usage":{"input_tokens":10,"output_tokens":2,"iterations":[{"type":"message","input_tokens":10,"output_tokens":2},{"type":"fallback_message","input_tokens":5}]}}`,
		`{"type":"message","usage":{"input_tokens":10,"output_tokens":2,"iterations":null}}`,
		`{"type":"message","usage":{"input_tokens":10,"output_tokens":2},"metadata":{"iterations":[{"type":"compaction","input_tokens":99}]}}`,
	} {
		if got := run(ctJSON, nil, Limits{}, [][]byte{[]byte(b)}, true); got.InputTokens != 10 || got.OutputTokens != 2 {
			t.Fatalf("%s: %s", b, show(got))
		}
	}
	// Streamed: message_delta's cumulative usage, its iterations growing; the last counts.
	stream := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-opus-4-8\",\"usage\":{\"input_tokens\":25000,\"output_tokens\":1}}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":500,\"iterations\":[{\"type\":\"compaction\",\"input_tokens\":180000,\"output_tokens\":3500}]}}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":1000,\"iterations\":[{\"type\":\"compaction\",\"input_tokens\":180000,\"output_tokens\":3500},{\"type\":\"message\",\"input_tokens\":25000,\"output_tokens\":1000}]}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	wantStream := Usage{Model: "claude-opus-4-8", InputTokens: 205000, OutputTokens: 4500, Complete: true, Format: FormatAnthropicSSE,
		InputReported: true, OutputReported: true, TextBytes: 1}
	checkSplits(t, ctSSE, nil, []byte(stream), wantStream)
	if ref, ok := oracleFor(ctSSE, []byte(stream)); !ok || !reflect.DeepEqual(ref, wantStream) {
		t.Fatalf("the reference reads %s", show(ref))
	}
}

// A compaction's summary is output Anthropic bills (its iteration's output_tokens),
// streamed as compaction_delta content deltas before the last message_delta reports the
// iteration: a stream cut after it counts the summary's text, from which its output is
// estimated, as a text block's. Its opaque encrypted_content is no text.
func TestAnthropicCompactionSummaryIsOutputText(t *testing.T) {
	summary := strings.Repeat("The user asked for a refactor of the billing module. ", 40)
	stream := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-opus-4-8\",\"usage\":{\"input_tokens\":25000,\"output_tokens\":1}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"compaction\",\"content\":null,\"encrypted_content\":null}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"compaction_delta\",\"content\":\"" + summary + "\",\"encrypted_content\":\"c2VjcmV0\"}}\n\n" +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"Done.\"}}\n\n"
	want := Usage{Model: "claude-opus-4-8", InputTokens: 25000, OutputTokens: 1, Format: FormatAnthropicSSE,
		InputReported: true, OutputReported: true, TextBytes: int64(len(summary) + len("Done."))}
	checkSplits(t, ctSSE, nil, []byte(stream), want)
	if ref, ok := oracleFor(ctSSE, []byte(stream)); !ok || ref.TextBytes != want.TextBytes {
		t.Fatalf("the reference reads %s", show(ref))
	}
}

// An entry of Anthropic's usage.iterations[] splits its cache writes by lifetime as the
// top level does (cache_creation.ephemeral_1h_input_tokens): a compaction's writes made
// for an hour are a part of the request's one-hour writes, an advisor's (a tool whose
// caching's ttl is "1h") a part of the advisor's; a message entry's, in the top level's
// already, add nothing. Each never more than its writes.
func TestAnthropicIterationsOneHourCacheWrites(t *testing.T) {
	iterations := `"iterations":[{"type":"message","input_tokens":100,"output_tokens":10,"cache_creation_input_tokens":50,"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":50}},` +
		`{"type":"compaction","input_tokens":1000,"output_tokens":300,"cache_read_input_tokens":0,"cache_creation_input_tokens":4000,"cache_creation":{"ephemeral_5m_input_tokens":1000,"ephemeral_1h_input_tokens":3000}},` +
		`{"type":"advisor_message","model":"claude-opus-4-7","input_tokens":2000,"output_tokens":700,"cache_read_input_tokens":0,"cache_creation_input_tokens":9000,"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":9000}}]`
	body := `{"type":"message","model":"claude-haiku-4-5","content":[{"type":"text","text":"x"}],` +
		`"usage":{"input_tokens":100,"output_tokens":10,"cache_read_input_tokens":0,"cache_creation_input_tokens":50,"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":50},` + iterations + `}}`
	want := Usage{Model: "claude-haiku-4-5", InputTokens: 100 + 50 + 1000 + 4000, OutputTokens: 10 + 300,
		CacheCreationInputTokens: 50 + 4000, CacheCreation1hInputTokens: 50 + 3000, Complete: true, Format: FormatAnthropicMessages,
		AdvisorInputTokens: 2000 + 9000, AdvisorOutputTokens: 700, AdvisorCacheCreationInputTokens: 9000, AdvisorCacheCreation1hInputTokens: 9000,
		InputReported: true, OutputReported: true, TextBytes: 1}
	checkSplits(t, ctJSON, nil, []byte(body), want)
	if ref, ok := oracleFor(ctJSON, []byte(body)); !ok || !reflect.DeepEqual(ref, want) {
		t.Fatalf("the reference reads %s", show(ref))
	}
	// Streamed: message_delta's cumulative list, the last counting once.
	stream := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-haiku-4-5\",\"usage\":{\"input_tokens\":100,\"output_tokens\":1}}}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":5," + iterations + "}}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":10," + iterations + "}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	wantStream := Usage{Model: "claude-haiku-4-5", InputTokens: 100 + 1000 + 4000, OutputTokens: 10 + 300,
		CacheCreationInputTokens: 4000, CacheCreation1hInputTokens: 3000, Complete: true, Format: FormatAnthropicSSE,
		AdvisorInputTokens: 2000 + 9000, AdvisorOutputTokens: 700, AdvisorCacheCreationInputTokens: 9000, AdvisorCacheCreation1hInputTokens: 9000,
		InputReported: true, OutputReported: true}
	checkSplits(t, ctSSE, nil, []byte(stream), wantStream)
	if ref, ok := oracleFor(ctSSE, []byte(stream)); !ok || !reflect.DeepEqual(ref, wantStream) {
		t.Fatalf("the reference reads %s", show(ref))
	}
	// A part above its writes is read as the writes.
	over := `{"type":"message","usage":{"input_tokens":10,"output_tokens":2,"iterations":[{"type":"compaction","input_tokens":1,"cache_creation_input_tokens":5,"cache_creation":{"ephemeral_1h_input_tokens":9}},` +
		`{"type":"advisor_message","input_tokens":1,"cache_creation_input_tokens":6,"cache_creation":{"ephemeral_1h_input_tokens":8}}]}}`
	if got := run(ctJSON, nil, Limits{}, [][]byte{[]byte(over)}, true); got.CacheCreation1hInputTokens != 5 || got.AdvisorCacheCreation1hInputTokens != 6 {
		t.Fatalf("parts above the writes: %s", show(got))
	}
}

// Anthropic says where a request's inference ran (usage.inference_geo): a geography
// ("us", US-only inference) costs 1.1 times the price (Usage.Regional), "global" does not.
// The last one counts, of the message, of message_start's message or of message_delta.
func TestAnthropicInferenceGeo(t *testing.T) {
	for _, tc := range []struct {
		name, ct, body string
		want           bool
	}{
		{"US-only", ctJSON, `{"type":"message","usage":{"input_tokens":1,"output_tokens":2,"inference_geo":"us"}}`, true},
		{"global", ctJSON, `{"type":"message","usage":{"input_tokens":1,"output_tokens":2,"inference_geo":"global"}}`, false},
		{"not said", ctJSON, `{"type":"message","usage":{"input_tokens":1,"output_tokens":2,"inference_geo":null}}`, false},
		{"the last one", ctJSON, `{"type":"message","usage":{"inference_geo":"us","input_tokens":1,"output_tokens":2,"inference_geo":"global"}}`, false},
		{"elsewhere is not the request's", ctJSON, `{"type":"message","inference_geo":"us","metadata":{"usage":{"inference_geo":"us"}},"usage":{"input_tokens":1,"output_tokens":2}}`, false},
		{"not Anthropic's", ctJSON, `{"object":"chat.completion","usage":{"prompt_tokens":1,"completion_tokens":2,"inference_geo":"us"}}`, false},
		{"streamed, in message_start", ctSSE, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-opus-5\",\"usage\":{\"input_tokens\":1,\"output_tokens\":1,\"inference_geo\":\"us\"}}}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":2}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := []byte(tc.body)
			got := run(tc.ct, nil, Limits{}, bytewise(body), true)
			if got.Regional != tc.want || !got.Complete {
				t.Fatalf("%s", show(got))
			}
			ref, _ := oracleFor(tc.ct, body)
			if !reflect.DeepEqual(got, ref) {
				t.Fatalf("differs from the reference:\n got %s\n ref %s", show(got), show(ref))
			}
		})
	}
}

// The Gemini API says the tier it served a request at in a response header alone
// (HeaderGeminiServiceTier): "priority" is charged as the fast tier, whatever the body.
// Gemini counts the results of its tools given back to the model (URL context, code
// execution, Search) apart from the prompt, in usageMetadata.toolUsePromptTokenCount,
// and bills them as input: read into the input, at the top level alone, streamed or not.
func TestGeminiToolUsePromptTokens(t *testing.T) {
	body := `{"candidates":[{"content":{"parts":[{"text":"x"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":100,"candidatesTokenCount":20,` +
		`"toolUsePromptTokenCount":3000,"thoughtsTokenCount":5,"totalTokenCount":3125},"modelVersion":"gemini-2.5-flash"}`
	want := Usage{Model: "gemini-2.5-flash", InputTokens: 3100, OutputTokens: 25, Complete: true, Format: FormatGemini, InputReported: true, OutputReported: true, TextBytes: 1}
	checkSplits(t, ctJSON, nil, []byte(body), want)
	if got, ref := run(ctJSON, nil, Limits{}, [][]byte{[]byte(body)}, true), oracleJSON([]byte(body), Limits{}); !reflect.DeepEqual(got, ref) {
		t.Fatalf("differs from the reference:\n got %s\n ref %s", show(got), show(ref))
	}
	stream := "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"x\"}]}}],\"usageMetadata\":{\"promptTokenCount\":100,\"toolUsePromptTokenCount\":3000}}\r\n\r\n" +
		"data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"y\"}]},\"finishReason\":\"STOP\"}],\"usageMetadata\":{\"promptTokenCount\":100,\"candidatesTokenCount\":20,\"toolUsePromptTokenCount\":3000,\"thoughtsTokenCount\":5}}\r\n\r\n"
	want.Format, want.TextBytes, want.Model = FormatGeminiSSE, 2, ""
	checkSplits(t, ctSSE, nil, []byte(stream), want)
	// Not the top level's: not the request's.
	nested := `{"candidates":[{"content":{"parts":[{"text":"x"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":100,"candidatesTokenCount":20},` +
		`"message":{"usage":{"toolUsePromptTokenCount":3000}}}`
	if got := run(ctJSON, nil, Limits{}, [][]byte{[]byte(nested)}, true); got.InputTokens != 100 {
		t.Fatalf("a nested count was read: %s", show(got))
	}
}

// Vertex AI's stream carries, in every chunk before its last, a usageMetadata of its
// traffic type alone ({"trafficType": "ON_DEMAND_PRIORITY"} at its priority tier), no
// count; the last chunk carries the counts. A priority stream cut before its last chunk
// (the client left, the connection broke) is still one Vertex served at its priority
// tier, and its estimate is charged at that tier's price, as the whole stream is: before,
// such a chunk was no Gemini document at all and the cut stream was charged the standard
// price, half of what Vertex bills. Its model is the chunks' modelVersion. Streamed as a
// JSON array (without alt=sse) alike, and as the reference reads it.
func TestVertexTrafficTypeOfAChunkWithoutCounts(t *testing.T) {
	chunk := func(text, traffic string) string {
		return `{"candidates":[{"content":{"role":"model","parts":[{"text":"` + text + `"}]}}],"usageMetadata":{"trafficType":"` + traffic + `"},` +
			`"modelVersion":"gemini-2.5-flash","createTime":"2026-10-09T02:36:52.821265Z","responseId":"RFPIapGQMtKCidsPmcai6AM"}`
	}
	last := func(traffic string) string {
		return `{"candidates":[{"content":{"role":"model","parts":[{"text":"paid."}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":12,` +
			`"candidatesTokenCount":3,"totalTokenCount":15,"trafficType":"` + traffic + `"},"modelVersion":"gemini-2.5-flash"}`
	}
	for _, tc := range []struct {
		traffic string
		want    pricecatalog.Tier
	}{{"ON_DEMAND_PRIORITY", pricecatalog.Fast}, {"ON_DEMAND", pricecatalog.Standard}} {
		sse := "data: " + chunk("Tolls ", tc.traffic) + "\r\n\r\ndata: " + chunk("are ", tc.traffic) + "\r\n\r\n"
		got := run(ctSSE, nil, Limits{}, [][]byte{[]byte(sse)}, false)
		if got.Tier != tc.want || got.InputReported || got.OutputReported || got.Complete || got.Model != "gemini-2.5-flash" || got.TextBytes != 10 {
			t.Fatalf("%s, cut before its last chunk: %s", tc.traffic, show(got))
		}
		if ref := oracleSSE([]byte(sse), Limits{}); !reflect.DeepEqual(got, ref) {
			t.Fatalf("%s, against the reference:\n got %s\n ref %s", tc.traffic, show(got), show(ref))
		}
		array := "[" + chunk("Tolls ", tc.traffic) + "\r\n,\r\n" + chunk("are ", tc.traffic)
		if got := run(ctJSON, nil, Limits{}, [][]byte{[]byte(array)}, false); got.Tier != tc.want || got.InputReported || got.TextBytes != 10 {
			t.Fatalf("%s, a JSON array cut before its last element: %s", tc.traffic, show(got))
		}
		// Whole, as before: its last chunk's counts, complete, at the tier it says.
		whole := sse + "data: " + last(tc.traffic) + "\r\n\r\n"
		checkSplits(t, ctSSE, nil, []byte(whole), Usage{Model: "gemini-2.5-flash", InputTokens: 12, OutputTokens: 3, Complete: true,
			Format: FormatGeminiSSE, Tier: tc.want, InputReported: true, OutputReported: true, TextBytes: 15})
	}
}

// A prompt Gemini blocks is answered with no candidate: one document, its
// promptFeedback.blockReason and the prompt's usage (Gemini bills the prompt), the whole
// answer. Streamed, it is that stream's one chunk, and its last: complete, as the same
// answer not streamed is (TestGemini), in an event stream and in a JSON array alike
// (before, a streamed blocked prompt was settled incomplete, though nothing was missing).
// Cut before its end it is not.
func TestGeminiBlockedPromptStreamIsComplete(t *testing.T) {
	const chunk = `{"promptFeedback":{"blockReason":"PROHIBITED_CONTENT"},"usageMetadata":{"promptTokenCount":791,"totalTokenCount":791,` +
		`"promptTokensDetails":[{"modality":"TEXT","tokenCount":791}],"serviceTier":"standard"},"modelVersion":"gemini-2.5-flash","responseId":"oToLapbGN7zSz7IPloaY2Ak"}`
	want := Usage{Model: "gemini-2.5-flash", InputTokens: 791, Complete: true, Format: FormatGeminiSSE, InputReported: true, OutputReported: true,
		AudioInputReported: true}
	sse := []byte("data: " + chunk + "\r\n\r\n")
	checkSplits(t, ctSSE, nil, sse, want)
	if ref := oracleSSE(sse, Limits{}); !reflect.DeepEqual(ref, want) {
		t.Fatalf("the reference reads %s", show(ref))
	}
	want.Format = FormatGeminiJSONStream
	checkSplits(t, ctJSON, nil, []byte("[\r\n"+chunk+"\r\n]"), want)
	// A blockReason that is no string says nothing; cut, the stream is not complete.
	if got := run(ctSSE, nil, Limits{}, [][]byte{[]byte(strings.Replace(string(sse), `"PROHIBITED_CONTENT"`, `null`, 1))}, true); got.Complete {
		t.Fatalf("a blockReason of null: %s", show(got))
	}
	if got := run(ctSSE, nil, Limits{}, [][]byte{sse[:len(sse)-10]}, false); got.Complete {
		t.Fatalf("cut: %s", show(got))
	}
}

func TestGeminiServiceTierHeader(t *testing.T) {
	body := []byte(`{"candidates":[{"content":{"parts":[{"text":"x"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":1,"candidatesTokenCount":2}}`)
	for _, tc := range []struct {
		header string
		want   pricecatalog.Tier
	}{{"priority", pricecatalog.Fast}, {"standard", pricecatalog.Standard}, {"", pricecatalog.Standard}, {"PRIORITY", pricecatalog.Standard}} {
		e := New(ctJSON, map[string]string{HeaderGeminiServiceTier: tc.header}, Limits{})
		e.Write(body)
		if got := e.Finish(true); got.Tier != tc.want || !got.Complete || got.InputTokens != 1 {
			t.Errorf("%s %q: %s, want tier %v", HeaderGeminiServiceTier, tc.header, show(got), tc.want)
		}
	}
	// A body read no further (an encoding not supported) keeps the header's tier too.
	e := New(ctJSON, map[string]string{HeaderGeminiServiceTier: "priority", "content-encoding": "zstd"}, Limits{})
	e.Write(body)
	if got := e.Finish(true); got.Tier != pricecatalog.Fast || got.Format != FormatUnsupportedEncoding {
		t.Errorf("unsupported encoding: %s", show(got))
	}
}

// Amazon Bedrock's InvokeModel says the tier it served a request at in response headers
// alone: X-Amzn-Bedrock-Service-Tier (HeaderBedrockServiceTier) "priority" is the fast
// tier, the others ("default", "flex", "reserved") cost no more than standard;
// X-Amzn-Bedrock-PerformanceConfig-Latency (HeaderBedrockLatency) "optimized" the
// latency-optimized one, "standard" (its quota spent) none. Priority, dearer, wins. The
// body does not change it: the model's own (with the counts of its headers), a Claude
// model's, a stream's, one read no further.
func TestBedrockTierHeaders(t *testing.T) {
	body := []byte(`{"generation":"x","prompt_token_count":1,"generation_token_count":2,"stop_reason":"stop"}`)
	for _, tc := range []struct {
		tier, latency string
		want          pricecatalog.Tier
	}{
		{"priority", "", pricecatalog.Fast}, {"default", "", pricecatalog.Standard}, {"flex", "", pricecatalog.Standard},
		{"reserved", "", pricecatalog.Standard}, {"Priority", "", pricecatalog.Standard},
		{"", "optimized", pricecatalog.LatencyOptimized}, {"", "standard", pricecatalog.Standard}, {"", "OPTIMIZED", pricecatalog.Standard},
		{"priority", "optimized", pricecatalog.Fast}, {"default", "optimized", pricecatalog.LatencyOptimized}, {"", "", pricecatalog.Standard},
	} {
		e := New(ctJSON, map[string]string{HeaderBedrockServiceTier: tc.tier, HeaderBedrockLatency: tc.latency,
			headerBedrockInput: "11", headerBedrockOutput: "22"}, Limits{})
		e.Write(body)
		if got := e.Finish(true); got.Tier != tc.want || !got.Complete || got.InputTokens != 11 || got.OutputTokens != 22 {
			t.Errorf("%s %q, %s %q: %s, want tier %v", HeaderBedrockServiceTier, tc.tier, HeaderBedrockLatency, tc.latency, show(got), tc.want)
		}
	}
	claude := []byte(`{"type":"message","model":"claude-3-5-haiku-20241022","content":[{"type":"text","text":"x"}],"usage":{"input_tokens":3,"output_tokens":4}}`)
	stream := frame(t, "event", "chunk", `{"bytes":"`+base64.StdEncoding.EncodeToString([]byte(`{"type":"message_start","message":{"model":"claude-haiku-4-5","usage":{"input_tokens":3,"output_tokens":1}}}`))+`"}`)
	for _, tc := range []struct {
		name, ct string
		headers  map[string]string
		body     []byte
		want     pricecatalog.Tier
		format   string
	}{
		{"a Claude body", ctJSON, map[string]string{HeaderBedrockLatency: "optimized"}, claude, pricecatalog.LatencyOptimized, FormatAnthropicMessages},
		{"a stream", ctEventStream, map[string]string{HeaderBedrockServiceTier: "priority"}, stream, pricecatalog.Fast, FormatAnthropicSSE},
		{"an encoding not supported", ctJSON, map[string]string{HeaderBedrockLatency: "optimized", "content-encoding": "zstd"}, body,
			pricecatalog.LatencyOptimized, FormatUnsupportedEncoding},
	} {
		e := New(tc.ct, tc.headers, Limits{})
		e.Write(tc.body)
		if got := e.Finish(false); got.Tier != tc.want || got.Format != tc.format {
			t.Errorf("%s: %s, want tier %v", tc.name, show(got), tc.want)
		}
	}
}

// TestExtractorSize: an Extractor is what each stream the gateway holds keeps besides
// its buffers (issue 19's goal: under 64 KiB an idle stream). It stays in the 1,792-byte
// size class; a field that pushes it to the next (2,048) costs every idle stream 256
// bytes: reorder the small fields first. What the heap gives it is measured, not its
// size: an object with pointers above 512 bytes carries the allocator's 8-byte header,
// so the struct itself may take 1,784 bytes of the class (a check of unsafe.Sizeof
// against 1,792 let a 1,792-byte Extractor through, which took 2,048).
func TestExtractorSize(t *testing.T) {
	// The heap's bytes per Extractor, the least of three rounds (a stray allocation of
	// the runtime's can only add).
	const n = 10_000
	perExtractor := uint64(math.MaxUint64)
	for range 3 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range n {
			extractorSink = new(Extractor)
		}
		runtime.ReadMemStats(&after)
		perExtractor = min(perExtractor, (after.TotalAlloc-before.TotalAlloc)/n)
	}
	if perExtractor > 1792 {
		t.Fatalf("an Extractor (%d bytes) takes %d bytes of the heap, beyond the 1,792-byte size class", unsafe.Sizeof(Extractor{}), perExtractor)
	}
}

// extractorSink keeps TestExtractorSize's allocations on the heap.
var extractorSink *Extractor

// TestAudioTokens: the audio parts of the counts, which some models price above text,
// are read where each shape reports them, in any chunking, and agree with the reference
// reading; a usage without them leaves the split unknown (not 0). So is the audio part of
// Gemini's cached count (cacheTokensDetails), which some models price above cached text.
// An OpenAI chat answer in audio (gpt-4o-audio-preview, modalities ["audio"]) carries
// its text as the audio's transcript, choices[].delta.audio.transcript streamed and
// choices[].message.audio.transcript not, and leaves content null: the transcript is
// its output text, so that an answer cut before its usage (a voice app's user
// interrupts it) is estimated from it and not charged nothing (its audio's base64 data
// is not text: its duration, TestChatAudioAnswerCountsItsAudio). Before 2026-12-02 such a
// stream counted 0 bytes.
func TestChatAudioAnswerCountsItsTranscript(t *testing.T) {
	const transcript = "toll roads are paid "
	var b strings.Builder
	b.WriteString(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-audio-preview-2024-12-17","choices":[{"index":0,"delta":{"role":"assistant","content":null,"refusal":null},"finish_reason":null}],"usage":null}` + "\n\n")
	for range 50 {
		b.WriteString(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-audio-preview-2024-12-17","choices":[{"index":0,"delta":{"audio":{"id":"audio_1","transcript":"` + transcript + `"}},"finish_reason":null}],"usage":null}` + "\n\n")
		b.WriteString(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-audio-preview-2024-12-17","choices":[{"index":0,"delta":{"audio":{"data":"` +
			strings.Repeat("UklGRiQAAABXQVZFZm10IBAAAAABAAEAgD4AAAB9AAACABAAZGF0YQAAAAA", 40) + `"}},"finish_reason":null}],"usage":null}` + "\n\n")
	}
	u := run("text/event-stream", nil, Limits{}, [][]byte{[]byte(b.String())}, false) // cut: the client left
	if want := int64(50 * len(transcript)); u.TextBytes != want || u.OutputReported || u.Complete {
		t.Fatalf("a cut audio chat stream counted %d bytes of output text (format %s, output reported %v, complete %v), want its transcript's %d",
			u.TextBytes, u.Format, u.OutputReported, u.Complete, want)
	}
	// Not streamed, cut before its usage.
	body := `{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o-audio-preview-2024-12-17","choices":[{"index":0,"message":{"role":"assistant","content":null,` +
		`"audio":{"id":"audio_1","data":"UklGRiQAAABXQVZFZm10IBAAAAABAAEAgD4AAAB9AAACABAAZGF0YQAAAAA","expires_at":1,"transcript":"` + transcript + `"}}}]`
	if u := run(ctJSON, nil, Limits{}, [][]byte{[]byte(body)}, false); u.TextBytes != int64(len(transcript)) {
		t.Fatalf("a cut audio chat answer counted %d bytes of output text, want its transcript's %d", u.TextBytes, len(transcript))
	}
}

// TestChatAudioAnswerCountsItsAudio: a streamed chat answer in audio carries its audio as
// base64 PCM16 at 24 kHz (choices[].delta.audio.data), 48 bytes, 64 characters, a
// millisecond: its duration is AudioOutputMillis, in any chunking, from which an answer
// cut before its usage is estimated (20 tokens a second, as an answer in audio is). Before,
// only its transcript counted, some 200 tokens a minute of the 1,200 its audio bills.
// The audio of a non-streamed answer (whole, with its usage; perhaps another format) is
// not read, nor a data string elsewhere.
func TestChatAudioAnswerCountsItsAudio(t *testing.T) {
	second := strings.Repeat("AAAA", 16_000) // 48,000 bytes: a second
	chunk := func(delta string) string {
		return `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-audio","choices":[{"index":0,"delta":` + delta + `,"finish_reason":null}],"usage":null}` + "\n\n"
	}
	body := chunk(`{"role":"assistant","content":null}`) + chunk(`{"audio":{"id":"audio_1","transcript":"Hi"}}`) +
		chunk(`{"audio":{"data":"`+second+`"}}`) + chunk(`{"audio":{"data":"`+second[:100]+`"}}`) +
		chunk(`{"data":"`+second+`","audio":{"id":"`+second+`"}}`)
	for how, chunks := range map[string][][]byte{"whole": {[]byte(body)}, "byte by byte": bytewise([]byte(body))} {
		u := run(ctSSE, nil, Limits{}, chunks, false) // cut: the client left
		if u.AudioOutputMillis != 1_002 || u.TextBytes != 2 || u.OutputReported || u.Complete {
			t.Fatalf("%s: a cut audio chat stream: %s, %d ms of audio, want 1,002 (1,000 and 100 characters' 2, rounded up)", how, show(u), u.AudioOutputMillis)
		}
	}
	json := `{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-audio","choices":[{"index":0,"message":{"role":"assistant","content":null,` +
		`"audio":{"id":"audio_1","data":"` + second + `","expires_at":1,"transcript":"Hi"}}}]}`
	if u := run(ctJSON, nil, Limits{}, [][]byte{[]byte(json)}, false); u.AudioOutputMillis != 0 {
		t.Fatalf("a non-streamed answer's audio: %d ms", u.AudioOutputMillis)
	}
}

func TestAudioTokens(t *testing.T) {
	gemini := func(details string) string {
		return `{"candidates":[{"content":{"parts":[{"text":"Heard."}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":800,` +
			`"candidatesTokenCount":40,` + details + `},"modelVersion":"gemini-2.5-flash"}`
	}
	geminiWant := Usage{Model: "gemini-2.5-flash", InputTokens: 800, OutputTokens: 40, Complete: true, Format: FormatGemini,
		InputReported: true, OutputReported: true, TextBytes: 6}
	with := func(u Usage, in, out int64, inOK, outOK bool) Usage {
		u.AudioInputTokens, u.AudioOutputTokens, u.AudioInputReported, u.AudioOutputReported = in, out, inOK, outOK
		return u
	}
	// cachedAudio: the cached count, and its audio part and whether it was reported.
	cachedAudio := func(u Usage, cached, audio int64, ok bool) Usage {
		u.CachedInputTokens, u.CachedAudioInputTokens, u.CachedAudioInputReported = cached, audio, ok
		return u
	}
	// geminiChunk is gemini's document as a stream's chunk, without its finishReason
	// unless last.
	geminiChunk := func(details string, last bool) string {
		doc := gemini(details)
		if !last {
			doc = strings.Replace(doc, `,"finishReason":"STOP"`, "", 1)
		}
		return "data: " + doc + "\n\n"
	}
	// geminiStreamWant is u streamed in chunks of gemini's documents (its text in each).
	geminiStreamWant := func(u Usage, chunks int64) Usage {
		u.Format, u.TextBytes = FormatGeminiSSE, chunks*u.TextBytes
		return u
	}
	chat := Usage{Model: "gpt-4o-audio-preview-2025-06-03", InputTokens: 312, OutputTokens: 1055, Complete: true, Format: FormatOpenAIChat,
		InputReported: true, OutputReported: true}
	cases := []struct {
		name, ct, body string
		want           Usage
	}{
		{"openai chat with audio in and out", ctJSON, `{"object":"chat.completion","model":"gpt-4o-audio-preview-2025-06-03","usage":{"prompt_tokens":312,` +
			`"completion_tokens":1055,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":296},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":1003}}}`,
			with(chat, 296, 1003, true, true)},
		{"openai chat without details: unknown", ctJSON, `{"object":"chat.completion","model":"gpt-4o-audio-preview-2025-06-03","usage":{"prompt_tokens":312,"completion_tokens":1055}}`,
			chat},
		{"openai chat with a cached count only: audio unknown", ctJSON, `{"object":"chat.completion","model":"gpt-4o-audio-preview-2025-06-03","usage":{"prompt_tokens":312,` +
			`"completion_tokens":1055,"prompt_tokens_details":{"cached_tokens":0}}}`, chat},
		{"gemini audio input", ctJSON, gemini(`"promptTokensDetails":[{"modality":"TEXT","tokenCount":32},{"modality":"AUDIO","tokenCount":768}]`),
			with(geminiWant, 768, 0, true, false)},
		{"gemini count before modality", ctJSON, gemini(`"promptTokensDetails":[{"tokenCount":768,"modality":"AUDIO"},{"tokenCount":32,"modality":"TEXT"}]`),
			with(geminiWant, 768, 0, true, false)},
		{"gemini text only: no audio, reported", ctJSON, gemini(`"promptTokensDetails":[{"modality":"TEXT","tokenCount":800}],"candidatesTokensDetails":[{"modality":"TEXT","tokenCount":40}]`),
			with(geminiWant, 0, 0, true, true)},
		{"gemini audio output", ctJSON, gemini(`"promptTokensDetails":[{"modality":"TEXT","tokenCount":800}],"candidatesTokensDetails":[{"modality":"AUDIO","tokenCount":40}]`),
			with(geminiWant, 0, 40, true, true)},
		{"gemini an AUDIO entry without a count (0 left out)", ctJSON, gemini(`"promptTokensDetails":[{"modality":"AUDIO"},{"modality":"TEXT","tokenCount":800}]`),
			with(geminiWant, 0, 0, true, false)},
		{"gemini modality not a string, nested entries, other lists", ctJSON, gemini(`"promptTokensDetails":[{"modality":7,"tokenCount":5},[{"modality":"AUDIO","tokenCount":9}],` +
			`{"modality":"AUDIO","tokenCount":{"n":3},"x":{"modality":"AUDIO","tokenCount":4}}],"toolUsePromptTokensDetails":[{"modality":"AUDIO","tokenCount":11}]`),
			with(geminiWant, 0, 0, true, false)},
		{"gemini cached audio and text", ctJSON, gemini(`"cachedContentTokenCount":600,"promptTokensDetails":[{"modality":"TEXT","tokenCount":32},{"modality":"AUDIO","tokenCount":768}],` +
			`"cacheTokensDetails":[{"modality":"TEXT","tokenCount":24},{"modality":"AUDIO","tokenCount":576}]`),
			cachedAudio(with(geminiWant, 768, 0, true, false), 600, 576, true)},
		{"gemini cached audio, count before modality, list before the cached count", ctJSON,
			gemini(`"cacheTokensDetails":[{"tokenCount":576,"modality":"AUDIO"},{"tokenCount":24,"modality":"TEXT"}],"cachedContentTokenCount":600`),
			cachedAudio(geminiWant, 600, 576, true)},
		{"gemini cached text only: no cached audio, reported", ctJSON, gemini(`"cachedContentTokenCount":600,"cacheTokensDetails":[{"modality":"TEXT","tokenCount":600}]`),
			cachedAudio(geminiWant, 600, 0, true)},
		{"gemini cached count without its list: unknown", ctJSON, gemini(`"cachedContentTokenCount":600,"promptTokensDetails":[{"modality":"AUDIO","tokenCount":800}]`),
			cachedAudio(with(geminiWant, 800, 0, true, false), 600, 0, false)},
		{"gemini cached audio above the cached count: at most it", ctJSON, gemini(`"cachedContentTokenCount":100,"cacheTokensDetails":[{"modality":"AUDIO","tokenCount":576}]`),
			cachedAudio(geminiWant, 100, 100, true)},
		{"gemini cached audio entries malformed: reported 0", ctJSON, gemini(`"cachedContentTokenCount":600,"cacheTokensDetails":[{"modality":"AUDIO","tokenCount":"576"},` +
			`[{"modality":"AUDIO","tokenCount":9}],{"modality":"AUDIO","tokenCount":-3}]`),
			cachedAudio(geminiWant, 600, 0, true)},
		{"gemini cached audio reported twice, the list again: the largest", ctJSON, gemini(`"cachedContentTokenCount":600,` +
			`"cacheTokensDetails":[{"modality":"AUDIO","tokenCount":576},{"modality":"AUDIO","tokenCount":9}],"cacheTokensDetails":[]`),
			cachedAudio(geminiWant, 600, 576, true)},
		{"gemini cacheTokensDetails not a list: unknown", ctJSON, gemini(`"cachedContentTokenCount":600,"cacheTokensDetails":{"modality":"AUDIO","tokenCount":576}`),
			cachedAudio(geminiWant, 600, 0, false)},
		{"openai chat has no cached audio split, even with a Gemini list", ctJSON, `{"object":"chat.completion","model":"gpt-4o-audio-preview-2025-06-03","usage":{"prompt_tokens":312,` +
			`"completion_tokens":1055,"prompt_tokens_details":{"cached_tokens":256,"audio_tokens":296},"cacheTokensDetails":[{"modality":"AUDIO","tokenCount":200}]}}`,
			cachedAudio(with(chat, 296, 0, true, false), 256, 0, false)},
		{"gemini without details: unknown", ctJSON, gemini(`"totalTokenCount":840`), geminiWant},
		{"gemini stream: the largest report", ctSSE,
			"data: " + strings.Replace(gemini(`"promptTokensDetails":[{"modality":"AUDIO","tokenCount":700}]`), `,"finishReason":"STOP"`, "", 1) + "\n\n" +
				"data: " + gemini(`"promptTokensDetails":[{"modality":"AUDIO","tokenCount":768}]`) + "\n\n",
			func() Usage {
				u := with(geminiWant, 768, 0, true, false)
				u.Format, u.TextBytes = FormatGeminiSSE, 12
				return u
			}()},
		// Gemini repeats usageMetadata in its chunks: the cached audio, like the counts,
		// is the largest reported (a later, smaller report does not lower it), and a chunk
		// without the list does not undo it.
		{"gemini stream: cached audio, the largest report", ctSSE,
			geminiChunk(`"cachedContentTokenCount":600,"cacheTokensDetails":[{"modality":"AUDIO","tokenCount":500}]`, false) +
				geminiChunk(`"cachedContentTokenCount":600,"cacheTokensDetails":[{"modality":"TEXT","tokenCount":24},{"modality":"AUDIO","tokenCount":576}]`, true) +
				geminiChunk(`"cachedContentTokenCount":600,"cacheTokensDetails":[{"modality":"AUDIO","tokenCount":300}]`, false) +
				geminiChunk(`"cachedContentTokenCount":600`, false),
			geminiStreamWant(cachedAudio(geminiWant, 600, 576, true), 4)},
		{"gemini stream: cached text only, reported 0", ctSSE,
			geminiChunk(`"cachedContentTokenCount":600`, false) +
				geminiChunk(`"cachedContentTokenCount":600,"cacheTokensDetails":[{"modality":"TEXT","tokenCount":600}]`, true),
			geminiStreamWant(cachedAudio(geminiWant, 600, 0, true), 2)},
		{"gemini stream without the list: unknown", ctSSE,
			geminiChunk(`"cachedContentTokenCount":600`, false) + geminiChunk(`"cachedContentTokenCount":600`, true),
			geminiStreamWant(cachedAudio(geminiWant, 600, 0, false), 2)},
		// A stream whose shape changes starts its usage over: the cached audio of the
		// Gemini chunks before the change is forgotten with their counts.
		{"a stream that changes shape forgets the cached audio", ctSSE,
			geminiChunk(`"cachedContentTokenCount":600,"cacheTokensDetails":[{"modality":"AUDIO","tokenCount":576}]`, false) +
				`data: {"object":"chat.completion.chunk","usage":{"prompt_tokens":1,"completion_tokens":2}}` + "\n\n" +
				geminiChunk(`"cachedContentTokenCount":600`, true),
			geminiStreamWant(cachedAudio(geminiWant, 600, 0, false), 2)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			checkSplits(t, c.ct, nil, []byte(c.body), c.want)
			if ref, ok := oracleFor(c.ct, []byte(c.body)); !ok || !reflect.DeepEqual(ref, c.want) {
				t.Fatalf("the reference reads %s", show(ref))
			}
		})
	}
}

// OpenRouter reports what a request cost in its usage (usage.cost, USD): read exactly
// (rounded up to the micro-USD, an exponent too), from a JSON body or a stream's last
// chunk, in any chunking and as the reference reads it; a cost header wins; a negative or
// malformed cost is none. With "bring your own key" (usage.is_byok) its cost is only its
// fee, and the provider billed the key usage.cost_details.upstream_inference_cost: the
// request cost both; without, the larger of the two.
func TestBodyCost(t *testing.T) {
	chat := func(cost string) string {
		return `{"id":"gen-1","object":"chat.completion","model":"anthropic/claude-sonnet-4.5","choices":[{"message":{"role":"assistant","content":"Paid."}}],` +
			`"usage":{"prompt_tokens":120,"completion_tokens":30,"total_tokens":150,"cost":` + cost + `,"is_byok":false,"cost_details":{"upstream_inference_cost":null}}}`
	}
	base := Usage{Model: "anthropic/claude-sonnet-4.5", InputTokens: 120, OutputTokens: 30, Complete: true, Format: FormatOpenAIChat,
		InputReported: true, OutputReported: true, TextBytes: 5}
	withCost := func(c int64) Usage { u := base; u.CostMicroUSD = &c; return u }
	stream := "data: " + `{"id":"gen-1","object":"chat.completion.chunk","model":"anthropic/claude-sonnet-4.5","choices":[{"delta":{"content":"Paid."}}]}` + "\n\n" +
		"data: " + `{"id":"gen-1","object":"chat.completion.chunk","model":"anthropic/claude-sonnet-4.5","choices":[],"usage":{"prompt_tokens":120,"completion_tokens":30,"cost":0.00081}}` + "\n\n" +
		"data: [DONE]\n\n"
	streamed := withCost(810)
	streamed.Format = FormatOpenAIChatSSE
	// byok is an OpenRouter answer whose usage reports cost, is_byok and the upstream cost.
	byok := func(cost, isByok, upstream string) string {
		return strings.Replace(chat(cost), `"is_byok":false,"cost_details":{"upstream_inference_cost":null}`,
			`"is_byok":`+isByok+`,"cost_details":{"upstream_inference_cost":`+upstream+`,"upstream_inference_prompt_cost":0.012}`, 1)
	}
	byokStream := strings.Replace(stream, `"cost":0.00081}`, `"cost":0,"is_byok":true,"cost_details":{"upstream_inference_cost":0.027}}`, 1)
	byokStreamed := withCost(27_000)
	byokStreamed.Format = FormatOpenAIChatSSE
	for _, tc := range []struct {
		name, ct, body string
		want           Usage
	}{
		{"a decimal", ctJSON, chat("0.00081"), withCost(810)},
		{"below a micro-USD: rounded up", ctJSON, chat("0.0000001"), withCost(1)},
		{"an exponent", ctJSON, chat("1.4e-05"), withCost(14)},
		{"zero", ctJSON, chat("0"), withCost(0)},
		{"negative: none", ctJSON, chat("-0.5"), base},
		{"a string: none", ctJSON, chat(`"0.5"`), base},
		{"longer than 32 bytes: none", ctJSON, chat("0.000810000000000000000000000000001"), base},
		{"a stream's last chunk", ctSSE, stream, streamed},
		{"BYOK, within the free million: the upstream cost", ctJSON, byok("0", "true", "0.027"), withCost(27_000)},
		{"BYOK past the free million: the fee and the upstream cost", ctJSON, byok("0.00135", "true", "0.027"), withCost(28_350)},
		{"BYOK, the upstream cost rounded up", ctJSON, byok("0", "true", "1.5e-7"), withCost(1)},
		{"BYOK said after the costs", ctJSON, strings.Replace(chat("0.00135"), `"is_byok":false,"cost_details":{"upstream_inference_cost":null}}`,
			`"cost_details":{"upstream_inference_cost":0.027},"is_byok":true}`, 1), withCost(28_350)},
		{"not BYOK: the upstream cost equals the cost", ctJSON, byok("0.00081", "false", "0.00081"), withCost(810)},
		{"not BYOK: the larger of the two", ctJSON, byok("0.00081", "false", "0.0009"), withCost(900)},
		{"an upstream cost without a cost", ctJSON, strings.Replace(byok("0", "true", "0.027"), `"cost":0,`, "", 1), withCost(27_000)},
		{"BYOK, a negative upstream cost: none", ctJSON, byok("0", "true", "-0.027"), withCost(0)},
		{"BYOK, no upstream cost: the cost", ctJSON, byok("0.00135", "true", "null"), withCost(1_350)},
		{"an upstream cost outside cost_details: none", ctJSON, strings.Replace(byok("0", "true", "null"), `"cost":0,`, `"cost":0,"upstream_inference_cost":0.027,`, 1), withCost(0)},
		{"a BYOK stream's last chunk", ctSSE, byokStream, byokStreamed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkSplits(t, tc.ct, nil, []byte(tc.body), tc.want)
			if ref, ok := oracleFor(tc.ct, []byte(tc.body)); !ok || !reflect.DeepEqual(ref, tc.want) {
				t.Fatalf("the reference reads %s", show(ref))
			}
		})
	}
	if got := run(ctJSON, map[string]string{HeaderCostMicroUSD: "7"}, Limits{}, [][]byte{[]byte(chat("0.00081"))}, true); got.CostMicroUSD == nil || *got.CostMicroUSD != 7 {
		t.Fatalf("the header did not win: %s", show(got))
	}
}

// TestMapsGrounding: Gemini's grounding with Google Maps is billed per grounded prompt,
// apart from its usage: an answer is grounded when a candidate's grounding cites a maps
// source (groundingChunks[].maps), however many places it cites, in whichever chunk of a
// stream (the grounding comes in the last).
func TestMapsGrounding(t *testing.T) {
	const grounded = `{"candidates":[{"content":{"parts":[{"text":"Try Bestia."}],"role":"model"},"finishReason":"STOP",` +
		`"groundingMetadata":{"groundingChunks":[{"maps":{"uri":"https://maps.google.com/?cid=1","title":"Bestia","placeId":"places/ChIJ1"}},` +
		`{"maps":{"uri":"https://maps.google.com/?cid=2","title":"Bavel","placeId":"places/ChIJ2"}}],` +
		`"groundingSupports":[{"segment":{"endIndex":11,"text":"Try Bestia."},"groundingChunkIndices":[0,1]}],"googleMapsWidgetContextToken":"widgetcontent/x"}}],` +
		`"usageMetadata":{"promptTokenCount":30,"candidatesTokenCount":4,"totalTokenCount":34},"modelVersion":"gemini-2.5-flash"}`
	for _, tc := range []struct {
		name, ct, body string
		maps, webs     int64
		complete       bool
	}{
		{"grounded", ctJSON, grounded, 1, 0, true},
		{"streamed", ctSSE, "data: " + `{"candidates":[{"content":{"parts":[{"text":"Try "}],"role":"model"}}],"usageMetadata":{"promptTokenCount":30},"modelVersion":"gemini-2.5-flash"}` + "\r\n\r\n" +
			"data: " + grounded + "\r\n\r\n", 1, 0, true},
		{"streamed, grounded before the end", ctSSE, "data: " + grounded + "\r\n\r\n" +
			"data: " + `{"candidates":[{"content":{"parts":[{"text":"."}],"role":"model"},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":30,"candidatesTokenCount":5},"modelVersion":"gemini-2.5-flash"}` + "\r\n\r\n", 1, 0, true},
		{"as an array", ctJSON, "[" + grounded + "]", 1, 0, true},
		{"with search grounding too", ctJSON, strings.Replace(grounded, `"groundingChunks":[`, `"webSearchQueries":["bestia"],"groundingChunks":[{"web":{"uri":"https://example.com","title":"e"}},`, 1), 1, 1, true},
		{"web sources only", ctJSON, geminiGrounded, 0, 2, true},
		{"no chunks", ctJSON, `{"candidates":[{"finishReason":"STOP","groundingMetadata":{"groundingChunks":[]}}],"usageMetadata":{"promptTokenCount":1}}`, 0, 0, true},
		{"maps elsewhere, or not an object", ctJSON, `{"groundingMetadata":{"groundingChunks":[{"maps":{}}]},"candidates":[{"finishReason":"STOP","maps":{},` +
			`"groundingMetadata":{"groundingChunks":[{"maps":"x"},{"maps":null},[{"maps":{}}],{"web":{"maps":{}}}],"maps":{}}}],"usageMetadata":{"promptTokenCount":1}}`, 0, 0, true},
		{"an OpenAI answer with the same keys", ctJSON, `{"object":"chat.completion","candidates":[{"groundingMetadata":{"groundingChunks":[{"maps":{}}]}}],"usage":{"prompt_tokens":1,"completion_tokens":2}}`, 0, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for how, chunks := range map[string][][]byte{"whole": {[]byte(tc.body)}, "byte by byte": bytewise([]byte(tc.body))} {
				if got := run(tc.ct, nil, Limits{}, chunks, true); got.MapsGroundedPrompts != tc.maps || got.WebSearchRequests != tc.webs || got.Complete != tc.complete {
					t.Fatalf("%s: %s with %d grounded prompts and %d web searches, want %d, %d, complete %v", how, show(got),
						got.MapsGroundedPrompts, got.WebSearchRequests, tc.maps, tc.webs, tc.complete)
				}
			}
			if ref, _ := oracleFor(tc.ct, []byte(tc.body)); ref.MapsGroundedPrompts != tc.maps || ref.WebSearchRequests != tc.webs {
				t.Fatalf("reference: %d grounded prompts, %d web searches", ref.MapsGroundedPrompts, ref.WebSearchRequests)
			}
		})
	}
}

// TestAdvisorResults: an Anthropic stream shows each consultation of the advisor tool as
// an advisor_tool_result block (its content_block_start event), long before the last
// message_delta reports the advisor's counts: a stream cut in between keeps the count of
// consultations done, which package inflight estimates.
func TestAdvisorResults(t *testing.T) {
	consult := func(i int) string {
		return "event: content_block_start\ndata: " + fmt.Sprintf(`{"type":"content_block_start","index":%d,"content_block":{"type":"server_tool_use","id":"srvtoolu_%d","name":"advisor","input":{}}}`, 2*i, i) + "\n\n" +
			"event: content_block_stop\ndata: " + fmt.Sprintf(`{"type":"content_block_stop","index":%d}`, 2*i) + "\n\n" +
			"event: content_block_start\ndata: " + fmt.Sprintf(`{"type":"content_block_start","index":%d,"content_block":{"type":"advisor_tool_result","tool_use_id":"srvtoolu_%d","content":{"type":"advisor_result","text":"Check the edge case."}}}`, 2*i+1, i) + "\n\n" +
			"event: content_block_stop\ndata: " + fmt.Sprintf(`{"type":"content_block_stop","index":%d}`, 2*i+1) + "\n\n"
	}
	start := "event: message_start\ndata: " + `{"type":"message_start","message":{"model":"claude-haiku-4-5","usage":{"input_tokens":900,"output_tokens":1}}}` + "\n\n"
	text := "event: content_block_start\ndata: " + `{"type":"content_block_start","index":4,"content_block":{"type":"text","text":""}}` + "\n\n" +
		"event: content_block_delta\ndata: " + `{"type":"content_block_delta","index":4,"delta":{"type":"text_delta","text":"Done."}}` + "\n\n"
	end := "event: message_delta\ndata: " + `{"type":"message_delta","usage":{"output_tokens":100,"iterations":[{"type":"advisor_message","model":"claude-opus-4-7","input_tokens":700,"output_tokens":200}]}}` + "\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	for _, tc := range []struct {
		name, body string
		results    int64
		complete   bool
	}{
		{"two consultations, whole", start + consult(0) + consult(1) + text + end, 2, true},
		{"cut after them", start + consult(0) + consult(1) + text, 2, false},
		{"cut before the result", start + consult(0)[:strings.Index(consult(0), "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1")], 0, false},
		{"an escaped type", start + strings.Replace(consult(0), `"type":"advisor_tool_result"`, `"type":"adv\u0069sor_tool_result"`, 1), 1, false},
		{"the type elsewhere", start + "event: content_block_delta\ndata: " + `{"type":"content_block_delta","index":1,"delta":{"type":"advisor_tool_result"},"content":{"type":"advisor_tool_result"}}` + "\n\n", 0, false},
		// A result that is an error (the tool's max_uses reached, the advisor overloaded) is
		// no consultation: no sub-inference ran, and none is estimated.
		{"an error result is none", start + consult(0) + strings.Replace(consult(1), `{"type":"advisor_result","text":"Check the edge case."}`,
			`{"type":"advisor_tool_result_error","error_code":"max_uses_exceeded"}`, 1) + text, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for how, chunks := range map[string][][]byte{"whole": {[]byte(tc.body)}, "byte by byte": bytewise([]byte(tc.body))} {
				if got := run(ctSSE, nil, Limits{}, chunks, true); got.AdvisorResults != tc.results || got.Complete != tc.complete {
					t.Fatalf("%s: %s with %d advisor results, want %d, complete %v", how, show(got), got.AdvisorResults, tc.results, tc.complete)
				}
			}
			if ref, _ := oracleFor(ctSSE, []byte(tc.body)); ref.AdvisorResults != tc.results {
				t.Fatalf("reference: %d advisor results", ref.AdvisorResults)
			}
		})
	}
}

// xAI's chat usage leaves a reasoning model's thinking out of completion_tokens and
// counts it in total_tokens (and bills it as output); OpenAI's counts it in both. The
// output is at least what the total leaves beyond the prompt, in JSON and in a stream,
// whole and byte by byte, as the reference decoder reads it; a total at or below the
// prompt and completion changes nothing.
func TestChatTotalCountsTheThinking(t *testing.T) {
	grok := Usage{Model: "grok-4.3", InputTokens: 119, OutputTokens: 107, CachedInputTokens: 112, Complete: true, Format: FormatOpenAIChat,
		InputReported: true, OutputReported: true}
	const xaiUsage = `"usage":{"prompt_tokens":119,"completion_tokens":9,"total_tokens":226,"prompt_tokens_details":{"text_tokens":119,"cached_tokens":112},` +
		`"completion_tokens_details":{"reasoning_tokens":98}}`
	stream := grok
	stream.Format, stream.TextBytes = FormatOpenAIChatSSE, 2
	openai := Usage{Model: "o4-mini", InputTokens: 119, OutputTokens: 107, Complete: true, Format: FormatOpenAIChat, InputReported: true, OutputReported: true}
	for _, tc := range []struct {
		name, ct, body string
		want           Usage
	}{
		{"xAI, JSON", ctJSON, `{"object":"chat.completion","model":"grok-4.3",` + xaiUsage + `}`, grok},
		{"xAI, a stream's last chunk", ctSSE, `data: {"object":"chat.completion.chunk","model":"grok-4.3","choices":[{"index":0,"delta":{"content":"Hi"}}]}` + "\n\n" +
			`data: {"object":"chat.completion.chunk","model":"grok-4.3","choices":[],` + xaiUsage + `}` + "\n\n" + "data: [DONE]\n\n", stream},
		{"OpenAI: the thinking in both", ctJSON, `{"object":"chat.completion","model":"o4-mini","usage":{"prompt_tokens":119,"completion_tokens":107,` +
			`"total_tokens":226,"completion_tokens_details":{"reasoning_tokens":98}}}`, openai},
		{"a total below the counts changes nothing", ctJSON, `{"object":"chat.completion","model":"o4-mini","usage":{"prompt_tokens":119,"completion_tokens":107,` +
			`"total_tokens":5}}`, openai},
	} {
		t.Run(tc.name, func(t *testing.T) { checkWholeAndBytewise(t, tc.ct, tc.body, true, tc.want) })
	}
}

// Perplexity's usage.cost is an object of the cost's parts (its tokens', its request
// fee): its total_cost is what the request cost, read as OpenRouter's number is (rounded
// up to the micro-USD), in JSON and in a stream, whole and byte by byte, as the reference
// decoder reads it. Another member of the object, or a total_cost elsewhere, is not it.
// TestGroqStreamStatesItsUsageTwice: a Groq stream's last content chunk carries its usage
// twice (top-level usage and x_groq.usage, the same counts), and with include_usage a
// trailing chunk states it again: the counts are read once, never added up (Groq's chunks
// as captured from openai/gpt-oss-20b, 2026-08).
func TestGroqStreamStatesItsUsageTwice(t *testing.T) {
	const usage = `{"queue_time":0.017371826,"prompt_tokens":75,"prompt_time":0.003517995,"completion_tokens":1,"completion_time":0.001015726,"total_tokens":76,"total_time":0.004533721}`
	body := `data: {"id":"chatcmpl-8087db6b","object":"chat.completion.chunk","created":1786530508,"model":"openai/gpt-oss-20b","choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":null,"finish_reason":null}]}` + "\n\n" +
		`data: {"id":"chatcmpl-8087db6b","object":"chat.completion.chunk","created":1786530508,"model":"openai/gpt-oss-20b","system_fingerprint":"fp_ef00694abe","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"length"}],"x_groq":{"id":"req_01kztr8bqme32rx8ttyjtpk0nw","usage":` + usage + `},"usage":` + usage + `}` + "\n\n" +
		`data: {"id":"chatcmpl-8087db6b","object":"chat.completion.chunk","created":1786530508,"model":"openai/gpt-oss-20b","system_fingerprint":"fp_ef00694abe","choices":[],"usage":` + usage + `,"service_tier":"on_demand"}` + "\n\n" +
		"data: [DONE]\n\n"
	checkWholeAndBytewise(t, ctSSE, body, true, Usage{Model: "openai/gpt-oss-20b", InputTokens: 75, OutputTokens: 1, Complete: true,
		Format: FormatOpenAIChatSSE, InputReported: true, OutputReported: true, TextBytes: 2})
}

// TestGroqStreamWithoutIncludeUsage: a Groq stream whose request did not ask for
// stream_options.include_usage (a route set includeUsage: false, an upstream remembered
// to refuse the field) reports its usage in its last chunk's x_groq.usage alone: it is
// read as a top-level usage's counts, cached tokens too, and the stream is complete
// (before, it reported nothing and its 1,000 output tokens were charged as the estimate
// of the 2 bytes of text the client saw). What else x_groq holds is not usage.
func TestGroqStreamWithoutIncludeUsage(t *testing.T) {
	const first = `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1786530508,"model":"qwen/qwen3-32b","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"logprobs":null,"finish_reason":null}],"x_groq":{"id":"req_01"}}` + "\n\n"
	last := func(usage string) string {
		return `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1786530508,"model":"qwen/qwen3-32b","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"x_groq":{"id":"req_01","usage":` + usage + `}}` + "\n\n" + "data: [DONE]\n\n"
	}
	want := Usage{Model: "qwen/qwen3-32b", InputTokens: 75, OutputTokens: 1000, Complete: true, Format: FormatOpenAIChatSSE,
		InputReported: true, OutputReported: true, TextBytes: 2}
	cached := want
	cached.CachedInputTokens = 64
	unread := want
	unread.InputTokens, unread.OutputTokens, unread.Complete, unread.InputReported, unread.OutputReported = 0, 0, false, false, false
	for _, tc := range []struct {
		name, usage string
		want        Usage
	}{
		{"its counts", `{"queue_time":0.01,"prompt_tokens":75,"prompt_time":0.003,"completion_tokens":1000,"completion_time":0.9,"total_tokens":1075,"total_time":0.9}`, want},
		{"its cached tokens", `{"prompt_tokens":75,"completion_tokens":1000,"total_tokens":1075,"prompt_tokens_details":{"cached_tokens":64}}`, cached},
		{"a total beyond the prompt is output", `{"prompt_tokens":75,"completion_tokens":400,"total_tokens":1075}`, want},
		{"no count of another name", `{"input_tokens":75,"output_tokens":1000,"prompt_time":75}`, unread},
		{"a count nested deeper is none", `{"prompt_tokens":{"prompt_tokens":75},"queue":{"completion_tokens":1000}}`, unread},
	} {
		t.Run(tc.name, func(t *testing.T) { checkWholeAndBytewise(t, ctSSE, first+last(tc.usage), true, tc.want) })
	}
}

// TestDeepSeekCacheHitTokens: DeepSeek's OpenAI-compatible usage reports its cache hits
// as prompt_cache_hit_tokens (and the rest as prompt_cache_miss_tokens), a part of
// prompt_tokens, with or without prompt_tokens_details.cached_tokens. Without the latter,
// the hits are the cached input (before, they were charged at the full input price),
// never more than prompt_tokens; with it, cached_tokens alone counts, never the two
// added. In a JSON answer and in a stream's last chunk alike.
func TestDeepSeekCacheHitTokens(t *testing.T) {
	chat := func(in, out, cached int64) Usage {
		return Usage{Model: "deepseek-chat", InputTokens: in, OutputTokens: out, CachedInputTokens: cached, Complete: true,
			Format: FormatOpenAIChat, InputReported: true, OutputReported: true}
	}
	for _, tc := range []struct {
		name, usage string
		want        Usage
	}{
		{"hits alone", `{"prompt_tokens":1200,"completion_tokens":10,"total_tokens":1210,"prompt_cache_hit_tokens":1024,"prompt_cache_miss_tokens":176}`,
			chat(1200, 10, 1024)},
		{"hits before the counts", `{"prompt_cache_hit_tokens":1024,"prompt_cache_miss_tokens":176,"prompt_tokens":1200,"completion_tokens":10}`,
			chat(1200, 10, 1024)},
		{"no hit", `{"prompt_tokens":1200,"completion_tokens":10,"prompt_cache_hit_tokens":0,"prompt_cache_miss_tokens":1200}`,
			chat(1200, 10, 0)},
		{"cached_tokens too: it alone", `{"prompt_tokens":1200,"completion_tokens":10,"prompt_cache_hit_tokens":1024,"prompt_cache_miss_tokens":176,"prompt_tokens_details":{"cached_tokens":1024}}`,
			chat(1200, 10, 1024)},
		{"cached_tokens first, smaller: it alone", `{"prompt_tokens_details":{"cached_tokens":512},"prompt_tokens":1200,"completion_tokens":10,"prompt_cache_hit_tokens":1024}`,
			chat(1200, 10, 512)},
		{"hits beyond the prompt: at most it", `{"prompt_tokens":100,"completion_tokens":10,"prompt_cache_hit_tokens":1024}`,
			chat(100, 10, 100)},
		{"hits without a prompt count: none", `{"completion_tokens":10,"prompt_cache_hit_tokens":1024}`,
			Usage{Model: "deepseek-chat", OutputTokens: 10, Format: FormatOpenAIChat, OutputReported: true}},
		{"misses are no hits", `{"prompt_tokens":1200,"completion_tokens":10,"prompt_cache_miss_tokens":1200}`,
			chat(1200, 10, 0)},
	} {
		t.Run(tc.name+", json", func(t *testing.T) {
			body := `{"id":"930c60df","object":"chat.completion","created":1786530508,"model":"deepseek-chat","choices":[{"index":0,"message":{"role":"assistant","content":""},"finish_reason":"stop"}],"usage":` + tc.usage + `,"system_fingerprint":"fp_1"}`
			checkWholeAndBytewise(t, ctJSON, body, true, tc.want)
		})
		t.Run(tc.name+", stream", func(t *testing.T) {
			body := `data: {"id":"930c60df","object":"chat.completion.chunk","created":1786530508,"model":"deepseek-chat","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null}],"usage":null}` + "\n\n" +
				`data: {"id":"930c60df","object":"chat.completion.chunk","created":1786530508,"model":"deepseek-chat","choices":[{"index":0,"delta":{"content":""},"finish_reason":"stop"}],"usage":` + tc.usage + `}` + "\n\n" +
				"data: [DONE]\n\n"
			want := tc.want
			want.Format, want.TextBytes = FormatOpenAIChatSSE, 2
			checkWholeAndBytewise(t, ctSSE, body, true, want)
		})
	}
}

// TestXAICostInTicks: xAI reports what it billed (tokens, cache discounts and its server-side
// tools: web and X search, code execution) as usage.cost_in_usd_ticks, in ticks of 1e-10
// USD; it is the upstream's cost, rounded up to micro-USD, in chat completions, the
// Responses API and a stream's last chunk.
func TestXAICostInTicks(t *testing.T) {
	cost := func(v int64) *int64 { return &v }
	chat := Usage{Model: "grok-4.3", InputTokens: 199, OutputTokens: 1, CostMicroUSD: cost(16), Complete: true, Format: FormatOpenAIChat,
		InputReported: true, OutputReported: true} // 158,500 ticks: 15.85 micro-USD
	stream := chat
	stream.Format, stream.TextBytes = FormatOpenAIChatSSE, 2
	responses := Usage{Model: "grok-4.3", InputTokens: 9212, CachedInputTokens: 3072, OutputTokens: 3417, CostMicroUSD: cost(31_832),
		Complete: true, Format: FormatOpenAIResponses, InputReported: true, OutputReported: true} // 318,319,000 ticks, 3 X searches among them
	noCost := chat
	noCost.CostMicroUSD = nil
	const chatUsage = `"usage":{"prompt_tokens":199,"completion_tokens":1,"total_tokens":200,"cost_in_usd_ticks":158500}`
	for _, tc := range []struct {
		name, ct, body string
		want           Usage
	}{
		{"chat JSON", ctJSON, `{"object":"chat.completion","model":"grok-4.3",` + chatUsage + `}`, chat},
		{"a stream's last chunk", ctSSE, `data: {"object":"chat.completion.chunk","model":"grok-4.3","choices":[{"index":0,"delta":{"content":"Hi"}}]}` + "\n\n" +
			`data: {"object":"chat.completion.chunk","model":"grok-4.3","choices":[],` + chatUsage + `}` + "\n\n" + "data: [DONE]\n\n", stream},
		{"the Responses API, with its tools' calls", ctJSON, `{"object":"response","model":"grok-4.3","status":"completed","usage":{"input_tokens":9212,` +
			`"input_tokens_details":{"cached_tokens":3072},"output_tokens":3417,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":12629,` +
			`"num_sources_used":0,"num_server_side_tools_used":3,"cost_in_usd_ticks":318319000,"server_side_tool_usage_details":{"web_search_calls":0,` +
			`"x_search_calls":3,"code_interpreter_calls":0}}}`, responses},
		{"a Responses API stream's completed event", ctSSE, "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"object\":\"response\",\"model\":\"grok-4.3\",\"status\":\"in_progress\",\"usage\":null}}\n\n" +
			"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hi\"}\n\n" +
			"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"object\":\"response\",\"model\":\"grok-4.3\",\"status\":\"completed\",\"usage\":{\"input_tokens\":9212," +
			"\"input_tokens_details\":{\"cached_tokens\":3072},\"output_tokens\":3417,\"total_tokens\":12629,\"cost_in_usd_ticks\":318319000}}}\n\n",
			func() Usage { u := responses; u.Format, u.TextBytes = FormatOpenAIResponsesSSE, 2; return u }()},
		{"a whole number of micro-USD", ctJSON, `{"object":"chat.completion","model":"grok-4.3","usage":{"prompt_tokens":199,"completion_tokens":1,"cost_in_usd_ticks":160000}}`,
			func() Usage { u := chat; u.CostMicroUSD = cost(16); return u }()},
		{"a fraction is no tick count", ctJSON, `{"object":"chat.completion","model":"grok-4.3","usage":{"prompt_tokens":199,"completion_tokens":1,"cost_in_usd_ticks":158500.5}}`, noCost},
		{"a negative one neither", ctJSON, `{"object":"chat.completion","model":"grok-4.3","usage":{"prompt_tokens":199,"completion_tokens":1,"cost_in_usd_ticks":-158500}}`, noCost},
		{"nor one outside the usage", ctJSON, `{"object":"chat.completion","model":"grok-4.3","usage":{"prompt_tokens":199,"completion_tokens":1},"cost_in_usd_ticks":158500}`, noCost},
	} {
		t.Run(tc.name, func(t *testing.T) { checkWholeAndBytewise(t, tc.ct, tc.body, true, tc.want) })
	}
}

func TestPerplexityCost(t *testing.T) {
	const usage = `"usage":{"prompt_tokens":480,"completion_tokens":2823,"total_tokens":3303,"search_context_size":"medium",` +
		`"cost":{"input_tokens_cost":0.00144,"output_tokens_cost":0.04234,"request_cost":0.008,"total_cost":0.0517805}}`
	cost := int64(51_781) // 0.0517805 USD, rounded up
	json := Usage{Model: "sonar-pro", InputTokens: 480, OutputTokens: 2823, CostMicroUSD: &cost, Complete: true, Format: FormatOpenAIChat,
		InputReported: true, OutputReported: true}
	stream := json
	stream.Format, stream.TextBytes = FormatOpenAIChatSSE, 2
	noCost := json
	noCost.CostMicroUSD = nil
	for _, tc := range []struct {
		name, ct, body string
		want           Usage
	}{
		{"JSON", ctJSON, `{"object":"chat.completion","model":"sonar-pro","citations":["https://a.example"],` + usage + `}`, json},
		{"a stream's last chunk", ctSSE, `data: {"object":"chat.completion.chunk","model":"sonar-pro","choices":[{"index":0,"delta":{"content":"Hi"}}]}` + "\n\n" +
			`data: {"object":"chat.completion.chunk","model":"sonar-pro","choices":[],` + usage + `}` + "\n\n" + "data: [DONE]\n\n", stream},
		{"a part is not the total", ctJSON, `{"object":"chat.completion","model":"sonar-pro","usage":{"prompt_tokens":480,"completion_tokens":2823,` +
			`"cost":{"request_cost":0.008}},"total_cost":9}`, noCost},
	} {
		t.Run(tc.name, func(t *testing.T) { checkWholeAndBytewise(t, tc.ct, tc.body, true, tc.want) })
	}
}

// Mistral's OCR answer reports the pages its model read (usage_info.pages_processed),
// which it bills apiece, and no token count; its pages' markdown is no output text here.
func TestMistralOCRPages(t *testing.T) {
	ocr := Usage{Model: "mistral-ocr-2505-completion", OCRPages: 12, Complete: true, Format: FormatMistralOCR, InputReported: true,
		OutputReported: true}
	const pages = `"pages":[{"index":0,"markdown":"# Toll rates\n\n| Class | Fee |","images":[],"dimensions":{"dpi":200,"height":2200,"width":1700}}]`
	for _, tc := range []struct {
		name, body string
		want       Usage
	}{
		{"an OCR answer", `{` + pages + `,"model":"mistral-ocr-2505-completion","document_annotation":null,` +
			`"usage_info":{"pages_processed":12,"doc_size_bytes":3052374}}`, ocr},
		{"its usage first", `{"usage_info":{"pages_processed":12,"doc_size_bytes":null},"model":"mistral-ocr-2505-completion",` + pages + `}`, ocr},
		{"a fraction is no page count", `{"model":"mistral-ocr-latest","usage_info":{"pages_processed":1.5}}`, Usage{}},
		{"nor pages outside the usage", `{"model":"mistral-ocr-latest","pages_processed":12,"usage_info":{"doc_size_bytes":1}}`, Usage{}},
	} {
		t.Run(tc.name, func(t *testing.T) { checkWholeAndBytewise(t, ctJSON, tc.body, true, tc.want) })
	}
}

// OpenAI's conversation object, the answer of a conversation created or updated (POST
// /v1/conversations, /v1/conversations/{id}), says nothing was generated: it is read as
// such (FormatOpenAIConversation, complete when whole), which the settlement takes for
// an unbilled answer. Not a Mistral conversation's answer at the same paths
// ("conversation.response", with its usage), nor an object "conversation" that reports
// a usage, nor a cut one.
func TestOpenAIConversationObject(t *testing.T) {
	conv := Usage{Complete: true, Format: FormatOpenAIConversation}
	for _, tc := range []struct {
		name, body string
		eos        bool
		want       Usage
	}{
		{"created", `{"id":"conv_689667905b048191b4740501625afd940c7533ace33a2dab","object":"conversation","created_at":1741900000,"metadata":{"topic":"demo"}}`, true, conv},
		{"the object last", `{"id":"conv_1","created_at":1741900000,"metadata":{},"object":"conversation"}`, true, conv},
		{"cut", `{"id":"conv_1","object":"conversation","created_at":17419`, false, Usage{Format: FormatOpenAIConversation}},
		{"Mistral's", `{"object":"conversation.response","conversation_id":"conv_1","outputs":[{"object":"entry","type":"message.output","model":"mistral-medium-2505","content":"Hi"}],"usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12}}`, true,
			Usage{Model: "mistral-medium-2505", InputTokens: 10, OutputTokens: 2, Complete: true, Format: FormatOpenAIChat, InputReported: true, OutputReported: true, TextBytes: 2}},
		{"with a usage", `{"object":"conversation","usage":{"prompt_tokens":10,"completion_tokens":2}}`, true,
			Usage{InputTokens: 10, OutputTokens: 2, Complete: true, Format: FormatOpenAIChat, InputReported: true, OutputReported: true}},
	} {
		t.Run(tc.name, func(t *testing.T) { checkWholeAndBytewise(t, ctJSON, tc.body, tc.eos, tc.want) })
	}
}

// TestStreamEndedByDone: a chat completions stream whose "data: [DONE]" came after its
// usage chunk ended by its protocol, and is complete though its body was broken off:
// openai-go (the official Go SDK) closes the response as soon as it reads "[DONE]",
// before the chunked terminator that follows it, and Envoy then resets the stream, so
// ext_proc saw no end_of_stream and settled a whole answer as incomplete (before
// 2026-12-03). Nothing else that looks like it counts: a "[DONE]" before the usage, one
// whose event is not closed, data that is more than "[DONE]", a compressed body (its
// coding must end properly).
func TestStreamEndedByDone(t *testing.T) {
	const (
		role  = `data: {"id":"c","object":"chat.completion.chunk","model":"gpt-4o-mini-2024-07-18","choices":[{"index":0,"delta":{"content":"Hi"}}],"usage":null}` + "\n\n"
		usage = `data: {"id":"c","object":"chat.completion.chunk","model":"gpt-4o-mini-2024-07-18","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3}}` + "\n\n"
		done  = "data: [DONE]\n\n"
		// Mistral reports its usage in the finish chunk, then [DONE], as OpenAI does.
		mistral = `data: {"id":"m","object":"chat.completion.chunk","model":"mistral-small-latest","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":3}}` + "\n\n"
	)
	for _, tc := range []struct {
		name     string
		body     string
		encoding string
		complete bool
	}{
		{"usage, then [DONE]", role + usage + done, "", true},
		{"usage, then [DONE] with CRLF", strings.ReplaceAll(role+usage+done, "\n", "\r\n"), "", true},
		{"usage, then [DONE] without the space", role + usage + "data:[DONE]\n\n", "", true},
		{"usage, then [DONE] and a comment", role + usage + done + ": bye\n", "", true},
		{"mistral: usage in the finish chunk, then [DONE]", mistral + done, "", true},
		{"usage, no [DONE]", role + usage, "", false},
		{"[DONE] not closed by its blank line", role + usage + "data: [DONE]\n", "", false},
		{"[DONE] before the usage", role + done + usage, "", false},
		{"[DONE] and more data in one event", role + usage + "data: [DONE]\ndata: x\n\n", "", false},
		{"[DONE] with trailing bytes", role + usage + "data: [DONE] \n\n", "", false},
		{"[DONE] in another field", role + usage + "event: [DONE]\n\n", "", false},
		{"no usage, then [DONE]", role + done, "", false},
		{"gzip: usage, then [DONE]", role + usage + done, "gzip", true}, // since 2026-12-03
		{"gzip: usage, no [DONE]", role + usage, "gzip", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, h := encodedFixture(tc.body, tc.encoding)
			whole := run(ctSSE, h, Limits{}, [][]byte{body}, false)
			if whole.Complete != tc.complete {
				t.Fatalf("broken off: %s, want complete %v", show(whole), tc.complete)
			}
			if got := run(ctSSE, h, Limits{}, bytewise(body), false); !reflect.DeepEqual(got, whole) {
				t.Fatalf("byte by byte: %s, whole: %s", show(got), show(whole))
			}
			if tc.encoding == "" && endedByProtocol(body) != tc.complete {
				t.Fatalf("the reference reading says ended %v", endedByProtocol(body))
			}
		})
	}
}

// TestStreamEndedByItsTerminalEvent: a stream whose protocol ends it with a terminal
// event is complete though its body was broken off right after that event, when it
// came after the final usage report (or was it): the Responses API's
// response.completed, response.incomplete and response.failed, Anthropic's message_stop
// after message_delta, a transcription's transcript.text.done, speech's
// speech.audio.done, the Interactions API's interaction.completed. An image stream's
// image_generation.completed is not an end: whether n images send one each is not
// documented. A client may close as soon as it reads it (an agent that
// breaks out of its loop there; the SDKs abort the request when it does), before the
// body's end; behind Envoy, ext_proc then saw no end_of_stream, and before 2026-12-03 a
// whole answer was settled incomplete. A Gemini stream has no terminal event (its last
// chunk, with finishReason and the usage, is not said to be the last): broken off, it
// stays incomplete. Nothing else counts: a terminal event not closed by its blank line,
// one before the final report, a compressed body (its coding must end properly).
func TestStreamEndedByItsTerminalEvent(t *testing.T) {
	ev := func(name, data string) string { return "event: " + name + "\ndata: " + data + "\n\n" }
	const (
		respCreated   = `{"type":"response.created","response":{"id":"r","object":"response","model":"gpt-5","status":"in_progress","usage":null}}`
		respDelta     = `{"type":"response.output_text.delta","delta":"Hi"}`
		respCompleted = `{"type":"response.completed","response":{"id":"r","object":"response","model":"gpt-5","status":"completed","usage":{"input_tokens":12,"output_tokens":3}}}`
		msgStart      = `{"type":"message_start","message":{"id":"m","type":"message","model":"claude-sonnet-4-5","usage":{"input_tokens":12,"output_tokens":1}}}`
		msgDelta      = `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}`
		msgUsage      = `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}}`
		msgStop       = `{"type":"message_stop"}`
		geminiLast    = `{"candidates":[{"content":{"parts":[{"text":"Hi"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":12,"candidatesTokenCount":3},"modelVersion":"gemini-2.5-flash"}`
	)
	responses := ev("response.created", respCreated) + ev("response.output_text.delta", respDelta)
	anthropic := ev("message_start", msgStart) + ev("content_block_delta", msgDelta)
	for _, tc := range []struct {
		name     string
		body     string
		encoding string
		complete bool
	}{
		{"responses: completed", responses + ev("response.completed", respCompleted), "", true},
		{"responses: incomplete", responses + ev("response.incomplete", strings.ReplaceAll(respCompleted, "completed", "incomplete")), "", true},
		{"responses: failed with its usage", responses + ev("response.failed", strings.ReplaceAll(respCompleted, "completed", "failed")), "", true},
		{"responses: failed without usage", responses + ev("response.failed", strings.ReplaceAll(respCompleted, `{"input_tokens":12,"output_tokens":3}`, "null")), "", false},
		{"responses: completed with CRLF", strings.ReplaceAll(responses+ev("response.completed", respCompleted), "\n", "\r\n"), "", true},
		{"responses: completed, its blank line not come", responses + strings.TrimSuffix(ev("response.completed", respCompleted), "\n"), "", false},
		{"responses: cut before completed", responses, "", false},
		{"anthropic: message_stop after message_delta", anthropic + ev("message_delta", msgUsage) + ev("message_stop", msgStop), "", true},
		{"anthropic: message_delta alone", anthropic + ev("message_delta", msgUsage), "", false},
		{"anthropic: message_delta, a ping", anthropic + ev("message_delta", msgUsage) + ev("ping", `{"type":"ping"}`), "", false},
		{"anthropic: message_stop not closed", anthropic + ev("message_delta", msgUsage) + "event: message_stop\ndata: " + msgStop + "\n", "", false},
		{"anthropic: message_stop before message_delta", anthropic + ev("message_stop", msgStop) + ev("message_delta", msgUsage), "", false},
		{"anthropic: message_stop without message_delta", anthropic + ev("message_stop", msgStop), "", false},
		// Compressed, the event decoded is the end: what the coding still owes (its last
		// block, its checksum) holds no byte of the answer (since 2026-12-03).
		{"anthropic: gzip", anthropic + ev("message_delta", msgUsage) + ev("message_stop", msgStop), "gzip", true},
		{"anthropic: gzip, its end not come", anthropic + ev("message_delta", msgUsage) + ev("message_stop", msgStop), "gzip-open", true},
		{"anthropic: br, its end not come", anthropic + ev("message_delta", msgUsage) + ev("message_stop", msgStop), "br-open", true},
		{"anthropic: deflate, its end not come", anthropic + ev("message_delta", msgUsage) + ev("message_stop", msgStop), "deflate-open", true},
		{"responses: gzip, its end not come", responses + ev("response.completed", respCompleted), "gzip-open", true},
		{"chat: gzip, its end not come", "data: " + `{"object":"chat.completion.chunk","model":"m","choices":[{"delta":{"content":"Hi"}}]}` + "\n\ndata: " +
			`{"object":"chat.completion.chunk","model":"m","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3}}` + "\n\ndata: [DONE]\n\n", "gzip-open", true},
		{"anthropic: gzip, cut before message_stop", anthropic + ev("message_delta", msgUsage), "gzip-open", false},
		// A checksum that does not match: what was decoded is not to be trusted whole.
		{"anthropic: gzip, its checksum wrong", anthropic + ev("message_delta", msgUsage) + ev("message_stop", msgStop), "gzip-badsum", false},
		{"anthropic, then a responses stream without its end", anthropic + ev("message_delta", msgUsage) + ev("message_stop", msgStop) + responses, "", false},
		{"transcription: transcript.text.done", "data: " + `{"type":"transcript.text.delta","delta":"Hi"}` + "\n\ndata: " +
			`{"type":"transcript.text.done","text":"Hi","usage":{"type":"tokens","input_tokens":12,"output_tokens":3}}` + "\n\n", "", true},
		{"speech: speech.audio.done", "data: " + `{"type":"speech.audio.delta","audio":"AAAA"}` + "\n\ndata: " +
			`{"type":"speech.audio.done","usage":{"input_tokens":12,"output_tokens":3,"total_tokens":15}}` + "\n\n", "", true},
		{"image: image_generation.completed", "event: image_generation.completed\ndata: " +
			`{"type":"image_generation.completed","b64_json":"AAAA","usage":{"input_tokens":12,"output_tokens":3}}` + "\n\n", "", false}, // one per image of n? undocumented: not an end
		{"interactions: interaction.completed", ev("interaction.completed", `{"event_type":"interaction.completed","interaction":{"id":"i","model":"gemini-3-flash-preview","status":"completed","usage":{"total_input_tokens":12,"total_output_tokens":3}}}`), "", true},
		// Gemini's last chunk is no terminal event: nothing says no chunk follows.
		{"gemini: the finishReason chunk", "data: " + geminiLast + "\r\n\r\n", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, h := encodedFixture(tc.body, tc.encoding)
			ended := run(ctSSE, h, Limits{}, [][]byte{body}, true)
			broken := run(ctSSE, h, Limits{}, [][]byte{body}, false)
			if broken.Complete != tc.complete {
				t.Fatalf("broken off: %s, want complete %v", show(broken), tc.complete)
			}
			if want := ended; tc.complete && (!reflect.DeepEqual(broken, want)) {
				t.Fatalf("broken off after its end: %s, ended: %s", show(broken), show(want))
			}
			if got := run(ctSSE, h, Limits{}, bytewise(body), false); !reflect.DeepEqual(got, broken) {
				t.Fatalf("byte by byte: %s, whole: %s", show(got), show(broken))
			}
			if tc.encoding == "" && endedByProtocol(body) != tc.complete {
				t.Fatalf("the reference reading says ended %v", endedByProtocol(body))
			}
		})
	}
}

// encodedFixture is body in encoding ("" for none; "gzip", "br", "deflate"; with
// "-open" each event flushed and the coding not ended, as a streaming server leaves it
// when its client goes; "gzip-badsum" with gzip's CRC-32 changed) and its headers.
func encodedFixture(body, encoding string) ([]byte, map[string]string) {
	b := []byte(body)
	if encoding == "" {
		return b, nil
	}
	coding, how, _ := strings.Cut(encoding, "-")
	switch how {
	case "open":
		b = compressOpen(coding, b)
	case "badsum":
		b = compress(coding, b, nil)
		b[len(b)-8] ^= 0xff
	default:
		b = compress(coding, b, nil)
	}
	return b, map[string]string{"content-encoding": coding}
}
