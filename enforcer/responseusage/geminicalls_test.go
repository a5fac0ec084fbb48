package responseusage

import (
	"reflect"
	"strings"
	"testing"
)

// A Gemini answer's function calls (a part's functionCall.args) and the code its code
// execution tool ran (executableCode.code) are output the model generated and Google
// bills, like its text. A stream cut before its last chunk, whose intermediate chunks
// may report no candidates count, or a body cut before its usageMetadata, is estimated
// from the output it carried: those count, the arguments as their JSON text.
func TestGeminiFunctionCallsAndCodeAreOutput(t *testing.T) {
	const text, args, code = "Checking.", `{"city":"Paris","days":3}`, "print(sum(range(10)))"
	chunk := func(part, usage string) string {
		return `data: {"candidates":[{"content":{"parts":[` + part + `],"role":"model"},"index":0}],"usageMetadata":` + usage +
			`,"modelVersion":"gemini-2.5-flash"}` + "\r\n\r\n"
	}
	stream := chunk(`{"text":"`+text+`"}`, `{"promptTokenCount":40,"totalTokenCount":40}`) +
		chunk(`{"functionCall":{"name":"get_weather","args":`+args+`}}`, `{"promptTokenCount":40,"totalTokenCount":40}`) +
		chunk(`{"executableCode":{"language":"PYTHON","code":"`+code+`"}}`, `{"promptTokenCount":40,"totalTokenCount":40}`) +
		chunk(`{"codeExecutionResult":{"outcome":"OUTCOME_OK","output":"45\n"}}`, `{"promptTokenCount":40,"totalTokenCount":40}`)
	want := int64(len(text) + len(args) + len(code))
	if got := run(ctSSE, nil, Limits{}, [][]byte{[]byte(stream)}, false); got.Complete || got.TextBytes != want {
		t.Fatalf("a stream cut before its last chunk: text %d, want %d (%s)", got.TextBytes, want, show(got))
	}
	body := `{"candidates":[{"content":{"parts":[{"text":"` + text + `"},{"functionCall":{"name":"get_weather","args":` + args + `}},` +
		`{"executableCode":{"language":"PYTHON","code":"` + code + `"}}],"role":"model"},"finishReason":"STOP","index":0}],` +
		`"usageMetadata":{"promptTokenCount":40,"candidatesTokenCount":60,"totalTokenCount":100},"modelVersion":"gemini-2.5-flash"}`
	if got := run(ctJSON, nil, Limits{}, [][]byte{[]byte(body[:strings.Index(body, `"usageMetadata"`)])}, false); got.TextBytes != want {
		t.Fatalf("a body cut before its usage: text %d, want %d (%s)", got.TextBytes, want, show(got))
	}
	for _, b := range []string{stream} {
		if got, ref := run(ctSSE, nil, Limits{}, [][]byte{[]byte(b)}, true), oracleSSE([]byte(b), Limits{}); !reflect.DeepEqual(got, ref) {
			t.Fatalf("differs from the reference:\n got %s\n ref %s", show(got), show(ref))
		}
	}
	if got, ref := run(ctJSON, nil, Limits{}, [][]byte{[]byte(body)}, true), oracleJSON([]byte(body), Limits{}); !reflect.DeepEqual(got, ref) ||
		got.OutputTokens != 60 || !got.Complete {
		t.Fatalf("the whole answer, against the reference:\n got %s\n ref %s", show(got), show(ref))
	}
}
