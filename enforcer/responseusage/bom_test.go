package responseusage

import (
	"os"
	"reflect"
	"testing"
)

// TestJSONAnswerWithABOM: a JSON answer that starts with a UTF-8 BOM (which fetch's
// json() and Python's json.loads of bytes skip) reads as the same answer without it,
// its content type JSON or unknown (sniffed), the BOM whole in the first write or split
// across writes, as the SSE reader drops one. Before, the sniffer took it for an event
// stream and the JSON reader failed on its first byte: no usage, no text, an output of
// 0 tokens charged.
func TestJSONAnswerWithABOM(t *testing.T) {
	const bomBytes = "\ufeff"
	for _, f := range []string{"openai_chat.json", "anthropic_messages.json", "openai_responses.json"} {
		body, err := os.ReadFile("testdata/" + f)
		if err != nil {
			t.Fatal(err)
		}
		want := run(ctJSON, nil, Limits{}, [][]byte{body}, true)
		if !want.Complete {
			t.Fatalf("%s: the answer without a BOM is not complete: %s", f, show(want))
		}
		for _, ct := range []string{ctJSON, ""} {
			for name, chunks := range map[string][][]byte{
				"whole":              {append([]byte(bomBytes), body...)},
				"split in the BOM":   {[]byte(bomBytes[:1]), []byte(bomBytes[1:2]), append([]byte(bomBytes[2:]), body...)},
				"the BOM on its own": {[]byte(bomBytes), body},
			} {
				if got := run(ct, nil, Limits{}, chunks, true); !reflect.DeepEqual(got, want) {
					t.Errorf("%s with a BOM (%s), content type %q:\n got %s\nwant %s", f, name, ct, show(got), show(want))
				}
			}
		}
	}
	// Two BOMs, or a BOM's first bytes alone, are no JSON: nothing is taken for an answer.
	for _, b := range []string{bomBytes + bomBytes + `{"usage":{"prompt_tokens":3,"completion_tokens":5}}`, "\xef\xbb" + `{"usage":{"prompt_tokens":3,"completion_tokens":5}}`} {
		if got := run(ctJSON, nil, Limits{}, [][]byte{[]byte(b)}, true); got.Complete || got.OutputTokens != 0 {
			t.Errorf("%q read as %s", b, show(got))
		}
	}
}
