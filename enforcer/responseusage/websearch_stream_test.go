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
