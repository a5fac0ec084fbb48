package responseusage

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"github.com/tollgate-dev/tollgate/pkg/pricecatalog"
)

const ctEventStream = "application/vnd.amazon.eventstream"

// frame is one AWS event stream frame, encoded by AWS's own package.
func frame(t testing.TB, messageType, eventType, payload string) []byte {
	t.Helper()
	var b bytes.Buffer
	msg := eventstream.Message{Payload: []byte(payload)}
	msg.Headers.Set(":message-type", eventstream.StringValue(messageType))
	msg.Headers.Set(":event-type", eventstream.StringValue(eventType))
	msg.Headers.Set(":content-type", eventstream.StringValue("application/json"))
	if err := eventstream.NewEncoder().Encode(&b, msg); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// invokeChunk is a frame of InvokeModelWithResponseStream: the model's event in base64.
func invokeChunk(t testing.TB, event string) []byte {
	return frame(t, "event", "chunk", `{"bytes":"`+base64.StdEncoding.EncodeToString([]byte(event))+`","p":"abcdefgh"}`)
}

// A Claude model's stream through InvokeModelWithResponseStream: Anthropic's events,
// each in a frame, read as Anthropic's stream (usage from message_start and
// message_delta, text from the deltas), in any chunking; cut before its last usage, it
// is not complete and keeps what it saw.
func TestBedrockInvokeStream(t *testing.T) {
	events := []string{
		`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"usage":{"input_tokens":10,"cache_read_input_tokens":2000,"cache_creation_input_tokens":1000,"output_tokens":1}}}`,
		`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Tolls are "}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"paid."}}`,
		`{"type":"content_block_stop","index":0}`,
		`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":50}}`,
		`{"type":"message_stop","amazon-bedrock-invocationMetrics":{"inputTokenCount":10,"outputTokenCount":50,"invocationLatency":900,"firstByteLatency":300}}`,
	}
	var body []byte
	for _, ev := range events {
		body = append(body, invokeChunk(t, ev)...)
	}
	want := Usage{Model: "claude-sonnet-4-5-20250929", InputTokens: 3010, OutputTokens: 50, CachedInputTokens: 2000, CacheCreationInputTokens: 1000,
		Complete: true, Format: FormatAnthropicSSE, InputReported: true, OutputReported: true, TextBytes: int64(len("Tolls are paid."))}
	checkSplits(t, ctEventStream, nil, body, want)

	cut := body[:len(body)-len(invokeChunk(t, events[6]))-len(invokeChunk(t, events[5]))/2]
	got := run(ctEventStream, nil, Limits{}, [][]byte{cut}, false)
	if got.Complete || got.OutputTokens != 1 || got.InputTokens != 3010 || got.TextBytes != want.TextBytes {
		t.Fatalf("cut inside message_delta's frame: %s", show(got))
	}
}

// InvokeModelWithResponseStream of a model whose events are not Anthropic's (Meta's
// Llama, Amazon's Nova, Mistral's, Amazon's Titan, Cohere's): its usage is its last
// chunk's amazon-bedrock-invocationMetrics, read as InvokeModel's headers are (the input
// without the cache reads and writes, made whole), in any chunking; its text is counted
// (Cohere's top-level "text" is not: text.go), so that a stream cut before its last chunk
// is estimated from it. A Claude stream, whose message_stop carries the metrics too, is
// charged as its events say: each count the larger of the two reports.
func TestBedrockInvokeStreamInvocationMetrics(t *testing.T) {
	const metrics = `"amazon-bedrock-invocationMetrics":{"inputTokenCount":42,"outputTokenCount":500,"invocationLatency":900,"firstByteLatency":300}`
	const text = "Tolls are paid."
	reported := Usage{InputTokens: 42, OutputTokens: 500, Complete: true, Format: FormatBedrockInvokeStream, InputReported: true, OutputReported: true,
		TextBytes: int64(len(text))}
	cached := reported
	cached.InputTokens, cached.CachedInputTokens, cached.CacheCreationInputTokens = 42+2000+300, 2000, 300
	for _, tc := range []struct {
		name   string
		events []string
		want   Usage
	}{
		{"llama", []string{
			`{"generation":"Tolls ","prompt_token_count":42,"generation_token_count":1,"stop_reason":null}`,
			`{"generation":"are paid.","prompt_token_count":null,"generation_token_count":3,"stop_reason":null}`,
			`{"generation":"","prompt_token_count":null,"generation_token_count":500,"stop_reason":"stop",` + metrics + `}`,
		}, reported},
		{"nova, with its cache", []string{
			`{"messageStart":{"role":"assistant"}}`,
			`{"contentBlockDelta":{"delta":{"text":"Tolls are "},"contentBlockIndex":0}}`,
			`{"contentBlockDelta":{"delta":{"text":"paid."},"contentBlockIndex":0}}`,
			`{"contentBlockStop":{"contentBlockIndex":0}}`,
			`{"messageStop":{"stopReason":"end_turn"}}`,
			`{"metadata":{"usage":{"inputTokens":42,"outputTokens":500,"cacheReadInputTokenCount":2000,"cacheWriteInputTokenCount":300},"metrics":{},"trace":{}},` +
				`"amazon-bedrock-invocationMetrics":{"inputTokenCount":42,"outputTokenCount":500,"cacheReadInputTokenCount":2000,"cacheWriteInputTokenCount":300,"invocationLatency":900,"firstByteLatency":300}}`,
		}, cached},
		{"mistral", []string{
			`{"outputs":[{"text":"Tolls are ","stop_reason":null}]}`,
			`{"outputs":[{"text":"paid.","stop_reason":"stop"}],` + metrics + `}`,
		}, reported},
		{"titan", []string{
			`{"outputText":"Tolls are paid.","index":0,"totalOutputTextTokenCount":500,"completionReason":"FINISH","inputTextTokenCount":42,` + metrics + `}`,
		}, reported},
		{"cohere: its text not counted", []string{
			`{"is_finished":false,"event_type":"text-generation","text":"Tolls are paid."}`,
			`{"is_finished":true,"event_type":"stream-end","finish_reason":"COMPLETE",` + metrics + `}`,
		}, func() Usage { u := reported; u.TextBytes = 0; return u }()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body []byte
			for _, ev := range tc.events {
				body = append(body, invokeChunk(t, ev)...)
			}
			checkSplits(t, ctEventStream, nil, body, tc.want)
			// Cut before its last chunk: no usage, its text seen.
			cut := body[:len(body)-len(invokeChunk(t, tc.events[len(tc.events)-1]))]
			got := run(ctEventStream, nil, Limits{}, [][]byte{cut}, false)
			wantText := tc.want.TextBytes
			if tc.name == "titan" || tc.name == "mistral" {
				wantText = -1 // the last chunk holds (some of) the text
			}
			if got.Complete || got.InputReported || got.OutputReported || (wantText >= 0 && got.TextBytes != wantText) {
				t.Fatalf("cut before the last chunk: %s", show(got))
			}
		})
	}

	// Claude: the metrics and Anthropic's counts report the same answer (the metrics
	// with its cache counts too): charged as its events say, as TestBedrockInvokeStream.
	claude := []string{
		`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"usage":{"input_tokens":10,"cache_read_input_tokens":2000,"cache_creation_input_tokens":1000,"output_tokens":1}}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Tolls are paid."}}`,
		`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":50}}`,
		`{"type":"message_stop","amazon-bedrock-invocationMetrics":{"inputTokenCount":10,"outputTokenCount":50,"cacheReadInputTokenCount":2000,"cacheWriteInputTokenCount":1000,"invocationLatency":900,"firstByteLatency":300}}`,
	}
	claudeWant := Usage{Model: "claude-sonnet-4-5-20250929", InputTokens: 3010, OutputTokens: 50, CachedInputTokens: 2000, CacheCreationInputTokens: 1000,
		Complete: true, Format: FormatAnthropicSSE, InputReported: true, OutputReported: true, TextBytes: int64(len(text))}
	var body []byte
	for _, ev := range claude {
		body = append(body, invokeChunk(t, ev)...)
	}
	checkSplits(t, ctEventStream, nil, body, claudeWant)
	// Without message_delta's count, the metrics' output stands (the larger), final.
	body = nil
	for _, ev := range slices.Delete(slices.Clone(claude), 2, 3) {
		body = append(body, invokeChunk(t, ev)...)
	}
	if got := run(ctEventStream, nil, Limits{}, [][]byte{body}, true); !reflect.DeepEqual(got, claudeWant) {
		t.Fatalf("a Claude stream whose metrics alone report its output:\n got %s\nwant %s", show(got), show(claudeWant))
	}
	// Metrics missing a count, or not counts, are no report.
	for _, m := range []string{`{"inputTokenCount":42}`, `{"inputTokenCount":42,"outputTokenCount":-1}`, `{"inputTokenCount":42,"outputTokenCount":"500"}`, `null`} {
		got := run(ctEventStream, nil, Limits{}, [][]byte{invokeChunk(t, `{"generation":"Paid.","amazon-bedrock-invocationMetrics":`+m+`}`)}, true)
		if got.InputReported || got.OutputReported || got.Format != "" || got.TextBytes != int64(len("Paid.")) {
			t.Fatalf("metrics %s: %s", m, show(got))
		}
	}
}

