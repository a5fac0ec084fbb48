package responseusage

// sseReader splits an event stream into lines and fields as the HTML
// event-stream rules say, without keeping any line: the value of each data
// line goes straight to the JSON scanner, the other fields and comments are
// skipped as they pass.

import "bytes"

const (
	lnStart      uint8 = iota // at the start of a line
	lnField                   // in a field name
	lnValueStart              // after "data:", an optional space
	lnData                    // in the value of a data line
	lnSkip                    // in a comment or a field we do not read
)

var newline = []byte{'\n'}

const (
	bom     = "\xef\xbb\xbf"
	bomDone = 0xff
)

type sseReader struct {
	bomPos   uint8 // bytes of a leading UTF-8 BOM matched; bomDone after the first byte that is not one
	state    uint8
	fieldPos uint8 // bytes of "data" matched so far; fieldNot once the name is no prefix of it
	sawCR    bool  // the last byte ended a line with CR: a LF right after it belongs to it
	hasData  bool  // the current event has a data line
	// done: in its low bits (doneMatch), the bytes of "[DONE]" the current event's data
	// matched so far (doneNot once it holds anything else: a second data line, another
	// byte); in doneTerminal, whether the current event held its family's terminal
	// document (endsStream: response.completed, message_stop...); in doneEnded, whether
	// an event whose data is "[DONE]", or one holding a terminal document, came after
	// the final usage report of the stream's family (endEvent; a document of another
	// family clears it, onDoc). One byte for all three, and fieldPos telling a name that
	// is not "data": the Extractor stays in its size class (TestExtractorSize).
	done uint8
}

const (
	fieldNot     = 0xff
	sentinelDone = "[DONE]"
	doneMatch    = 0x3f
	doneNot      = doneMatch
	doneTerminal = 0x40
	doneEnded    = 0x80
)

// ended tells whether the stream ended by its protocol: a "[DONE]", or its family's
// terminal event, closed after its final report.
func (r *sseReader) ended() bool { return r.done&doneEnded != 0 }

func (r *sseReader) write(p []byte, e *Extractor) {
	for i := 0; i < len(p); {
		c := p[i]
		if r.bomPos != bomDone {
			// One BOM at the start of the stream is dropped. A partial one
			// can only begin a field name that is not "data".
			if int(r.bomPos) < len(bom) && c == bom[r.bomPos] {
				r.bomPos++
				i++
				if int(r.bomPos) == len(bom) {
					r.bomPos = bomDone
				}
				continue
			}
			if r.bomPos > 0 {
				r.state, r.fieldPos = lnField, fieldNot
			}
			r.bomPos = bomDone
		}
		if r.sawCR {
			r.sawCR = false
			if c == '\n' {
				i++
				continue
			}
		}
		switch r.state {
		case lnStart:
			switch c {
			case '\n', '\r':
				// A blank line ends the event.
				r.endEvent(e)
				r.sawCR = c == '\r'
				i++
			case ':':
				r.state = lnSkip
				i++
			default:
				r.state, r.fieldPos = lnField, 0
			}

		case lnField:
			i++
			switch c {
			case ':':
				if r.isData() {
					r.startData(e)
					r.state = lnValueStart
				} else {
					r.state = lnSkip
				}
			case '\n', '\r':
				if r.isData() { // "data" alone is a data line with an empty value
					r.startData(e)
				}
				r.endLine(c)
			default:
				if r.fieldPos < 4 && c == "data"[r.fieldPos] {
					r.fieldPos++
				} else {
					r.fieldPos = fieldNot
				}
			}

		case lnValueStart:
			r.state = lnData
			if c == ' ' {
				i++
			}

		case lnData, lnSkip:
			j := i + lineEnd(p[i:])
			if r.state == lnData {
				r.matchDone(p[i:j])
				e.feedData(p[i:j])
			}
			i = j
			if j < len(p) {
				r.endLine(p[j])
				i++
			}
		}
	}
}

// lineEnd is the index of the first line break (CR or LF) in p, len(p) without one.
// Found with bytes.IndexByte's vector search, once for each: an event's data line is
// hundreds of bytes, and CR is rare.
func lineEnd(p []byte) int {
	n := bytes.IndexByte(p, '\n')
	if n < 0 {
		n = len(p)
	}
	if cr := bytes.IndexByte(p[:n], '\r'); cr >= 0 {
		return cr
	}
	return n
}

func (r *sseReader) isData() bool { return r.fieldPos == 4 }

func (r *sseReader) endLine(c byte) {
	r.state = lnStart
	r.sawCR = c == '\r'
}

// startData begins a data line; the lines of one event are joined by a
// newline.
func (r *sseReader) startData(e *Extractor) {
	pos := uint8(0)
	if r.hasData {
		e.feedData(newline)
		pos = doneNot
	}
	r.done = r.done&^doneMatch | pos
	r.hasData = true
}

// matchDone follows the current data line's bytes p against "[DONE]".
func (r *sseReader) matchDone(p []byte) {
	pos := int(r.done & doneMatch)
	if pos == doneNot {
		return
	}
	if pos+len(p) > len(sentinelDone) || string(p) != sentinelDone[pos:pos+len(p)] {
		pos = doneNot
	} else {
		pos += len(p)
	}
	r.done = r.done&^doneMatch | uint8(pos)
}

// endEvent ends an event. The stream ends by its protocol, and is complete even if its
// transport's end never comes (Finish), when the event closed here came after the final
// report (or was it) and either its data is "[DONE]", the sentinel that ends an OpenAI
// chat completions stream (and the streams that copy it: Mistral's, the Interactions
// API's) after its usage chunk, or it held its family's terminal event (endsStream:
// response.completed, message_stop, ConverseStream's metadata...): nothing the answer
// bills can follow. A client may close as soon as it reads it: the official Go SDK
// (openai-go) does at [DONE], and an agent that breaks out of its loop at
// message_stop or response.completed does, before the chunked encoding's terminator
// (or HTTP/2's END_STREAM) that follows; Envoy then resets the upstream stream, and
// ext_proc never sees end_of_stream. Amazon Bedrock's event stream ends each of its
// frames here too (bedrockState.event), its CRC checked: a whole frame is a closed event.
func (r *sseReader) endEvent(e *Extractor) {
	e.endEvent()
	sentinel := r.hasData && int(r.done&doneMatch) == len(sentinelDone)
	if (sentinel || r.done&doneTerminal != 0) && e.acc.final {
		r.done |= doneEnded
	}
	r.done &^= doneTerminal
	r.hasData = false
}

// endEvent ends an event's data: a top-level number waiting for a delimiter is
// complete, and a value left open is dropped.
func (e *Extractor) endEvent() {
	if e.scan.flush() {
		e.onDoc()
	}
	e.scan.restart()
}

// feedData passes event data to the scanner, handling each JSON value as it
// completes.
func (e *Extractor) feedData(p []byte) {
	for len(p) > 0 {
		n, done := e.scan.feed(p)
		if done {
			e.onDoc()
		}
		p = p[n:]
	}
}
