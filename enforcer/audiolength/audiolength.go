// Package audiolength measures how long a stream of encoded audio plays, from its
// container's frame and page headers, as the bytes pass: nothing is decoded and nothing
// is buffered beyond one header (at most a few hundred bytes), so a speech answer is
// measured on its way to the client, however long.
//
// Why: OpenAI's text to speech (gpt-4o-mini-tts) bills its audio output by the token
// and reports no usage when it answers audio (its default): the audio's duration is
// the only measure of the output there is (docs/prices.md, "Text to speech").
//
// The containers are those OpenAI's speech answers in (response_format), by their media
// types: MP3 (audio/mpeg: MPEG audio frames, ID3v2 tags and a Xing or Info frame
// skipped), Ogg (audio/opus, audio/ogg: the last granule position of the first
// logical stream, less Opus's pre-skip; Vorbis by its identification header's rate),
// AAC in ADTS frames (audio/aac), FLAC (audio/flac: the frame headers, each checked by
// its CRC-8, so that a stream whose STREAMINFO gives no total is measured too), WAV
// (audio/wav: the data chunk's bytes at the format chunk's byte rate, counted as they
// come, since a streamed WAV's sizes are placeholders) and raw PCM (audio/pcm: 24 kHz
// 16-bit mono unless the type's rate and channels parameters say otherwise).
//
// Bytes a parser cannot place (junk between frames, an ID3v1 tag at the end) are
// passed over until the next header. A stream cut mid-frame counts the frames whose
// headers arrived. No well-kept Go library does this: the decoders that exist (go-mp3,
// the Ogg and FLAC packages) decode whole files pulled from an io.Reader, where this
// reads pushed chunks, and only their headers.
package audiolength

import (
	"bytes"
	"mime"
	"strconv"
	"strings"
)

// Meter measures one stream. Create it with New; it must not be copied.
type Meter struct {
	p parser
	// buf holds the header being read; n bytes of it are filled, need are wanted.
	buf     [maxHeader]byte
	n, need int
	// skip: bytes to pass over before the next header.
	skip int64
	// hunting: the last header was not one; pass over bytes until the sync byte.
	hunting bool
	// counting: every byte from here on is sample data (WAV's data chunk, PCM).
	counting bool
	data     int64
	// nanos is the duration measured so far, in nanoseconds.
	nanos int64
}

// maxHeader is the longest header a parser reads at once: an Ogg page's fixed header,
// its segment table and a codec header's first bytes.
const maxHeader = 27 + 255 + 16

// parser reads one container's headers.
type parser interface {
	// start returns how many bytes the next header needs (a header's first bytes).
	start() int
	// header is given the need bytes at the current position (hdr) and returns what
	// to do next (the step's fields).
	header(m *Meter, hdr []byte) step
	// sync is the byte every header begins with, which hunting looks for.
	sync() byte
}

// step is a parser's answer to a header.
type step struct {
	// more > 0: the header is longer; call again with more bytes in all.
	more int
	// lost: not a header here; pass over one byte and hunt for the next.
	lost bool
	// consumed bytes of hdr are the header's own; skip more bytes follow it before the
	// next header, which needs next bytes.
	consumed int
	skip     int64
	next     int
	// count: from here on, every byte is sample data.
	count bool
	// hunt: the next header's place is not known (a FLAC frame does not give its
	// length): look for its sync byte.
	hunt bool
}

// New returns a Meter for a response of the given Content-Type, or nil when the media
// type is not one it reads.
func New(contentType string) *Meter {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		return nil
	}
	var p parser
	switch mt {
	case "audio/mpeg", "audio/mp3", "audio/mpeg3", "audio/x-mpeg-3":
		p = &mp3{}
	case "audio/aac", "audio/aacp", "audio/x-aac":
		p = &adts{}
	case "audio/ogg", "audio/opus", "audio/vorbis", "application/ogg":
		p = &ogg{}
	case "audio/flac", "audio/x-flac":
		p = &flac{}
	case "audio/wav", "audio/x-wav", "audio/wave", "audio/vnd.wave":
		p = &wav{}
	case "audio/pcm", "audio/l16", "audio/x-pcm":
		p = newPCM(params)
	default:
		return nil
	}
	m := &Meter{p: p}
	m.need = p.start()
	return m
}