// ConverseStream: every model's events in one shape, read for the text of its deltas
// and the usage of its metadata event (Anthropic's counting: the input without the
// cache reads and writes).
func TestBedrockConverseStream(t *testing.T) {
	body := bytes.Join([][]byte{
		frame(t, "event", "messageStart", `{"p":"abc","role":"assistant"}`),
		frame(t, "event", "contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":"Tolls are "},"p":"ab"}`),
		frame(t, "event", "contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":"paid."},"p":"ab"}`),
		frame(t, "event", "contentBlockStop", `{"contentBlockIndex":0}`),
		frame(t, "event", "messageStop", `{"stopReason":"end_turn"}`),
		frame(t, "event", "metadata", `{"metrics":{"latencyMs":412},"usage":{"inputTokens":12,"outputTokens":200,"totalTokens":1424,"cacheReadInputTokens":0,"cacheWriteInputTokens":1212}}`),
	}, nil)
	want := Usage{InputTokens: 1224, OutputTokens: 200, CacheCreationInputTokens: 1212, Complete: true, Format: FormatBedrockConverseStream,
		InputReported: true, OutputReported: true, TextBytes: int64(len("Tolls are paid."))}
	checkSplits(t, ctEventStream, nil, body, want)

	// Cut before the metadata: the text seen, no usage, so that it is estimated.
	cut := body[:bytes.Index(body, []byte(`{"metrics"`))]
	if got := run(ctEventStream, nil, Limits{}, [][]byte{cut}, false); got.Complete || got.InputReported || got.TextBytes != want.TextBytes {
		t.Fatalf("cut before the metadata: %s", show(got))
	}
	// Run at Bedrock's priority tier: its metadata event says so (serviceTier.type).
	last := frame(t, "event", "metadata", `{"metrics":{"latencyMs":412},"usage":{"inputTokens":12,"outputTokens":200,"totalTokens":1424,"cacheReadInputTokens":0,"cacheWriteInputTokens":1212}}`)
	priority := append(bytes.Clone(body[:len(body)-len(last)]), frame(t, "event", "metadata",
		`{"metrics":{"latencyMs":412},"serviceTier":{"type":"priority"},"usage":{"inputTokens":12,"outputTokens":200,"totalTokens":1424,"cacheReadInputTokens":0,"cacheWriteInputTokens":1212}}`)...)
	want.Tier = pricecatalog.Fast
	checkSplits(t, ctEventStream, nil, priority, want)
	// Served at its latency-optimized inference: the metadata event's
	// performanceConfig.latency.
	optimized := append(bytes.Clone(body[:len(body)-len(last)]), frame(t, "event", "metadata",
		`{"metrics":{"latencyMs":212},"performanceConfig":{"latency":"optimized"},"usage":{"inputTokens":12,"outputTokens":200,"totalTokens":1424,"cacheReadInputTokens":0,"cacheWriteInputTokens":1212}}`)...)
	want.Tier = pricecatalog.LatencyOptimized
	checkSplits(t, ctEventStream, nil, optimized, want)
}

