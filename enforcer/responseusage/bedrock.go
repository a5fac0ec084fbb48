package responseusage

import (
	"bytes"
	"encoding/binary"
	"encoding/json"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
)

// Amazon Bedrock Runtime answers a model invocation in three ways the enforcer reads:
//
//   - InvokeModel (POST /model/{id}/invoke) answers the model's own body (a Claude
//     model's is an Anthropic message, read as such) and, for every model, its token
//     counts in headers (x-amzn-bedrock-input-token-count, -output-token-count,
//     -cache-read-input-token-count, -cache-write-input-token-count): read when the
//     body is no shape the extractor knows (format bedrock-invoke), or did not report
//     both counts (a Claude answer cut before its usage: fillFromHeaders).
//   - Converse (POST /model/{id}/converse) answers one JSON shape for every model, its
//     usage in camelCase (inputTokens, outputTokens, cacheReadInputTokens,
//     cacheWriteInputTokens: the input without the cache reads and writes, as Anthropic
//     counts), its text at output.message.content[].text (format bedrock-converse).
//   - The streamed forms (invoke-with-response-stream, converse-stream) answer AWS's
//     binary event stream (application/vnd.amazon.eventstream): length-prefixed frames
//     with headers and a CRC. Each frame of InvokeModelWithResponseStream carries
//     {"bytes": base64 of one of the model's own stream events} (a Claude model's
//     Anthropic events); each of ConverseStream carries its event as JSON (its text in
//     contentBlockDelta's delta.text, its usage in the metadata event). Each event is
//     read as one event of a text/event-stream is. InvokeModelWithResponseStream's last
//     chunk also carries, for every model, "amazon-bedrock-invocationMetrics": the
//     counts InvokeModel sends in its headers (inputTokenCount, outputTokenCount,
//     cacheReadInputTokenCount, cacheWriteInputTokenCount), read as those are (format
//     bedrock-invoke-stream where the events are no shape the extractor knows: Llama's,
//     Nova's, Mistral's, Titan's, Cohere's...).
//
// The frames are decoded by AWS's own event stream package once a whole frame has
// arrived: a frame is small (one event), and its CRCs can only be checked whole.
type bedrockState struct {
	frame  []byte // the frame being collected
	broken bool   // a frame failed its length or CRC check: the rest is not read
	// unread counts the bytes from the broken frame on, added to the text as received
	// (Usage.TextBytesFromRaw), as the bytes of a corrupt compressed body are, so that
	// an estimate stays possible.
	unread int64
	dec    *eventstream.Decoder

	// The token counts of InvokeModel's headers, and whether it sent them.
	headers bool
	header  invokeCounts
	// The token counts of InvokeModelWithResponseStream's invocation metrics (its last
	// chunk's), and whether a chunk carried them.
	metrics bool
	metric  invokeCounts
}

// invokeCounts are the token counts Bedrock reports for an InvokeModel call of any model,
// in its headers or its stream's invocation metrics: the input without the cache reads
// and writes, the output, the cache reads and the cache writes.
type invokeCounts struct{ in, out, read, write int64 }

// fill reports the counts in u: the input made whole (its cache reads and writes
// added back, as Usage.InputTokens counts them), as Converse's counts are.
func (c invokeCounts) fill(u *Usage) {
	u.InputTokens = addCounts(c.in, c.read, c.write)
	u.CachedInputTokens, u.CacheCreationInputTokens = c.read, c.write
	u.OutputTokens = c.out
	u.InputReported, u.OutputReported = true, true
}

// maxBedrockFrame bounds one event stream frame: AWS's own limit is 16 MiB, and a
// Bedrock event is one chunk of a stream, far smaller. A longer frame is taken for a
// broken stream.
const maxBedrockFrame = 16 << 20

// Bedrock's InvokeModel headers (lower-case, as New receives them).
const (
	headerBedrockInput      = "x-amzn-bedrock-input-token-count"
	headerBedrockOutput     = "x-amzn-bedrock-output-token-count"
	headerBedrockCacheRead  = "x-amzn-bedrock-cache-read-input-token-count"
	headerBedrockCacheWrite = "x-amzn-bedrock-cache-write-input-token-count"
)

