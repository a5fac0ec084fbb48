// Package usagechunk takes out of an OpenAI chat-completions stream the chunk that
// reports its usage, when the client did not ask for it.
//
// The enforcer asks every such stream for its usage (stream_options.include_usage,
// requestbody.WithIncludeUsage): without it the provider reports none, and the stream
// could only be charged an estimate. Asked, the provider ends the stream with one more
// event before [DONE], whose "choices" is empty and whose "usage" is the count. A
// client that did not ask does not expect it: programs written against the stream they
// asked for index choices[0] of every chunk (go-openai's README example and the many
// programs copied from it, Rust's and others' alike), and panic or throw on it, where
// the same program calling the provider directly runs. So the gateway reads the usage
// from that event (its extractor sees every byte) and leaves the event out of what the
// client receives (Filter): the client gets the stream it asked for. The other chunks
// keep the "usage": null the provider adds to each once asked, which clients read as
// absent.
//
// Only the usage event of a stream the enforcer asked is left out: an event whose
// top-level "choices" is an empty array, written "[]" (as the JSON encoders of Python,
// Go, JavaScript and the rest write one; a read with no "[]" in it is passed without
// looking at its events), and whose "usage" is an object. Every other
// event, Azure's content-filter event (empty choices, no usage) among them, passes
// unchanged, byte for byte. A response the provider compressed anyway is passed as it
// came (Applies): its events cannot be told apart without decoding and encoding it
// again.
package usagechunk

import (
	"bytes"
	"encoding/json"
	"mime"
	"strings"
)

// MaxEventBytes bounds the bytes of an event held back until its end: the usage event is
// about 1 KiB, so an event longer than this is not it. Such an event (a server that sends
// a whole answer, or a whole tool call, as one chunk) is passed on as it comes, and the
// filtering goes on after its end (since 2026-12-07; before, the rest of the stream was
// passed on unfiltered, and a client that had not asked got the usage event after it).
const MaxEventBytes = 16 << 10

// Applies tells whether a response, by its status and headers, is a stream Filter can
// read: a successful text/event-stream sent without a content coding.
func Applies(status int, contentType, contentEncoding string) bool {
	if status/100 != 2 {
		return false
	}
	if ce := strings.TrimSpace(contentEncoding); ce != "" && !strings.EqualFold(ce, "identity") {
		return false
	}
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "text/event-stream"
}

// Filter passes a stream's bytes on without its usage event. An event split over
// several reads is held back until its end (a client's event parser waits for that end
// anyway); an event that runs over MaxEventBytes is not the usage event, and passes as
// it comes until its end, after which the filtering goes on; once the usage event is
// seen, the rest of the stream passes as it comes. The zero value is ready for use.
type Filter struct {
	held    []byte // an event begun and not yet ended
	work    []byte // held and the next read, joined
	done    bool   // the usage event was left out: everything passes
	dropped bool   // the usage event was left out
	// long: an event over MaxEventBytes is being passed on as it comes, until its end;
	// tail holds its last bytes sent (ntail of them), in which a line break whose blank
	// line is still to come may be.
	long  bool
	ntail uint8
	tail  [3]byte
}

// Dropped tells whether the usage event was left out.
func (f *Filter) Dropped() bool { return f.dropped }

// Pass returns the bytes of p to send on now: p without the usage event, less an event
// it begins and does not end (held back for the next Pass). It may rewrite p in place;
// the slice returned is valid until the next call.
func (f *Filter) Pass(p []byte) []byte {
	if f.done {
		return p
	}
	if f.long {
		// The rest of a long event goes on as it comes; what follows its end is filtered.
		k := f.longEventEnd(p)
		if k < 0 {
			return p
		}
		return p[:k+len(f.Pass(p[k:]))]
	}
	buf := p
	if len(f.held) > 0 {
		f.work = append(append(f.work[:0], f.held...), p...)
		f.held = f.held[:0]
		buf = f.work
	}
	cr := bytes.IndexByte(buf, '\r') >= 0
	if !cr && !bytes.Contains(buf, emptyArray) {
		// No event here has an empty array, so none is the usage event: every ended
		// one passes (the usual read, and the cheap way through it).
		ended := 0
		if i := bytes.LastIndex(buf, lf2); i >= 0 {
			ended = i + len(lf2)
		}
		return f.holdRest(buf, ended, ended)
	}
	kept, start := 0, 0 // kept: the end of the bytes to send; start: the next event's
	for start < len(buf) {
		end := eventEnd(buf[start:], cr)
		if end < 0 {
			break
		}
		end += start
		if IsUsageEvent(buf[start:end]) {
			f.done, f.dropped = true, true
			f.held, f.work = nil, nil
			kept += copy(buf[kept:], buf[end:])
			return buf[:kept]
		}
		if kept != start {
			copy(buf[kept:], buf[start:end])
		}
		kept += end - start
		start = end
	}
	return f.holdRest(buf, kept, start)
}

// holdRest returns buf's bytes to send, buf[:kept], and holds the event begun at start
// and not ended; an event too long to be the usage event is sent instead, and the rest
// of it as it comes (longEventEnd), the filtering going on after its end.
func (f *Filter) holdRest(buf []byte, kept, start int) []byte {
	rest := buf[start:]
	if len(rest) > MaxEventBytes {
		f.long, f.ntail = true, 0 // not the usage event: it passes
		f.held, f.work = f.held[:0], f.work[:0]
		f.keepTail(rest)
		kept += copy(buf[kept:], rest)
		return buf[:kept]
	}
	f.held = append(f.held, rest...)
	return buf[:kept]
}