// Frames that are not events carry no usage; a frame whose CRC does not match ends the
// reading (nothing after it can be trusted), and a length out of bounds too: the bytes from
// there on are text as received, so that the output can still be estimated.
func TestBedrockBrokenFrames(t *testing.T) {
	usage := frame(t, "event", "metadata", `{"usage":{"inputTokens":5,"outputTokens":7}}`)
	exception := frame(t, "exception", "throttlingException", `{"message":"Too many requests","usage":{"inputTokens":5,"outputTokens":7}}`)
	if got := run(ctEventStream, nil, Limits{}, [][]byte{exception}, true); got.InputReported || got.Format != "" {
		t.Fatalf("an exception read as usage: %s", show(got))
	}
	if got := run(ctEventStream, nil, Limits{}, [][]byte{exception, usage}, true); !got.Complete || got.InputTokens != 5 || got.OutputTokens != 7 {
		t.Fatalf("the usage after an exception frame: %s", show(got))
	}
	corrupt := bytes.Clone(usage)
	corrupt[len(corrupt)-10] ^= 0x20 // inside the payload: the message CRC no longer matches
	if got := run(ctEventStream, nil, Limits{}, [][]byte{corrupt, usage}, true); got.InputReported ||
		got.TextBytes != int64(len(corrupt)+len(usage)) || !got.TextBytesFromRaw {
		t.Fatalf("a frame after a corrupt one was read: %s", show(got))
	}
	for _, prelude := range [][]byte{{0, 0, 0, 8}, {0x7f, 0xff, 0xff, 0xff}} {
		if got := run(ctEventStream, nil, Limits{}, [][]byte{prelude, usage}, true); got.InputReported ||
			got.TextBytes != int64(len(prelude)+len(usage)) || !got.TextBytesFromRaw {
			t.Fatalf("a frame after a length of %x was read: %s", prelude, show(got))
		}
	}
	// What was read before the break stands.
	delta := frame(t, "event", "contentBlockDelta", `{"delta":{"text":"Paid."}}`)
	if got := run(ctEventStream, nil, Limits{}, [][]byte{delta, corrupt}, true); got.TextBytes != int64(len("Paid.")+len(corrupt)) {
		t.Fatalf("the text before a corrupt frame: %s", show(got))
	}
}

