package usagechunk_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/usagechunk"
)

// The events of a chat-completions stream asked for its usage, as OpenAI sends them.
const (
	roleEvent   = `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1767225600,"model":"gpt-5.4","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}],"usage":null}` + "\n\n"
	wordEvent   = `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1767225600,"model":"gpt-5.4","choices":[{"index":0,"delta":{"content":"Hello"},"finish_reason":null}],"usage":null}` + "\n\n"
	finishEvent = `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1767225600,"model":"gpt-5.4","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}` + "\n\n"
	usageEvent  = `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1767225600,"model":"gpt-5.4","choices":[],"usage":{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18}}` + "\n\n"
	doneEvent   = "data: [DONE]\n\n"
	// Azure OpenAI's first event: empty choices and the prompt's filter results, no usage.
	azureFilterEvent = `data: {"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[{"prompt_index":0,"content_filter_results":{}}]}` + "\n\n"
)

// passInReads passes stream through a Filter in reads of the given sizes (the last
// repeated), as the gateway's relay would, and returns what the client receives.
func passInReads(t *testing.T, stream string, sizes ...int) (string, *usagechunk.Filter) {
	t.Helper()
	var f usagechunk.Filter
	var out bytes.Buffer
	in := []byte(stream)
	for i := 0; len(in) > 0; i++ {
		n := sizes[min(i, len(sizes)-1)]
		n = min(n, len(in))
		read := append([]byte(nil), in[:n]...) // the relay's buffer, which Pass may rewrite
		in = in[n:]
		out.Write(f.Pass(read))
	}
	out.Write(f.End())
	return out.String(), &f
}