// Write reads the next chunk of the stream, as it came; chunks may split anywhere.
func (m *Meter) Write(b []byte) {
	for len(b) > 0 {
		switch {
		case m.counting:
			m.data += int64(len(b))
			return
		case m.skip > 0:
			k := min(int64(len(b)), m.skip)
			m.skip -= k
			b = b[k:]
			continue
		case m.hunting && m.n == 0:
			i := bytes.IndexByte(b, m.p.sync())
			if i < 0 {
				return
			}
			b, m.hunting = b[i:], false
		}
		k := copy(m.buf[m.n:m.need], b)
		m.n += k
		b = b[k:]
		for m.n >= m.need && !m.counting && m.skip == 0 {
			m.advance()
		}
	}
}

// advance gives the parser the header it asked for and follows its step.
func (m *Meter) advance() {
	s := m.p.header(m, m.buf[:m.need])
	switch {
	case s.more > 0:
		m.need = s.more
		return
	case s.lost:
		// Pass over one byte: the rest of the buffer is looked at again.
		copy(m.buf[:], m.buf[1:m.n])
		m.n--
		m.hunting = true
		m.need = m.p.start()
		if m.n > 0 && m.buf[0] != m.p.sync() {
			if i := bytes.IndexByte(m.buf[:m.n], m.p.sync()); i >= 0 {
				m.n = copy(m.buf[:], m.buf[i:m.n])
			} else {
				m.n = 0
			}
		}
		if m.n > 0 {
			m.hunting = false
		}
		return
	}
	// The header is read: the bytes after it are the frame's, or the next header's.
	if s.skip < 0 {
		// What was read runs past the frame (a chunk shorter than its header's fields):
		// the next header is inside it.
		s.consumed, s.skip = max(s.consumed+int(s.skip), 1), 0
	}
	rest := m.buf[s.consumed:m.n]
	m.need, m.skip, m.hunting = s.next, s.skip, s.hunt
	if s.count {
		m.counting = true
		m.data += int64(len(rest))
		m.n = 0
		return
	}
	// Bytes of the buffer past the header are passed over first, then kept.
	k := min(int64(len(rest)), m.skip)
	m.skip -= k
	m.n = copy(m.buf[:], rest[k:])
}

// Millis is the duration measured so far, in milliseconds, rounded up.
func (m *Meter) Millis() int64 {
	nanos := m.nanos
	switch p := m.p.(type) {
	case dataRate:
		nanos += p.nanosOf(m.data)
	case *ogg:
		nanos = p.nanos(m.skip)
	}
	return (nanos + 999_999) / 1_000_000
}

// add counts samples played at rate per second.
func (m *Meter) add(samples, rate int64) {
	if rate > 0 {
		m.nanos += samples * 1_000_000_000 / rate
	}
}

// dataRate is a parser whose duration is its sample data's bytes (WAV, PCM).
type dataRate interface{ nanosOf(bytes int64) int64 }

// id3Length is the length of an ID3v2 tag that hdr (10 bytes) begins, or 0.
func id3Length(hdr []byte) int64 {
	if string(hdr[:3]) != "ID3" || hdr[3] == 0xff || hdr[4] == 0xff {
		return 0
	}
	var size int64
	for _, b := range hdr[6:10] {
		if b&0x80 != 0 {
			return 0
		}
		size = size<<7 | int64(b)
	}
	if hdr[5]&0x10 != 0 {
		size += 10 // a footer
	}
	return 10 + size
}

// pcm is raw sample data: 16-bit, at the media type's rate and channels (24 kHz mono,
// OpenAI's, when they are not given).
type pcm struct{ bytesPerSecond int64 }

func newPCM(params map[string]string) *pcm {
	rate, channels := int64(24_000), int64(1)
	if r, err := strconv.ParseInt(strings.TrimSpace(params["rate"]), 10, 32); err == nil && r > 0 {
		rate = r
	}
	if c, err := strconv.ParseInt(strings.TrimSpace(params["channels"]), 10, 16); err == nil && c > 0 {
		channels = c
	}
	return &pcm{bytesPerSecond: rate * channels * 2}
}

func (p *pcm) start() int                       { return 1 }
func (p *pcm) sync() byte                       { return 0 }
func (p *pcm) header(m *Meter, hdr []byte) step { return step{count: true} }
func (p *pcm) nanosOf(bytes int64) int64        { return bytes * 1_000_000_000 / p.bytesPerSecond }