// Converse, not streamed: its camelCase usage and output.message.content[].text, in any
// chunking and as the reference reads it.
func TestBedrockConverse(t *testing.T) {
	body := `{"metrics":{"latencyMs":412},"output":{"message":{"content":[{"text":"Tolls are paid."}],"role":"assistant"}},"stopReason":"end_turn",` +
		`"usage":{"cacheReadInputTokens":300,"cacheWriteInputTokens":0,"inputTokens":12,"outputTokens":200,"totalTokens":512}}`
	want := Usage{InputTokens: 312, OutputTokens: 200, CachedInputTokens: 300, Complete: true, Format: FormatBedrockConverse,
		InputReported: true, OutputReported: true, TextBytes: int64(len("Tolls are paid."))}
	checkSplits(t, ctJSON, nil, []byte(body), want)
	if ref, ok := oracleFor(ctJSON, []byte(body)); !ok || !reflect.DeepEqual(ref, want) {
		t.Fatalf("the reference reads %s", show(ref))
	}
	// Cache writes by TTL (usage.cacheDetails, "1h before 5m"): the hour's are the
	// one-hour writes, priced at twice the input; a 5-minute entry alone says none.
	for _, tc := range []struct {
		details string
		want1h  int64
	}{
		{`[{"ttl":"1h","inputTokens":800},{"ttl":"5m","inputTokens":412}]`, 800},
		{`[{"inputTokens":800,"ttl":"1h"}]`, 800},
		{`[{"ttl":"5m","inputTokens":1212}]`, 0},
		{`[{"ttl":"1h","inputTokens":800,"ttl":"5m"},{"ttl":["1h"],"inputTokens":9}]`, 0},
	} {
		body := `{"output":{"message":{"content":[{"text":"Tolls are paid."}]}},"stopReason":"end_turn",` +
			`"usage":{"inputTokens":12,"outputTokens":200,"cacheWriteInputTokens":1212,"cacheDetails":` + tc.details + `}}`
		want := Usage{InputTokens: 1224, OutputTokens: 200, CacheCreationInputTokens: 1212, CacheCreation1hInputTokens: tc.want1h, Complete: true,
			Format: FormatBedrockConverse, InputReported: true, OutputReported: true, TextBytes: int64(len("Tolls are paid."))}
		checkSplits(t, ctJSON, nil, []byte(body), want)
		if ref, ok := oracleFor(ctJSON, []byte(body)); !ok || !reflect.DeepEqual(ref, want) {
			t.Fatalf("%s: the reference reads %s", tc.details, show(ref))
		}
	}
	// A model without prompt caching: no cache counts.
	plain := `{"output":{"message":{"content":[{"text":"Hi"}]}},"usage":{"inputTokens":7,"outputTokens":3,"totalTokens":10}}`
	if got := run(ctJSON, nil, Limits{}, [][]byte{[]byte(plain)}, true); got.Format != FormatBedrockConverse || got.InputTokens != 7 || !got.Complete {
		t.Fatalf("%s", show(got))
	}
}