// newBedrock is the Bedrock state of a response: its event stream reader when its
// media type is AWS's event stream, and its header counts when it sent them; nil when
// it is neither (every response of another provider).
func newBedrock(mt string, headers map[string]string) *bedrockState {
	// The counts are whole numbers, read as the micro-USD header is.
	in, okIn := parseMicroUSD(headers[headerBedrockInput])
	out, okOut := parseMicroUSD(headers[headerBedrockOutput])
	stream := mt == "application/vnd.amazon.eventstream"
	if !stream && !okIn && !okOut {
		return nil
	}
	b := &bedrockState{}
	if stream {
		b.dec = eventstream.NewDecoder()
	}
	if okIn && okOut {
		b.headers, b.header.in, b.header.out = true, in, out
		b.header.read, _ = parseMicroUSD(headers[headerBedrockCacheRead])
		b.header.write, _ = parseMicroUSD(headers[headerBedrockCacheWrite])
	}
	return b
}

// write reads event stream bytes, handing each whole frame's event to e.
func (b *bedrockState) write(p []byte, e *Extractor) {
	for len(p) > 0 {
		if b.broken {
			b.unread += int64(len(p))
			return
		}
		// The prelude's first 4 bytes are the frame's total length, big-endian.
		need := 4
		if len(b.frame) >= 4 {
			need = int(binary.BigEndian.Uint32(b.frame))
			if need < 16 || need > maxBedrockFrame { // a prelude (12) and a CRC (4) at least
				b.breakAt()
				continue
			}
		}
		n := min(need-len(b.frame), len(p))
		b.frame = append(b.frame, p[:n]...)
		p = p[n:]
		if len(b.frame) == need && need > 4 {
			b.event(e)
			b.frame = b.frame[:0]
		}
	}
}

// event decodes the whole frame in b.frame and reads its event.
func (b *bedrockState) event(e *Extractor) {
	msg, err := b.dec.Decode(bytes.NewReader(b.frame), nil)
	if err != nil {
		b.breakAt() // a CRC that does not match: nothing after it can be trusted
		return
	}
	if t := msg.Headers.Get(":message-type"); t == nil || t.String() != "event" {
		return // an exception (throttling, a model error): no usage
	}
	payload := msg.Payload
	if bytes.HasPrefix(bytes.TrimLeft(payload, " \t\r\n"), []byte(`{"bytes"`)) {
		// InvokeModelWithResponseStream: the model's own event, base64 in "bytes".
		var chunk struct {
			Bytes []byte `json:"bytes"`
		}
		if json.Unmarshal(payload, &chunk) != nil {
			return
		}
		payload = chunk.Bytes
		b.readMetrics(payload)
	}
	e.feedData(payload)
	// A whole frame, its CRC checked, is a closed event: ConverseStream's metadata event,
	// the last, ends the stream by its protocol (sseReader.endEvent).
	e.sse.endEvent(e)
}

// invocationMetrics is the key of the counts InvokeModelWithResponseStream's last chunk
// carries, whatever the model.
var invocationMetrics = []byte(`"amazon-bedrock-invocationMetrics"`)

// readMetrics keeps the invocation metrics of an InvokeModelWithResponseStream chunk
// (event, the model's own event): the usage of the whole answer, which Bedrock adds to
// the last chunk of every model's stream. For a model whose events the extractor does
// not read (Meta's Llama, Amazon's Nova, Mistral's, Titan, Cohere's, DeepSeek's), they
// are the only usage the stream reports. Only the chunk that names them is decoded again:
// one a stream.
func (b *bedrockState) readMetrics(event []byte) {
	if !bytes.Contains(event, invocationMetrics) {
		return
	}
	var chunk struct {
		Metrics *struct {
			In    *int64 `json:"inputTokenCount"`
			Out   *int64 `json:"outputTokenCount"`
			Read  int64  `json:"cacheReadInputTokenCount"`
			Write int64  `json:"cacheWriteInputTokenCount"`
		} `json:"amazon-bedrock-invocationMetrics"`
	}
	if json.Unmarshal(event, &chunk) != nil || chunk.Metrics == nil {
		return
	}
	m := chunk.Metrics
	if m.In == nil || m.Out == nil || *m.In < 0 || *m.Out < 0 || m.Read < 0 || m.Write < 0 {
		return // no usage: a count missing or not one
	}
	// A stream reports them once; were there more, the largest of each (as a stream's
	// usage reports are merged).
	b.metrics = true
	b.metric = invokeCounts{in: max(b.metric.in, *m.In), out: max(b.metric.out, *m.Out),
		read: max(b.metric.read, m.Read), write: max(b.metric.write, m.Write)}
}

