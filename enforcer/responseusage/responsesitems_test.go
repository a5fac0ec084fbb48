package responseusage

import (
	"reflect"
	"strings"
	"testing"
)

// A Responses answer's custom tool calls (custom_tool_call's input: free-form text the
// model wrote, a patch, a query) and its code interpreter calls (code_interpreter_call's
// code) are output the model generated and OpenAI bills, as a function call's arguments
// are. A body cut before its usage is estimated from the output it carried: they count.
// (Streamed, their deltas count already: response.custom_tool_call_input.delta,
// response.code_interpreter_call_code.delta.)
func TestResponsesCustomToolInputAndCodeAreOutput(t *testing.T) {
	const text, input, code = "Applying.", "*** Begin Patch\n*** Update File: a.go\n-x\n+y\n*** End Patch", "print(2 + 2)"
	body := `{"id":"resp_1","object":"response","status":"completed","model":"gpt-5","output":[` +
		`{"type":"message","id":"msg_1","role":"assistant","content":[{"type":"output_text","text":"` + text + `"}]},` +
		`{"type":"custom_tool_call","id":"ctc_1","call_id":"call_1","name":"apply_patch","input":` + quote(input) + `},` +
		`{"type":"code_interpreter_call","id":"ci_1","container_id":"cntr_1","code":"` + code + `","outputs":null,"status":"completed"}],` +
		`"usage":{"input_tokens":100,"output_tokens":60,"total_tokens":160}}`
	want := int64(len(text) + len(input) + len(code))
	if got := run(ctJSON, nil, Limits{}, [][]byte{[]byte(body[:strings.Index(body, `"usage"`)])}, false); got.TextBytes != want {
		t.Fatalf("a body cut before its usage: text %d, want %d (%s)", got.TextBytes, want, show(got))
	}
	if got, ref := run(ctJSON, nil, Limits{}, [][]byte{[]byte(body)}, true), oracleJSON([]byte(body), Limits{}); !reflect.DeepEqual(got, ref) ||
		got.TextBytes != want || got.OutputTokens != 60 {
		t.Fatalf("the whole answer, against the reference:\n got %s\n ref %s", show(got), show(ref))
	}
}

// quote is s as a JSON string (newlines escaped).
func quote(s string) string { return `"` + strings.ReplaceAll(s, "\n", `\n`) + `"` }