// Amazon Nova's events through InvokeModelWithResponseStream are ConverseStream's, each
// wrapped in its name: a tool call's arguments come in contentBlockDelta.delta.toolUse.input
// and its thinking in contentBlockDelta.delta.reasoningContent.text. They are output Bedrock
// bills, as ConverseStream's are: a stream cut before its last chunk (its invocation
// metrics) is estimated from them too, not from its answer's text alone (before, a Nova
// stream cut while it wrote a tool call was charged no output at all).
func TestBedrockNovaInvokeStreamToolUseAndReasoningAreOutput(t *testing.T) {
	const thinking, answer, args = "Let me think about the tolls first.", "Paid.", `{"city":"Paris"}`
	events := []string{
		`{"messageStart":{"role":"assistant"}}`,
		`{"contentBlockDelta":{"delta":{"reasoningContent":{"text":"Let me think "}},"contentBlockIndex":0}}`,
		`{"contentBlockDelta":{"delta":{"reasoningContent":{"text":"about the tolls first."}},"contentBlockIndex":0}}`,
		`{"contentBlockStop":{"contentBlockIndex":0}}`,
		`{"contentBlockDelta":{"delta":{"text":"Paid."},"contentBlockIndex":1}}`,
		`{"contentBlockStop":{"contentBlockIndex":1}}`,
		`{"contentBlockStart":{"start":{"toolUse":{"toolUseId":"tooluse_1","name":"weather"}},"contentBlockIndex":2}}`,
		`{"contentBlockDelta":{"delta":{"toolUse":{"input":"{\"city\":"}},"contentBlockIndex":2}}`,
		`{"contentBlockDelta":{"delta":{"toolUse":{"input":"\"Paris\"}"}},"contentBlockIndex":2}}`,
		`{"contentBlockStop":{"contentBlockIndex":2}}`,
		`{"messageStop":{"stopReason":"tool_use"}}`,
	}
	var body []byte
	for _, ev := range events {
		body = append(body, invokeChunk(t, ev)...)
	}
	want := int64(len(thinking) + len(answer) + len(args))
	if got := run(ctEventStream, nil, Limits{}, [][]byte{body}, false); got.Complete || got.InputReported || got.TextBytes != want {
		t.Fatalf("a Nova stream cut before its last chunk: text %d, want %d (%s)", got.TextBytes, want, show(got))
	}
	// Whole, it is charged its invocation metrics; the text is the same in any chunking.
	last := invokeChunk(t, `{"metadata":{"usage":{"inputTokens":30,"outputTokens":80},"metrics":{},"trace":{}},`+
		`"amazon-bedrock-invocationMetrics":{"inputTokenCount":30,"outputTokenCount":80,"invocationLatency":900,"firstByteLatency":300}}`)
	checkSplits(t, ctEventStream, nil, append(bytes.Clone(body), last...), Usage{InputTokens: 30, OutputTokens: 80, Complete: true,
		Format: FormatBedrockInvokeStream, InputReported: true, OutputReported: true, TextBytes: want})
	for _, ev := range events {
		if got, ref := run(ctSSE, nil, Limits{}, [][]byte{[]byte("data: " + ev + "\n\n")}, true), oracleSSE([]byte("data: "+ev+"\n\n"), Limits{}); !reflect.DeepEqual(got, ref) {
			t.Fatalf("%s, against the reference:\n got %s\n ref %s", ev, show(got), show(ref))
		}
	}
}

// Amazon Nova's InvokeModel answer is Converse's shape with its own names of the cache
// counts (cacheReadInputTokenCount, cacheWriteInputTokenCount): read the same way.
func TestBedrockNovaInvoke(t *testing.T) {
	body := `{"output":{"message":{"content":[{"text":"Tolls are paid."}],"role":"assistant"}},"stopReason":"end_turn",` +
		`"usage":{"inputTokens":12,"outputTokens":200,"totalTokens":612,"cacheReadInputTokenCount":300,"cacheWriteInputTokenCount":100}}`
	want := Usage{InputTokens: 412, OutputTokens: 200, CachedInputTokens: 300, CacheCreationInputTokens: 100, Complete: true,
		Format: FormatBedrockConverse, InputReported: true, OutputReported: true, TextBytes: int64(len("Tolls are paid."))}
	checkSplits(t, ctJSON, nil, []byte(body), want)
	if ref, ok := oracleFor(ctJSON, []byte(body)); !ok || !reflect.DeepEqual(ref, want) {
		t.Fatalf("the reference reads %s", show(ref))
	}
}

