package responseusage

import (
	"fmt"
	"strings"
	"testing"
)

// A stream's response.output_item.added events carry a web_search_call item before its
// action: such an item is a search only perhaps. A response whose web_search_call items
// all opened pages or searched within them is charged no search, streamed as not; a
// stream cut right after an item was added, its action unseen, is charged it.
func TestWebSearchItemsAddedBeforeTheirAction(t *testing.T) {
	actions := []string{`{"type":"open_page","url":"https://example.com/a"}`, `{"type":"find_in_page","url":"https://example.com/a","pattern":"toll"}`}
	var b strings.Builder
	b.WriteString("data: " + `{"type":"response.created","response":{"object":"response","model":"o3-2025-04-16","output":[]}}` + "\n\n")
	var items []string
	for i, a := range actions {
		fmt.Fprintf(&b, "data: {\"type\":\"response.output_item.added\",\"output_index\":%d,\"item\":{\"type\":\"web_search_call\",\"id\":\"ws_%d\",\"status\":\"in_progress\"}}\n\n", i, i+1)
		fmt.Fprintf(&b, "data: {\"type\":\"response.web_search_call.completed\",\"output_index\":%d,\"item_id\":\"ws_%d\"}\n\n", i, i+1)
		fmt.Fprintf(&b, "data: {\"type\":\"response.output_item.done\",\"output_index\":%d,\"item\":{\"type\":\"web_search_call\",\"id\":\"ws_%d\",\"status\":\"completed\",\"action\":%s}}\n\n", i, i+1, a)
		items = append(items, fmt.Sprintf(`{"type":"web_search_call","id":"ws_%d","status":"completed","action":%s}`, i+1, a))
	}
	resp := `{"id":"resp_3","object":"response","model":"o3-2025-04-16","status":"completed","output":[` + strings.Join(items, ",") +
		`,{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Tolls rose.","annotations":[]}]}],` +
		`"usage":{"input_tokens":9000,"input_tokens_details":{"cached_tokens":0},"output_tokens":700,"output_tokens_details":{"reasoning_tokens":500},"total_tokens":9700}}`
	b.WriteString("data: " + `{"type":"response.completed","response":` + resp + `}` + "\n\n")
	if n := run("text/event-stream", nil, Limits{}, [][]byte{[]byte(b.String())}, true).WebSearchRequests; n != 0 {
		t.Errorf("streamed: %d web searches for page actions alone, want 0", n)
	}
	if n := run(ctJSON, nil, Limits{}, [][]byte{[]byte(resp)}, true).WebSearchRequests; n != 0 {
		t.Errorf("not streamed: %d web searches for page actions alone, want 0", n)
	}

	cut := "data: " + `{"type":"response.created","response":{"object":"response","model":"o3-2025-04-16","output":[]}}` + "\n\n" +
		"data: " + `{"type":"response.output_item.added","output_index":0,"item":{"type":"web_search_call","id":"ws_1","status":"in_progress"}}` + "\n\n"
	if n := run("text/event-stream", nil, Limits{}, [][]byte{[]byte(cut)}, false).WebSearchRequests; n != 1 {
		t.Errorf("cut after an item was added: %d web searches, want 1 (its action unseen, perhaps a search)", n)
	}
}

// An Anthropic stream reports its web searches only in its usage (message_delta's
// server_tool_use.web_search_requests): cut before its last message_delta, the searches
// its web_search_tool_result blocks showed are charged all the same (each a search
// Anthropic bills), not 0, as an OpenAI stream cut after its searches is. A result that
// is an error (web_search_tool_result_error: Anthropic bills no failed search) is not
// counted; a stream whose usage came is charged its usage's count. The stream's
// search blocks are read whatever the chunking (checkSplits).
func TestAnthropicStreamCutAfterItsSearches(t *testing.T) {
	start := "event: message_start\ndata: " + `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"usage":{"input_tokens":2679,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":3,"server_tool_use":{"web_search_requests":0}}}}` + "\n\n"
	search := func(i int, result string) string {
		return "event: content_block_start\ndata: " + fmt.Sprintf(`{"type":"content_block_start","index":%d,"content_block":{"type":"server_tool_use","id":"srvtoolu_%d","name":"web_search","input":{}}}`, 2*i, i) + "\n\n" +
			"event: content_block_delta\ndata: " + fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":{"type":"input_json_delta","partial_json":"{\"query\": \"tolls\"}"}}`, 2*i) + "\n\n" +
			"event: content_block_stop\ndata: " + fmt.Sprintf(`{"type":"content_block_stop","index":%d}`, 2*i) + "\n\n" +
			"event: content_block_start\ndata: " + fmt.Sprintf(`{"type":"content_block_start","index":%d,"content_block":{"type":"web_search_tool_result","tool_use_id":"srvtoolu_%d","content":%s}}`, 2*i+1, i, result) + "\n\n" +
			"event: content_block_stop\ndata: " + fmt.Sprintf(`{"type":"content_block_stop","index":%d}`, 2*i+1) + "\n\n"
	}
	found := `[{"type":"web_search_result","title":"Tolls","url":"https://example.com/tolls","encrypted_content":"EqgfCioIARgBIiQ3","page_age":null}]`
	failed := `{"type":"web_search_tool_result_error","error_code":"max_uses_exceeded"}`
	text := "event: content_block_start\ndata: " + `{"type":"content_block_start","index":9,"content_block":{"type":"text","text":""}}` + "\n\n" +
		"event: content_block_delta\ndata: " + `{"type":"content_block_delta","index":9,"delta":{"type":"text_delta","text":"Tolls rose."}}` + "\n\n"
	end := "event: message_delta\ndata: " + `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"input_tokens":10682,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":510,"server_tool_use":{"web_search_requests":2}}}` + "\n\n" +
		"event: message_stop\ndata: " + `{"type":"message_stop"}` + "\n\n"
	cut := start + search(0, found) + search(1, found) + search(2, failed) + text
	for _, tc := range []struct {
		name string
		body string
		eos  bool
		want int64
	}{
		{"cut after two searches and a failed one", cut, false, 2},
		{"cut after one search", start + search(0, found), false, 1},
		{"cut after a failed search", start + search(0, failed), false, 0},
		{"whole: its usage's count", cut + end, true, 2},
		{"whole, the usage counting fewer than the blocks: the usage's", start + search(0, found) + search(1, found) + search(2, found) + text + end, true, 2},
	} {
		for _, chunks := range [][][]byte{{[]byte(tc.body)}, bytewise([]byte(tc.body))} {
			if got := run(ctSSE, nil, Limits{}, chunks, tc.eos).WebSearchRequests; got != tc.want {
				t.Errorf("%s (%d chunks): %d web searches, want %d", tc.name, len(chunks), got, tc.want)
			}
		}
	}
}