func TestTheUsageEventIsLeftOutWhateverTheReads(t *testing.T) {
	for _, nl := range []string{"\n", "\r\n", "\r"} {
		ends := func(s string) string { return strings.ReplaceAll(s, "\n", nl) }
		stream := ends(roleEvent + wordEvent + wordEvent + finishEvent + usageEvent + doneEvent)
		want := ends(roleEvent + wordEvent + wordEvent + finishEvent + doneEvent)
		for size := 1; size <= len(stream); size++ {
			got, f := passInReads(t, stream, size)
			if got != want || !f.Dropped() {
				t.Fatalf("line ends %q, reads of %d bytes: dropped %v, the client got\n%q\nwant\n%q", nl, size, f.Dropped(), got, want)
			}
		}
		// Every split of the stream in two reads, the usage event's own bytes among them.
		for cut := 0; cut <= len(stream); cut++ {
			got, _ := passInReads(t, stream, cut+boolInt(cut == 0), len(stream))
			if got != want {
				t.Fatalf("line ends %q, cut at %d: the client got\n%q\nwant\n%q", nl, cut, got, want)
			}
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestOtherEventsPassByteForByte(t *testing.T) {
	cases := map[string]string{
		"a stream not asked for its usage":                          roleEvent + wordEvent + finishEvent + doneEvent,
		"Azure's content-filter event, empty choices without usage": azureFilterEvent + roleEvent + finishEvent + doneEvent,
		"choices empty only inside a string":                        `data: {"choices":[{"index":0,"delta":{"content":"\"choices\":[], \"usage\":{}"}}],"usage":null}` + "\n\n" + doneEvent,
		"choices empty only in a nested object":                     `data: {"choices":[{"index":0,"delta":{"x":{"choices":[],"usage":{"prompt_tokens":1}}}}],"usage":null}` + "\n\n" + doneEvent,
		"empty choices, usage null":                                 `data: {"choices":[],"usage":null}` + "\n\n" + doneEvent,
		"a comment and an event field":                              ": OPENROUTER PROCESSING\n\nevent: message\n" + wordEvent + doneEvent,
		"not JSON":                                                  "data: {\"choices\":[], usage\n\n" + doneEvent,
		"a last event never ended":                                  roleEvent + `data: {"choices":[],"usage":{"prompt_tokens":1}}`,
	}
	for name, stream := range cases {
		t.Run(name, func(t *testing.T) {
			for _, size := range []int{1, 7, 64, len(stream)} {
				got, f := passInReads(t, stream, size)
				if got != stream || f.Dropped() {
					t.Fatalf("reads of %d: dropped %v, the client got\n%q\nwant it unchanged", size, f.Dropped(), got)
				}
			}
		})
	}
}

func TestUsageEventsAsOtherServersWriteThem(t *testing.T) {
	for name, event := range map[string]string{
		"white space in the JSON (Python's json.dumps)": `data: {"id": "x", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}}` + "\n\n",
		"no space after data:":                          `data:{"choices":[],"usage":{"prompt_tokens":3}}` + "\n\n",
		"the JSON over two data lines":                  "data: {\"choices\":[],\ndata: \"usage\":{\"prompt_tokens\":3}}\n\n",
		"an id field before it":                         "id: 42\n" + `data: {"choices":[],"usage":{"prompt_tokens":3}}` + "\n\n",
	} {
		t.Run(name, func(t *testing.T) {
			got, f := passInReads(t, wordEvent+event+doneEvent, 5)
			if want := wordEvent + doneEvent; got != want || !f.Dropped() {
				t.Fatalf("dropped %v, the client got\n%q\nwant\n%q", f.Dropped(), got, want)
			}
		})
	}
}

// An event longer than the bound (a server that sends a whole tool call, or a whole
// answer, as one chunk) is passed on as it comes, and the filtering goes on after its
// end: the usage event that follows is still left out, whatever the reads (before
// 2026-12-07 the long event ended the filtering, and a client that had not asked for the
// usage got it, and indexed its empty choices).
func TestALongEventPassesAndTheFilteringGoesOn(t *testing.T) {
	for _, eol := range []string{"\n", "\r\n", "\r"} {
		long := `data: {"choices":[{"index":0,"delta":{"content":"` + strings.Repeat("a", 2*usagechunk.MaxEventBytes) + `"}}],"usage":null}` + eol + eol
		fix := func(e string) string { return strings.ReplaceAll(e, "\n\n", eol+eol) }
		stream := fix(roleEvent) + long + fix(wordEvent) + fix(usageEvent) + fix(doneEvent)
		want := fix(roleEvent) + long + fix(wordEvent) + fix(doneEvent)
		for _, size := range []int{1, 2, 3, 1000, usagechunk.MaxEventBytes + 1, len(long) - 1, len(stream)} {
			got, f := passInReads(t, stream, size)
			if got != want || !f.Dropped() {
				t.Fatalf("line ends %q, reads of %d: dropped %v, %d bytes out, want %d", eol, size, f.Dropped(), len(got), len(want))
			}
		}
		// A long event split where its blank line is.
		cut := len(fix(roleEvent)) + len(long) - len(eol)
		for _, sizes := range [][]int{{cut, 1 << 20}, {cut - 1, 1 << 20}, {cut + 1, 1 << 20}, {cut - 1, 1, 1, 1, 1 << 20}} {
			got, f := passInReads(t, stream, sizes...)
			if got != want || !f.Dropped() {
				t.Fatalf("line ends %q, reads %v: dropped %v, %d bytes out, want %d", eol, sizes, f.Dropped(), len(got), len(want))
			}
		}
	}
}

// Nothing of a long event is held back: each read of it goes on as it comes.
func TestALongEventIsNotHeldBack(t *testing.T) {
	long := `data: {"choices":[{"index":0,"delta":{"content":"` + strings.Repeat("a", 3*usagechunk.MaxEventBytes) + `"}}],"usage":null}` + "\n\n"
	var f usagechunk.Filter
	in := []byte(long)
	sent := 0
	for len(in) > 0 {
		n := min(4096, len(in))
		sent += len(f.Pass(append([]byte(nil), in[:n]...)))
		in = in[n:]
		if held := len(long) - len(in) - sent; held > usagechunk.MaxEventBytes {
			t.Fatalf("%d bytes held back, more than the bound", held)
		}
	}
	if sent != len(long) {
		t.Fatalf("%d bytes sent of %d", sent, len(long))
	}
}

func TestNothingIsHeldBackWhenReadsEndEvents(t *testing.T) {
	var f usagechunk.Filter
	for _, event := range []string{roleEvent, wordEvent + wordEvent, finishEvent} {
		if got := f.Pass([]byte(event)); string(got) != event {
			t.Fatalf("Pass(%q) = %q: an ended event must go on at once", event, got)
		}
	}
	if got := f.Pass([]byte(usageEvent + doneEvent)); string(got) != doneEvent {
		t.Fatalf("Pass(usage and [DONE]) = %q, want only [DONE]", got)
	}
	if rest := f.End(); len(rest) != 0 {
		t.Fatalf("End() = %q, want nothing", rest)
	}
}

func TestApplies(t *testing.T) {
	for _, c := range []struct {
		status          int
		ctype, encoding string
		want            bool
	}{
		{200, "text/event-stream", "", true},
		{200, "text/event-stream; charset=utf-8", "identity", true},
		{200, "TEXT/EVENT-STREAM", "", true},
		{200, "text/event-stream", "gzip", false},
		{200, "application/json", "", false},
		{429, "text/event-stream", "", false},
		{200, "", "", false},
	} {
		if got := usagechunk.Applies(c.status, c.ctype, c.encoding); got != c.want {
			t.Errorf("Applies(%d, %q, %q) = %v, want %v", c.status, c.ctype, c.encoding, got, c.want)
		}
	}
}

func FuzzFilterLeavesOutOnlyTheUsageEvent(f *testing.F) {
	f.Add(roleEvent+wordEvent+usageEvent+doneEvent, 3)
	f.Add(azureFilterEvent+usageEvent, 50)
	f.Add("data: x\r\n\r\ndata: {\"choices\":[],\"usage\":{}}\r\r", 2)
	f.Fuzz(func(t *testing.T, stream string, size int) {
		if size <= 0 || size > 1<<12 {
			return
		}
		got, filter := passInReads(t, stream, size)
		whole, _ := passInReads(t, stream, len(stream)+1)
		if got != whole {
			t.Fatalf("reads of %d gave %q, one read %q", size, got, whole)
		}
		if !filter.Dropped() {
			if got != stream {
				t.Fatalf("nothing dropped, yet the stream changed: %q -> %q", stream, got)
			}
			return
		}
		// What was left out is one whole usage event, taken from where it stood.
		for i := 0; i <= len(got); i++ {
			if strings.HasPrefix(stream, got[:i]) && strings.HasSuffix(stream, got[i:]) && len(stream) > len(got) {
				if usagechunk.IsUsageEvent([]byte(stream[i : i+len(stream)-len(got)])) {
					return
				}
			}
		}
		t.Fatalf("%q -> %q: what was left out is not a usage event", stream, got)
	})
}
