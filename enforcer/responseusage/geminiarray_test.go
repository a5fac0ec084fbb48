package responseusage

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// geminiStreamFixture is the usage of testdata/gemini_stream.sse and of
// testdata/gemini_stream.json, the same three chunks as events and as a JSON array.
func geminiStreamFixture(format string) Usage {
	return Usage{Model: "gemini-2.5-flash", InputTokens: 1234, OutputTokens: 567 + 100, CachedInputTokens: 512,
		AudioInputTokens: 234, AudioInputReported: true, AudioOutputReported: true, CachedAudioInputReported: true,
		Complete: true, Format: format, InputReported: true, OutputReported: true, TextBytes: 67}
}

// TestGeminiJSONArray: Gemini's streamGenerateContent without alt=sse answers
// application/json, a top-level array of the GenerateContentResponse chunks its event
// stream would carry, each element sent as it is generated. It is read as the event
// stream of the same chunks is (the counts of the largest report, complete at the chunk
// that gives its finishReason, the text of every chunk), in any chunking, and is
// complete only when the array closed; an array of anything else reports no usage.
func TestGeminiJSONArray(t *testing.T) {
	t.Run("the fixture reads as its event stream", func(t *testing.T) {
		want := run(ctSSE, nil, Limits{}, [][]byte{readFixture(t, "gemini_stream.sse")}, true)
		want.Format = FormatGeminiJSONStream
		body := readFixture(t, "gemini_stream.json")
		checkSplits(t, ctJSON, nil, body, want)
		if ref := oracleJSON(body, Limits{}); !reflect.DeepEqual(ref, want) {
			t.Fatalf("reference:\n got %s\nwant %s", show(ref), show(want))
		}
	})

	chunk := func(text, finish, usage string) string {
		c := `{"candidates":[{"content":{"parts":[{"text":"` + text + `"}],"role":"model"}`
		if finish != "" {
			c += `,"finishReason":"` + finish + `"`
		}
		c += `,"index":0}]`
		if usage != "" {
			c += `,"usageMetadata":` + usage
		}
		return c + `,"modelVersion":"gemini-2.5-flash"}`
	}
	array := func(chunks ...string) string { return "[" + strings.Join(chunks, "\r\n,\r\n") + "\r\n]" }
	events := func(chunks ...string) string { return "data: " + strings.Join(chunks, "\r\n\r\ndata: ") + "\r\n\r\n" }
	first := chunk("Tolls ", "", `{"promptTokenCount":12,"totalTokenCount":12}`)
	second := chunk("are ", "", `{"promptTokenCount":12,"candidatesTokenCount":2,"totalTokenCount":14}`)
	last := chunk("paid.", "STOP", `{"promptTokenCount":12,"candidatesTokenCount":3,"thoughtsTokenCount":40,"totalTokenCount":55}`)
	done := Usage{Model: "gemini-2.5-flash", InputTokens: 12, OutputTokens: 43, Complete: true, Format: FormatGeminiJSONStream,
		InputReported: true, OutputReported: true, TextBytes: 15}
	notDone := func(u Usage) Usage { u.Complete = false; return u }
	text := func(u Usage, n int64) Usage { u.TextBytes = n; return u }
	chat := `{"object":"chat.completion.chunk","model":"m","choices":[{"delta":{"content":"Hi"}}],"usage":{"prompt_tokens":1,"completion_tokens":2}}`

	cases := []struct {
		name string
		body string
		// sse, when set, is the event stream the array must read as (its Format aside;
		// Complete too when the array did not close).
		sse  string
		want Usage
	}{
		{"chunks", array(first, second, last), events(first, second, last), done},
		{"compact, no white space", "[" + first + "," + second + "," + last + "]", events(first, second, last), done},
		{"usage only in the last element", array(chunk("Tolls ", "", ""), chunk("are ", "", ""), last), events(chunk("Tolls ", "", ""), chunk("are ", "", ""), last), done},
		{"a later, smaller report does not lower a count", array(last, second), events(last, second), text(done, 9)},
		{"without the chunk that gives its finishReason: not complete", array(first, second), events(first, second),
			Usage{Model: "gemini-2.5-flash", InputTokens: 12, OutputTokens: 2, Format: FormatGeminiJSONStream, InputReported: true, OutputReported: true, TextBytes: 10}},
		// Cut: the elements read in full count (their text too), the one cut does not,
		// and an array that did not close is not complete, even with its last chunk.
		{"cut before the closing bracket", "[" + first + "\r\n,\r\n" + second + "\r\n,\r\n" + last, events(first, second, last), notDone(done)},
		{"cut inside an element", "[" + first + "\r\n,\r\n" + last[:len(last)-20], events(first),
			Usage{Model: "gemini-2.5-flash", InputTokens: 12, Format: FormatGeminiJSONStream, InputReported: true, OutputReported: true, TextBytes: 6}},
		{"cut after a comma", "[" + first + ",", events(first),
			Usage{Model: "gemini-2.5-flash", InputTokens: 12, Format: FormatGeminiJSONStream, InputReported: true, OutputReported: true, TextBytes: 6}},
		{"only the bracket", "[", "", Usage{}},
		{"empty array", "[]", "", Usage{}},
		{"empty array with white space", " \r\n[ \r\n ] \n", "", Usage{}},
		{"white space after the array", array(first, last) + " \r\n", events(first, last), text(done, 11)},
		// Malformed: the elements before the error count, the body is not complete.
		{"garbage after the array", array(first, last) + "x", events(first, last), notDone(text(done, 11))},
		{"two arrays", array(first, last) + "[]", events(first, last), notDone(text(done, 11))},
		{"a trailing comma", "[" + last + ",]", events(last), notDone(text(done, 5))},
		{"a missing comma", "[" + first + " " + last + "]", events(first),
			Usage{Model: "gemini-2.5-flash", InputTokens: 12, Format: FormatGeminiJSONStream, InputReported: true, OutputReported: true, TextBytes: 6}},
		{"a leading comma", "[," + last + "]", "", Usage{}},
		{"a malformed element", "[" + first + ",{\"candidates\":x}," + last + "]", events(first),
			Usage{Model: "gemini-2.5-flash", InputTokens: 12, Format: FormatGeminiJSONStream, InputReported: true, OutputReported: true, TextBytes: 6}},
		// Not Gemini: no other API answers with an array of its usage reports; their
		// usage is not read (the text at a text path counts, as in an event of no shape).
		{"Hugging Face's text generation", `[{"generated_text":"Tolls are paid."}]`, "", Usage{}},
		{"embeddings as an array of vectors", `[[0.1,-0.2,3e-05],[0.4,0.5,-6]]`, "", Usage{}},
		{"an array of embeddings lists", `[{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1]}],"model":"text-embedding-3-small","usage":{"prompt_tokens":8,"total_tokens":8}}]`,
			"", Usage{}},
		{"an array of chat chunks", "[" + chat + "," + chat + "]", "", Usage{TextBytes: 4}},
		{"an array of Anthropic and Responses events", `[{"type":"message_start","message":{"model":"c","usage":{"input_tokens":4,"output_tokens":1}}},` +
			`{"type":"response.completed","response":{"model":"r","usage":{"input_tokens":1,"output_tokens":2}}}]`, "", Usage{}},
		{"scalars", `[1,"x",true,null,{},[]]`, "", Usage{}},
		{"a Gemini chunk nested deeper is no chunk", "[" + array(first, last) + "]", "", Usage{}},
		{"a Gemini chunk as the body's only value is a generateContent answer", last, "",
			Usage{Model: "gemini-2.5-flash", InputTokens: 12, OutputTokens: 43, Complete: true, Format: FormatGemini, InputReported: true, OutputReported: true, TextBytes: 5}},
		{"other elements among Gemini chunks: only the chunks' usage", array(chat, first, chat, last), events(chat, first, chat, last),
			text(done, 15)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body := []byte(tc.body)
			checkSplits(t, ctJSON, nil, body, tc.want)
			if json.Valid(body) {
				if ref := oracleJSON(body, Limits{}); !reflect.DeepEqual(ref, tc.want) {
					t.Fatalf("reference:\n got %s\nwant %s", show(ref), show(tc.want))
				}
			}
			if tc.sse != "" {
				ref := oracleSSE([]byte(tc.sse), Limits{})
				ref.Format = FormatGeminiJSONStream
				ref.Complete = ref.Complete && tc.want.Complete
				if !reflect.DeepEqual(ref, tc.want) {
					t.Fatalf("the event stream of the same chunks:\n got %s\nwant %s", show(ref), show(tc.want))
				}
			}
			// Broken off anywhere, complete only once the array closed (its syntax ends it:
			// a client's JSON decoder may stop at its ']' and close; since 2026-12-03), and
			// the same however it was cut.
			for n := 0; n <= len(body); n++ {
				got := run(ctJSON, nil, Limits{}, [][]byte{body[:n]}, false)
				if again := run(ctJSON, nil, Limits{}, bytewise(body[:n]), false); got.Complete && !endedAt(ctJSON, body[:n]) || !reflect.DeepEqual(got, again) {
					t.Fatalf("broken off after %d bytes: %s whole, %s byte by byte", n, show(got), show(again))
				}
			}
			if got := run(ctJSON, nil, Limits{}, [][]byte{body}, false); got.Complete != (tc.want.Complete && endedAt(ctJSON, body)) {
				t.Fatalf("broken off at its end: %s", show(got))
			}
		})
	}
}