// longEventEnd looks for the end of the long event being passed on in p, its next
// bytes: the index in p just past the blank line that ends it, or -1 when p does not end
// it (then p is all of the event's, and its last bytes are kept for the next read).
func (f *Filter) longEventEnd(p []byte) int {
	var b [3 + 4]byte // the tail and p's first bytes: a line break and a blank line at most
	n := copy(b[:], f.tail[:f.ntail])
	n += copy(b[n:], p)
	if end := blankLineEnd(b[:n]); end >= 0 {
		f.long = false
		return end - int(f.ntail)
	}
	if len(p) > 4 {
		if end := blankLineEnd(p); end >= 0 {
			f.long = false
			return end
		}
	}
	f.keepTail(p)
	return -1
}

// keepTail keeps the last bytes of the long event sent so far.
func (f *Filter) keepTail(p []byte) {
	if len(p) >= len(f.tail) {
		f.ntail = uint8(copy(f.tail[:], p[len(p)-len(f.tail):]))
		return
	}
	keep := min(int(f.ntail), len(f.tail)-len(p))
	copy(f.tail[:], f.tail[int(f.ntail)-keep:f.ntail])
	f.ntail = uint8(keep + copy(f.tail[keep:], p))
}

// End returns what is held back when the stream ends: an event never ended, sent on
// as it is (a client's parser drops or reads it as it would have).
func (f *Filter) End() []byte {
	rest := f.held
	f.held = nil
	return rest
}

// eventEnd returns the length of the event at the start of b up to and including the
// blank line that ends it, or -1 when b holds no such end. Lines end in "\n", "\r\n" or
// "\r" (the SSE grammar); providers send "\n", and cr says whether b may hold a "\r".
func eventEnd(b []byte, cr bool) int {
	// A blank line where an event would begin dispatches nothing: it is a unit of its
	// own, passed as it is, and never joined to the event after it (whichever way the
	// reads fell, the same bytes go on).
	switch {
	case len(b) == 0:
		return -1
	case b[0] == '\n':
		return 1
	case b[0] == '\r' && len(b) == 1:
		return -1 // the first half of "\r\n", maybe
	case b[0] == '\r' && b[1] == '\n':
		return 2
	case b[0] == '\r':
		return 1
	}
	if !cr {
		if i := bytes.Index(b, lf2); i >= 0 {
			return i + 2
		}
		return -1
	}
	return blankLineEnd(b)
}

// blankLineEnd returns the length of b up to and including the first blank line that
// follows a line break in it (an event's end, b being inside the event), or -1 when b
// holds no such end.
func blankLineEnd(b []byte) int {
	for i := 0; i < len(b); i++ {
		if b[i] != '\n' && b[i] != '\r' {
			continue
		}
		next := i + 1 // where the next line begins
		if b[i] == '\r' && next < len(b) && b[next] == '\n' {
			next++
		}
		if next >= len(b) {
			return -1
		}
		switch {
		case b[next] == '\n':
			return next + 1
		case b[next] == '\r' && next+1 < len(b) && b[next+1] == '\n':
			return next + 2
		case b[next] == '\r' && next+1 < len(b):
			return next + 1
		case b[next] == '\r':
			return -1 // a "\r" at the end may be the first half of "\r\n"
		}
		i = next - 1
	}
	return -1
}

var (
	lf2        = []byte("\n\n")
	emptyArray = []byte("[]") // how every JSON encoder we know writes one
)

var (
	choicesKey = []byte(`"choices"`)
	usageKey   = []byte(`"usage"`)
	dataField  = []byte("data:")
)

// IsUsageEvent tells whether event (one SSE event, its blank line included) is a
// chat-completions stream's usage event: its data a JSON object whose "choices" is an
// empty array and whose "usage" is an object. Events are told apart by their bytes
// first, so that only an event with an empty "choices" is parsed.
func IsUsageEvent(event []byte) bool {
	if !emptyChoices(event) {
		return false
	}
	var chunk struct {
		Choices *[]json.RawMessage `json:"choices"`
		Usage   json.RawMessage    `json:"usage"`
	}
	// encoding/json matches member names regardless of case: "usage" itself must be there.
	if !bytes.Contains(event, usageKey) || json.Unmarshal(eventData(event), &chunk) != nil || chunk.Choices == nil || len(*chunk.Choices) != 0 {
		return false
	}
	u := bytes.TrimSpace(chunk.Usage)
	return len(u) > 0 && u[0] == '{'
}

// emptyChoices tells whether event holds `"choices"`, then an empty array as its value
// (white space allowed between).
func emptyChoices(event []byte) bool {
	for from := 0; ; {
		i := bytes.Index(event[from:], choicesKey)
		if i < 0 {
			return false
		}
		from += i + len(choicesKey)
		rest := skipSpace(event[from:])
		if len(rest) > 0 && rest[0] == ':' {
			rest = skipSpace(rest[1:])
			if len(rest) > 0 && rest[0] == '[' {
				rest = skipSpace(rest[1:])
				if len(rest) > 0 && rest[0] == ']' {
					return true
				}
			}
		}
	}
}

func skipSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\n' || b[0] == '\r') {
		b = b[1:]
	}
	return b
}

// eventData returns the event's data: its data fields' values joined by "\n" (the SSE
// grammar), each without the one space that may follow the colon.
func eventData(event []byte) []byte {
	var data []byte
	lines := 0
	for len(event) > 0 {
		line := event
		if i := bytes.IndexAny(event, "\r\n"); i >= 0 {
			line, event = event[:i], event[i+1:]
		} else {
			event = nil
		}
		value, ok := bytes.CutPrefix(line, dataField)
		if !ok {
			continue
		}
		value, _ = bytes.CutPrefix(value, []byte(" "))
		if lines > 0 {
			data = append(data, '\n')
		}
		data = append(data, value...)
		lines++
	}
	return data
}
