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
//     body is no shape the extractor knows (format bedrock-invoke).
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
//     read as one event of a text/event-stream is.
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
	headers                                      bool
	headerIn, headerOut, headerRead, headerWrite int64
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
		b.headers, b.headerIn, b.headerOut = true, in, out
		b.headerRead, _ = parseMicroUSD(headers[headerBedrockCacheRead])
		b.headerWrite, _ = parseMicroUSD(headers[headerBedrockCacheWrite])
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
	}
	e.feedData(payload)
	e.endEvent()
}

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

// fillFromHeaders reports InvokeModel's header counts in u when its body told nothing
// (a model whose body shape the extractor does not know): the input without the cache
// reads and writes, as Converse counts it, made whole.
func (b *bedrockState) fillFromHeaders(u *Usage, ended bool) {
	if b == nil || !b.headers || u.Format != "" {
		return
	}
	u.InputTokens = addCounts(b.headerIn, b.headerRead, b.headerWrite)
	u.CachedInputTokens, u.CacheCreationInputTokens = b.headerRead, b.headerWrite
	u.OutputTokens = b.headerOut
	u.InputReported, u.OutputReported = true, true
	u.Complete = ended
	u.Format = FormatBedrockInvoke
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