// InvokeModel answers every model's counts in headers: read when the body is no shape
// the extractor knows (a Llama model's, whose generation is its text), the body's own
// usage when it is (a Claude model's Anthropic message).
func TestBedrockInvokeHeaders(t *testing.T) {
	h := map[string]string{headerBedrockInput: "42", headerBedrockOutput: "17", headerBedrockCacheRead: "8", "content-type": ctJSON}
	llama := `{"generation":"Tolls are paid.","prompt_token_count":42,"generation_token_count":17,"stop_reason":"stop"}`
	want := Usage{InputTokens: 50, OutputTokens: 17, CachedInputTokens: 8, Complete: true, Format: FormatBedrockInvoke, InputReported: true, OutputReported: true,
		TextBytes: int64(len("Tolls are paid."))}
	checkSplits(t, ctJSON, h, []byte(llama), want)
	if got := run(ctJSON, h, Limits{}, [][]byte{[]byte(llama)}, false); got.Complete || got.InputTokens != 50 {
		t.Fatalf("a cut body with its headers: %s", show(got))
	}
	claude := `{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{"type":"text","text":"Paid."}],` +
		`"usage":{"input_tokens":40,"output_tokens":20}}`
	if got := run(ctJSON, h, Limits{}, [][]byte{[]byte(claude)}, true); got.Format != FormatAnthropicMessages || got.InputTokens != 40 || got.OutputTokens != 20 {
		t.Fatalf("the body's usage did not win: %s", show(got))
	}
	// One count alone is no report.
	if got := run(ctJSON, map[string]string{headerBedrockInput: "42"}, Limits{}, [][]byte{[]byte(llama)}, true); got.InputReported {
		t.Fatalf("an input count alone: %s", show(got))
	}
}

// A Claude model's InvokeModel answer is an Anthropic message, its usage its last member:
// cut before it (the connection broke, the client left and the upstream request was
// cancelled), the body reported no count, yet the headers, sent before it, did: Bedrock's
// counts of the whole answer, which it bills. They are charged, not an estimate from the
// text that came (a few bytes of a long answer), and the answer stays incomplete.
func TestBedrockInvokeHeadersOfABodyCutBeforeItsUsage(t *testing.T) {
	h := map[string]string{headerBedrockInput: "1200", headerBedrockOutput: "3000", headerBedrockCacheRead: "800", headerBedrockCacheWrite: "100"}
	claude := `{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{"type":"text","text":"Paid. And then some more text"}],` +
		`"stop_reason":"end_turn","usage":{"input_tokens":1200,"output_tokens":3000,"cache_read_input_tokens":800,"cache_creation_input_tokens":100}}`
	cut := claude[:strings.Index(claude, `"stop_reason"`)]
	got := run(ctJSON, h, Limits{}, [][]byte{[]byte(cut)}, false)
	if !got.InputReported || !got.OutputReported || got.InputTokens != 2100 || got.OutputTokens != 3000 ||
		got.CachedInputTokens != 800 || got.CacheCreationInputTokens != 100 || got.Complete {
		t.Fatalf("a body cut before its usage, its headers whole: %s", show(got))
	}
	// Whole, the body's usage is read (the same counts), and complete.
	if got := run(ctJSON, h, Limits{}, [][]byte{[]byte(claude)}, true); got.Format != FormatAnthropicMessages || got.InputTokens != 2100 ||
		got.OutputTokens != 3000 || !got.Complete {
		t.Fatalf("the whole body: %s", show(got))
	}
}

// Any bytes in event stream mode, cut anywhere: the same answer, no panic.
func FuzzExtractEventStream(f *testing.F) {
	f.Add(bytes.Join([][]byte{frame(f, "event", "contentBlockDelta", `{"delta":{"text":"a"}}`),
		frame(f, "event", "metadata", `{"usage":{"inputTokens":1,"outputTokens":2}}`)}, nil), uint64(3))
	f.Add(invokeChunk(f, `{"type":"message_start","message":{"usage":{"input_tokens":3}}}`), uint64(5))
	f.Add([]byte(strings.Repeat("\x00", 20)), uint64(1))
	f.Fuzz(func(t *testing.T, body []byte, seed uint64) {
		checkInvariants(t, ctEventStream, body, seed)
	})
}

