package responseusage

import (
	"reflect"
	"strings"
	"testing"
)

// Mistral's Conversations API (POST /v1/conversations and its continuations, stream=true)
// streams its answer in message.output.delta events (content: a string, or a chunk:
// {"type":"text","text"}, {"type":"thinking","thinking":[{"type":"text","text"}]}) and
// its function calls in function.call.delta events (arguments), then its usage in
// conversation.response.done. Cut before that event, the stream is estimated from the
// output it carried, as a chat stream is from its deltas: its text, thinking and
// arguments count; not the model's name or its ids.
func TestMistralConversationStreamText(t *testing.T) {
	const text, think, args = "Tolls are paid.", "The user asks about tolls.", `{"city":"Paris"}`
	stream := "event: conversation.response.started\ndata: {\"type\":\"conversation.response.started\",\"conversation_id\":\"conv_1\"}\n\n" +
		"event: message.output.delta\ndata: {\"type\":\"message.output.delta\",\"output_index\":0,\"id\":\"msg_1\",\"content_index\":0,\"model\":\"magistral-medium-2509\",\"role\":\"assistant\"," +
		"\"content\":{\"type\":\"thinking\",\"thinking\":[{\"type\":\"text\",\"text\":\"The user asks about tolls.\"}]}}\n\n" +
		"event: message.output.delta\ndata: {\"type\":\"message.output.delta\",\"output_index\":0,\"id\":\"msg_1\",\"content_index\":1,\"model\":\"magistral-medium-2509\",\"role\":\"assistant\",\"content\":\"Tolls are \"}\n\n" +
		"event: message.output.delta\ndata: {\"type\":\"message.output.delta\",\"output_index\":0,\"id\":\"msg_1\",\"content_index\":1,\"model\":\"magistral-medium-2509\",\"role\":\"assistant\",\"content\":{\"type\":\"text\",\"text\":\"paid.\"}}\n\n" +
		"event: function.call.delta\ndata: {\"type\":\"function.call.delta\",\"output_index\":1,\"id\":\"fc_1\",\"model\":\"magistral-medium-2509\",\"name\":\"weather\",\"tool_call_id\":\"call_1\",\"arguments\":\"{\\\"city\\\":\"}\n\n" +
		"event: function.call.delta\ndata: {\"type\":\"function.call.delta\",\"output_index\":1,\"id\":\"fc_1\",\"model\":\"magistral-medium-2509\",\"name\":\"weather\",\"tool_call_id\":\"call_1\",\"arguments\":\"\\\"Paris\\\"}\"}\n\n" +
		"event: conversation.response.done\ndata: {\"type\":\"conversation.response.done\",\"usage\":{\"prompt_tokens\":40,\"completion_tokens\":90,\"total_tokens\":130}}\n\n"
	want := int64(len(text) + len(think) + len(args))
	cut := stream[:strings.Index(stream, "event: conversation.response.done")]
	if got := run(ctSSE, nil, Limits{}, [][]byte{[]byte(cut)}, false); got.Complete || got.OutputReported || got.TextBytes != want {
		t.Fatalf("cut before its usage: text %d, want %d (%s)", got.TextBytes, want, show(got))
	}
	// Not streamed: the answer's outputs[] hold the same, its usage after them.
	body := `{"object":"conversation.response","conversation_id":"conv_1","outputs":[` +
		`{"object":"entry","type":"message.output","id":"msg_1","model":"magistral-medium-2509","role":"assistant","content":[` +
		`{"type":"thinking","thinking":[{"type":"text","text":"` + think + `"}]},{"type":"text","text":"` + text + `"}]},` +
		`{"object":"entry","type":"function.call","id":"fc_1","tool_call_id":"call_1","name":"weather","arguments":"{\"city\":\"Paris\"}"}],` +
		`"usage":{"prompt_tokens":40,"completion_tokens":90,"total_tokens":130}}`
	if got := run(ctJSON, nil, Limits{}, [][]byte{[]byte(body[:strings.Index(body, `"usage"`)])}, false); got.OutputReported || got.TextBytes != want {
		t.Fatalf("an answer cut before its usage: text %d, want %d (%s)", got.TextBytes, want, show(got))
	}
	plain := `{"object":"conversation.response","conversation_id":"conv_1","outputs":[{"object":"entry","type":"message.output","id":"msg_1",` +
		`"role":"assistant","content":"` + text + `"}]`
	if got := run(ctJSON, nil, Limits{}, [][]byte{[]byte(plain)}, false); got.TextBytes != int64(len(text)) {
		t.Fatalf("an answer's content as a string: text %d, want %d (%s)", got.TextBytes, len(text), show(got))
	}
	// The reference reader agrees, whole and cut.
	for _, b := range []string{stream, cut} {
		if got, ref := run(ctSSE, nil, Limits{}, [][]byte{[]byte(b)}, true), oracleSSE([]byte(b), Limits{}); !reflect.DeepEqual(got, ref) {
			t.Fatalf("differs from the reference:\n got %s\n ref %s", show(got), show(ref))
		}
	}
	if got, ref := run(ctJSON, nil, Limits{}, [][]byte{[]byte(body)}, true), oracleJSON([]byte(body), Limits{}); !reflect.DeepEqual(got, ref) {
		t.Fatalf("differs from the reference:\n got %s\n ref %s", show(got), show(ref))
	}
	checkSplits(t, ctSSE, nil, []byte(stream), Usage{Model: "magistral-medium-2509", InputTokens: 40, OutputTokens: 90, Complete: true, Format: FormatOpenAIChatSSE,
		InputReported: true, OutputReported: true, TextBytes: want})
}

// A Mistral conversation names its model only in its output: a continuation
// (POST /v1/conversations/{id}) or an agent's conversation (agent_id) names none in its
// request, and the answer names it in its entries (outputs[].model) or, streamed, in its
// message.output.delta and function.call.delta events. It is read there, so that the
// request is priced at its model's price, not at the fallback price of a model nobody
// named (the catalog's highest).
func TestMistralConversationModel(t *testing.T) {
	stream := "event: conversation.response.started\ndata: {\"type\":\"conversation.response.started\",\"conversation_id\":\"conv_1\"}\n\n" +
		"event: message.output.delta\ndata: {\"type\":\"message.output.delta\",\"output_index\":0,\"id\":\"msg_1\",\"content_index\":0,\"model\":\"mistral-medium-2508\",\"agent_id\":\"ag_1\",\"role\":\"assistant\",\"content\":\"Paid.\"}\n\n" +
		"event: conversation.response.done\ndata: {\"type\":\"conversation.response.done\",\"usage\":{\"prompt_tokens\":40,\"completion_tokens\":3,\"total_tokens\":43}}\n\n"
	checkSplits(t, ctSSE, nil, []byte(stream), Usage{Model: "mistral-medium-2508", InputTokens: 40, OutputTokens: 3, Complete: true,
		Format: FormatOpenAIChatSSE, InputReported: true, OutputReported: true, TextBytes: 5})
	body := `{"object":"conversation.response","conversation_id":"conv_1","outputs":[{"object":"entry","type":"message.output","id":"msg_1",` +
		`"agent_id":"ag_1","model":"mistral-medium-2508","role":"assistant","content":"Paid."}],"usage":{"prompt_tokens":40,"completion_tokens":3,"total_tokens":43}}`
	checkSplits(t, ctJSON, nil, []byte(body), Usage{Model: "mistral-medium-2508", InputTokens: 40, OutputTokens: 3, Complete: true,
		Format: FormatOpenAIChat, InputReported: true, OutputReported: true, TextBytes: 5})
}