// ended tells whether the stream ended by Bedrock's protocol: InvokeModelWithResponseStream's
// invocation metrics come in its last chunk, whatever the model, and report the whole
// answer's usage.
func (b *bedrockState) ended() bool { return b != nil && b.metrics }

// breakAt stops the reading at the frame being collected, whose bytes are unread.
func (b *bedrockState) breakAt() {
	b.broken = true
	b.unread += int64(len(b.frame))
	b.frame = nil
}

// unreadText adds the bytes the stream's reading stopped at to u's text, as received.
func (b *bedrockState) unreadText(u *Usage) {
	if b != nil && b.unread > 0 {
		u.TextBytes += b.unread
		u.TextBytesFromRaw = true
	}
}

// fillFromHeaders reports InvokeModel's header counts in u when its body did not report
// both counts: a model whose body shape the extractor does not know (format
// bedrock-invoke), or a body of a known shape whose usage did not come (a Claude
// model's Anthropic message cut before its usage, its last member: the connection broke,
// or the client left and the upstream request was cancelled). The headers came before
// the body, with Bedrock's counts of the whole answer, which it bills: they are charged,
// not an estimate from the text that came (since 2026-12-03; before, a body of a known
// shape kept the headers unread, and such an answer was charged its input estimate and
// the text it showed). The input is the one without the cache reads and writes, as
// Converse counts it, made whole. A body that reported both counts is read as it said.
func (b *bedrockState) fillFromHeaders(u *Usage, ended bool) {
	if b == nil || !b.headers || u.InputReported && u.OutputReported {
		return
	}
	b.header.fill(u)
	// The part of the writes a body said was for an hour, never more than the writes.
	u.CacheCreation1hInputTokens = min(u.CacheCreation1hInputTokens, u.CacheCreationInputTokens)
	u.Complete = ended
	if u.Format == "" {
		u.Format = FormatBedrockInvoke
	}
}

// fillFromMetrics reports InvokeModelWithResponseStream's invocation metrics in u: the
// usage of the whole answer, final (only the last chunk carries them). Where the events
// were no shape the extractor knows, they are the usage (format bedrock-invoke-stream);
// where they were (a Claude model's Anthropic events, whose message_stop carries the
// metrics), each count keeps the larger of the events' and the metrics', which report
// the same answer: a Claude stream is charged as its events say.
func (b *bedrockState) fillFromMetrics(u *Usage, ended bool) {
	if b == nil || !b.metrics {
		return
	}
	if u.Format == "" {
		b.metric.fill(u)
		u.Format = FormatBedrockInvokeStream
	} else {
		var m Usage
		b.metric.fill(&m)
		u.InputTokens, u.OutputTokens = max(u.InputTokens, m.InputTokens), max(u.OutputTokens, m.OutputTokens)
		u.CachedInputTokens = max(u.CachedInputTokens, m.CachedInputTokens)
		u.CacheCreationInputTokens = max(u.CacheCreationInputTokens, m.CacheCreationInputTokens)
		u.InputReported, u.OutputReported = true, true
	}
	u.Complete = ended
}

// addCounts adds counts, saturating at the largest int64.
func addCounts(counts ...int64) int64 {
	var sum int64
	for _, c := range counts {
		if sum > 1<<63-1-c {
			return 1<<63 - 1
		}
		sum += c
	}
	return sum
}