// eventStreamEnded tells whether body, AWS's event stream, ended by its protocol, read
// apart from bedrockState: its frames decoded one after another by AWS's package until
// one fails or is cut, the payload of each event frame (a chunk's "bytes" unwrapped)
// written as one event of a text/event-stream, its lines as data lines, read by the
// reference (endedByProtocol: ConverseStream's metadata, an Anthropic message_stop after
// message_delta); or an InvokeModelWithResponseStream chunk carried the invocation
// metrics, which come in its last chunk.
func eventStreamEnded(body []byte) bool {
	var sse bytes.Buffer
	metrics := false
	r := bytes.NewReader(body)
	for r.Len() >= 4 {
		n := int(uint32(body[len(body)-r.Len()])<<24 | uint32(body[len(body)-r.Len()+1])<<16 |
			uint32(body[len(body)-r.Len()+2])<<8 | uint32(body[len(body)-r.Len()+3]))
		if n < 16 || n > maxBedrockFrame || n > r.Len() {
			break
		}
		msg, err := eventstream.NewDecoder().Decode(r, nil)
		if err != nil {
			break
		}
		if t := msg.Headers.Get(":message-type"); t == nil || t.String() != "event" {
			continue
		}
		payload := msg.Payload
		if bytes.HasPrefix(bytes.TrimLeft(payload, " \t\r\n"), []byte(`{"bytes"`)) {
			var chunk struct{ Bytes []byte }
			if json.Unmarshal(payload, &chunk) != nil {
				continue
			}
			payload = chunk.Bytes
			var counts struct {
				M *struct {
					In    *int64 `json:"inputTokenCount"`
					Out   *int64 `json:"outputTokenCount"`
					Read  int64  `json:"cacheReadInputTokenCount"`
					Write int64  `json:"cacheWriteInputTokenCount"`
				} `json:"amazon-bedrock-invocationMetrics"`
			}
			if json.Unmarshal(payload, &counts) == nil && counts.M != nil && counts.M.In != nil && counts.M.Out != nil &&
				*counts.M.In >= 0 && *counts.M.Out >= 0 && counts.M.Read >= 0 && counts.M.Write >= 0 {
				metrics = true
			}
		}
		for _, line := range strings.Split(strings.NewReplacer("\r\n", "\n", "\r", "\n").Replace(string(payload)), "\n") {
			sse.WriteString("data: " + line + "\n")
		}
		sse.WriteString("\n")
	}
	return metrics || endedByProtocol(sse.Bytes())
}

// TestBedrockStreamEndedByItsLastEvent: AWS's event stream ends by Bedrock's protocol
// with ConverseStream's metadata event (after messageStop; it carries the usage) and
// InvokeModelWithResponseStream's chunk with the invocation metrics (the last of every
// model's stream; a Claude model's is its message_stop). Broken off right after that
// frame, whole and its CRC checked, the stream is complete: the AWS SDKs' users may break
// out of their loop there (the SDK then aborts the request), before the body's end, and
// behind Envoy ext_proc saw no end_of_stream (before 2026-12-03 a whole answer was
// settled incomplete). Cut inside that frame, or before it, it is not.
func TestBedrockStreamEndedByItsLastEvent(t *testing.T) {
	converse := [][]byte{
		frame(t, "event", "messageStart", `{"role":"assistant"}`),
		frame(t, "event", "contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":"Tolls are paid."}}`),
		frame(t, "event", "messageStop", `{"stopReason":"end_turn"}`),
		frame(t, "event", "metadata", `{"metrics":{"latencyMs":412},"usage":{"inputTokens":12,"outputTokens":200,"totalTokens":212}}`),
	}
	llama := [][]byte{
		invokeChunk(t, `{"generation":"Tolls are paid.","prompt_token_count":42,"generation_token_count":1,"stop_reason":null}`),
		invokeChunk(t, `{"generation":"","stop_reason":"stop","amazon-bedrock-invocationMetrics":{"inputTokenCount":42,"outputTokenCount":500}}`),
	}
	claude := [][]byte{
		invokeChunk(t, `{"type":"message_start","message":{"model":"claude-sonnet-4-5","usage":{"input_tokens":10,"output_tokens":1}}}`),
		invokeChunk(t, `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":50}}`),
		invokeChunk(t, `{"type":"message_stop","amazon-bedrock-invocationMetrics":{"inputTokenCount":10,"outputTokenCount":50}}`),
	}
	for _, tc := range []struct {
		name   string
		frames [][]byte
	}{{"converse stream", converse}, {"invoke stream, llama", llama}, {"invoke stream, claude", claude}} {
		t.Run(tc.name, func(t *testing.T) {
			body := bytes.Join(tc.frames, nil)
			ended := run(ctEventStream, nil, Limits{}, [][]byte{body}, true)
			if !ended.Complete {
				t.Fatalf("ended: %s", show(ended))
			}
			if got := run(ctEventStream, nil, Limits{}, bytewise(body), false); !reflect.DeepEqual(got, ended) || !eventStreamEnded(body) {
				t.Fatalf("broken off after its last event: %s, ended: %s (the reference says %v)", show(got), show(ended), eventStreamEnded(body))
			}
			last := tc.frames[len(tc.frames)-1]
			for _, cut := range [][]byte{body[:len(body)-1], body[:len(body)-len(last)]} {
				if got := run(ctEventStream, nil, Limits{}, [][]byte{cut}, false); got.Complete || eventStreamEnded(cut) {
					t.Fatalf("cut %d bytes before its end: %s", len(body)-len(cut), show(got))
				}
			}
		})
	}
}

