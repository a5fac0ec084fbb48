package responseusage

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestTextBytes checks what counts as output text, against hand-counted
// values, in every way of cutting the body, and against the reference.
func TestTextBytes(t *testing.T) {
	sse := func(docs ...string) string {
		var b strings.Builder
		for _, d := range docs {
			b.WriteString("data: " + d + "\n\n")
		}
		return b.String()
	}
	chunk := func(delta string) string {
		return `{"object":"chat.completion.chunk","choices":[{"index":0,"delta":` + delta + `}]}`
	}
	cases := []struct {
		name string
		ct   string
		body string
		want int64
	}{
		// Chat completions, streamed.
		{"chat deltas", ctSSE, sse(chunk(`{"role":"assistant","content":""}`), chunk(`{"content":"Hello"}`), chunk(`{"content":" world"}`)), 11},
		{"chat escapes", ctSSE, sse(chunk(`{"content":"a\nb\"c\\d\/e\u00e9\ud83d\ude00"}`)), 9 + 2 + 4},
		{"chat lone surrogates are U+FFFD", ctSSE, sse(chunk(`{"content":"\ud800x\udc00\ud800\u0041"}`)), 3 + 1 + 3 + 3 + 1},
		{"chat invalid UTF-8 bytes are U+FFFD each", ctSSE, sse(chunk("{\"content\":\"a\xff\xe2\x82\"}")), 1 + 3 + 3 + 3},
		{"chat truncated sequence before an escape", ctSSE, sse(chunk("{\"content\":\"\xe2\\n\"}")), 3 + 1},
		{"chat surrogate encoded in UTF-8 is three U+FFFD", ctSSE, sse(chunk("{\"content\":\"\xed\xa0\x80\"}")), 9},
		{"chat overlong encoding", ctSSE, sse(chunk("{\"content\":\"\xc0\xaf\xe0\x80\xaf\"}")), 15},
		{"chat four-byte and three-byte runes", ctSSE, sse(chunk(`{"content":"日本😀"}`)), 10},
		{"chat refusal and reasoning", ctSSE, sse(chunk(`{"refusal":"no"}`), chunk(`{"reasoning_content":"think"}`), chunk(`{"reasoning":"more"}`)), 2 + 5 + 4},
		{"chat tool call arguments", ctSSE, sse(chunk(`{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]}`),
			chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]}`), chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]}`)), 8 + 8},
		{"chat legacy function_call", ctSSE, sse(chunk(`{"function_call":{"name":"f","arguments":"{}"}}`)), 2},
		{"several choices all count", ctSSE, sse(`{"choices":[{"delta":{"content":"ab"}},{"delta":{"content":"cde"}}]}`), 5},
		{"content that is not a string", ctSSE, sse(chunk(`{"content":null}`), chunk(`{"content":["x"]}`), chunk(`{"content":{"text":"x"}}`), chunk(`{"content":7}`)), 0},
		{"names and roles are not text", ctSSE, sse(chunk(`{"role":"assistant","name":"bob","type":"text"}`)), 0},
		{"a repeated key counts each time", ctSSE, sse(chunk(`{"content":"ab","content":"c"}`)), 3},
		{"an unfinished event counts nothing", ctSSE, sse(`{"choices":[{"delta":{"content":"abc"}}]`, chunk(`{"content":"de"}`)), 2},
		{"a value before garbage in an event counts", ctSSE, sse(chunk(`{"content":"abc"}`)+` x`, chunk(`{"content":"de"}`)), 5},
		{"text at another depth is not counted", ctSSE, sse(`{"content":"x","choices":{"delta":{"content":"y"}},"x":{"choices":[{"delta":{"content":"z"}}]}}`), 0},
		// Legacy completions.
		{"completions text", ctSSE, sse(`{"object":"text_completion","choices":[{"text":"abc","index":0}]}`), 3},
		// Chat and completions, not streamed.
		{"chat message", ctJSON, `{"object":"chat.completion","choices":[{"message":{"role":"assistant","content":"Hi there","refusal":null,"tool_calls":[{"type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]}}]}`, 8 + 7},
		{"completions json", ctJSON, `{"object":"text_completion","choices":[{"text":"\n\nabc"}]}`, 5},
		// Responses API.
		{"responses text deltas", ctSSE, sse(`{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hel"}`,
			`{"type":"response.output_text.delta","delta":"lo"}`, `{"type":"response.output_text.done","text":"Hello"}`,
			`{"type":"response.completed","response":{"output":[{"type":"message","content":[{"type":"output_text","text":"Hello"}]}],"usage":{"input_tokens":1,"output_tokens":2}}}`), 5},
		{"responses type after the delta", ctSSE, sse(`{"delta":"abc","type":"response.output_text.delta"}`), 3},
		{"responses other deltas", ctSSE, sse(`{"type":"response.function_call_arguments.delta","delta":"{}"}`, `{"type":"response.reasoning_summary_text.delta","delta":"hmm"}`,
			`{"type":"response.refusal.delta","delta":"no"}`, `{"type":"response.code_interpreter_call_code.delta","delta":"x=1"}`), 2 + 3 + 2 + 3},
		{"responses audio is not text", ctSSE, sse(`{"type":"response.audio.delta","delta":"AAAA"}`, `{"type":"response.audio_transcript.delta","delta":"hi"}`), 2},
		{"a top-level delta of another event", ctSSE, sse(`{"type":"response.output_text.done","delta":"abc"}`, `{"delta":"abc"}`, `{"type":"x.delta","delta":"abc"}`), 0},
		{"responses json", ctJSON, `{"object":"response","output":[{"type":"reasoning","summary":[{"type":"summary_text","text":"plan"}]},` +
			`{"type":"message","content":[{"type":"output_text","text":"Done."},{"type":"refusal","refusal":"no"}]},` +
			`{"type":"function_call","name":"f","arguments":"{\"x\":2}"}]}`, 4 + 5 + 2 + 7},
		// OpenAI transcriptions: streamed, the deltas count and not the full text
		// transcript.text.done repeats; not streamed, the top-level text does not
		// count (whisper-1 bills the audio's duration, not output tokens).
		{"transcript deltas", ctSSE, sse(`{"type":"transcript.text.delta","delta":"Hel"}`, `{"delta":"lo \u00e9","type":"transcript.text.delta"}`,
			`{"type":"transcript.text.done","text":"Hello \u00e9","usage":{"input_tokens":1,"output_tokens":2}}`), 3 + 5},
		{"transcription json text", ctJSON, `{"text":"Hello.","usage":{"type":"duration","seconds":1}}`, 0},
		{"transcription verbose_json segments", ctJSON, `{"task":"transcribe","text":"Hello.","segments":[{"text":"Hello."}],"words":[{"word":"Hello"}]}`, 0},
		// Anthropic.
		{"anthropic deltas", ctSSE, sse(`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
			`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}`,
			`{"type":"content_block_delta","index":1,"delta":{"type":"thinking_delta","thinking":"hmm"}}`,
			`{"type":"content_block_delta","index":1,"delta":{"type":"signature_delta","signature":"c2ln"}}`,
			`{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"a\": 1}"}}`,
			`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":9}}`), 2 + 3 + 8},
		{"anthropic json with a tool call", ctJSON, `{"type":"message","content":[{"type":"thinking","thinking":"hm","signature":"xyz"},{"type":"text","text":"Sure."},` +
			`{"type":"tool_use","id":"t","name":"f","input":{"city": "Paris", "n": [1, 2]}}]}`, 2 + 5 + int64(len(`{"city": "Paris", "n": [1, 2]}`))},
		{"anthropic tool input that is not an object", ctJSON, `{"type":"message","content":[{"type":"tool_use","input":"abc"},{"type":"tool_use","input":7}]}`, 0},
		{"anthropic tool input with nested strings and escapes", ctJSON, `{"content":[{"input":{"q":"a\"b\u00e9","deep":{"text":"x"}}}]}`,
			int64(len(`{"q":"a\"b\u00e9","deep":{"text":"x"}}`))},
		{"anthropic tool input cut is not counted", ctJSON, `{"content":[{"type":"text","text":"ab"},{"input":{"q":"abc"`, 2},
		{"json cut inside the text counts what was seen", ctJSON, `{"choices":[{"message":{"content":"Hello wor`, 9},
		{"json body with an error after the text", ctJSON, `{"choices":[{"message":{"content":"Hello"}}]} x`, 5},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body := []byte(tc.body)
			check := func(how string, chunks [][]byte) {
				t.Helper()
				if got := run(tc.ct, nil, Limits{}, chunks, true); got.TextBytes != tc.want || got.TextBytesFromRaw {
					t.Fatalf("%s: %s, want text %d", how, show(got), tc.want)
				}
			}
			check("whole", [][]byte{body})
			check("byte by byte", bytewise(body))
			for i := 0; i <= len(body); i++ {
				check(fmt.Sprintf("split at %d", i), splitAt(body, i))
			}
			r := rand.New(rand.NewPCG(seedOf(t.Name()), 3))
			for i := range 50 {
				check(fmt.Sprintf("random split %d", i), randomSplit(body, r))
			}
			for _, enc := range encodings {
				if got := run(tc.ct, enc.headers(), Limits{}, randomSplit(enc.apply(body, r), r), true); got.TextBytes != tc.want {
					t.Fatalf("%s: %s, want text %d", enc, show(got), tc.want)
				}
			}
			ref, ok := oracleFor(tc.ct, body)
			if !ok {
				return
			}
			if ref.TextBytes != tc.want {
				t.Fatalf("reference: %s, want text %d", show(ref), tc.want)
			}
		})
	}
}

// TestUTF8Count compares the streaming count with decoding each string
// whole, over strings made of pieces of valid and invalid UTF-8, cut
// everywhere.
func TestUTF8Count(t *testing.T) {
	pieces := []string{"a", "é", "日", "😀", "\xff", "\x80", "\xc2", "\xe2\x82", "\xf0\x9f\x98", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xc0\xaf", "\xe0\x80\xaf", "\xf5", "\x7f"}
	r := rand.New(rand.NewPCG(7, 8))
	for range 2000 {
		var b strings.Builder
		for range 1 + r.IntN(8) {
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
		s := []byte(b.String())
		// Each byte outside valid UTF-8 becomes U+FFFD, as encoding/json
		// decodes it.
		var want int64
		for p := s; len(p) > 0; {
			r, n := utf8.DecodeRune(p)
			want += int64(utf8.RuneLen(r))
			p = p[n:]
		}
		for cut := 0; cut <= len(s); cut++ {
			var u utf8Count
			got := u.count(s[:cut]) + u.count(s[cut:]) + u.end()
			if got != want {
				t.Fatalf("%q cut at %d: %d, want %d", s, cut, got, want)
			}
		}
	}
}