// A reasoning model's thinking through Converse (Claude's extended thinking, DeepSeek's
// R1...) comes in reasoningContent blocks, and a tool call's arguments in toolUse blocks:
// output the model generated and Bedrock bills, like the text. A ConverseStream cut before
// its metadata event (its usage) is estimated from the output it carried: its thinking
// and its tool calls' arguments count, as an Anthropic stream's thinking and partial_json
// do; a Converse answer's too (its usage is its last member but one).
func TestBedrockConverseReasoningAndToolUseAreOutput(t *testing.T) {
	const thinking, answer, args = "Let me think about the tolls first.", "Paid.", `{"city":"Paris"}`
	stream := bytes.Join([][]byte{
		frame(t, "event", "messageStart", `{"role":"assistant"}`),
		frame(t, "event", "contentBlockDelta", `{"contentBlockIndex":0,"delta":{"reasoningContent":{"text":"Let me think "}}}`),
		frame(t, "event", "contentBlockDelta", `{"contentBlockIndex":0,"delta":{"reasoningContent":{"text":"about the tolls first."}}}`),
		frame(t, "event", "contentBlockDelta", `{"contentBlockIndex":0,"delta":{"reasoningContent":{"signature":"c2lnbmF0dXJl"}}}`),
		frame(t, "event", "contentBlockStop", `{"contentBlockIndex":0}`),
		frame(t, "event", "contentBlockDelta", `{"contentBlockIndex":1,"delta":{"text":"Paid."}}`),
		frame(t, "event", "contentBlockStart", `{"contentBlockIndex":2,"start":{"toolUse":{"toolUseId":"tooluse_1","name":"weather"}}}`),
		frame(t, "event", "contentBlockDelta", `{"contentBlockIndex":2,"delta":{"toolUse":{"input":"{\"city\":"}}}`),
		frame(t, "event", "contentBlockDelta", `{"contentBlockIndex":2,"delta":{"toolUse":{"input":"\"Paris\"}"}}}`),
		frame(t, "event", "contentBlockStop", `{"contentBlockIndex":2}`),
		frame(t, "event", "messageStop", `{"stopReason":"tool_use"}`),
	}, nil)
	want := int64(len(thinking) + len(answer) + len(args))
	if got := run(ctEventStream, nil, Limits{}, [][]byte{stream}, false); got.Complete || got.InputReported || got.TextBytes != want {
		t.Fatalf("a ConverseStream cut before its metadata: text %d, want %d (%s)", got.TextBytes, want, show(got))
	}
	body := `{"output":{"message":{"role":"assistant","content":[{"reasoningContent":{"reasoningText":{"text":"` + thinking + `","signature":"c2ln"}}},` +
		`{"text":"` + answer + `"},{"toolUse":{"toolUseId":"tooluse_1","name":"weather","input":` + args + `}}]}},"stopReason":"tool_use",` +
		`"usage":{"inputTokens":30,"outputTokens":80,"totalTokens":110},"metrics":{"latencyMs":900}}`
	cut := body[:strings.Index(body, `"usage"`)]
	if got := run(ctJSON, nil, Limits{}, [][]byte{[]byte(cut)}, false); got.InputReported || got.TextBytes != want {
		t.Fatalf("a Converse answer cut before its usage: text %d, want %d (%s)", got.TextBytes, want, show(got))
	}
	if got, ref := run(ctJSON, nil, Limits{}, [][]byte{[]byte(body)}, true), oracleJSON([]byte(body), Limits{}); !reflect.DeepEqual(got, ref) ||
		got.TextBytes != want {
		t.Fatalf("the whole answer, against the reference:\n got %s\n ref %s", show(got), show(ref))
	}
}
