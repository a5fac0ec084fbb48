package audiolength

import "encoding/binary"

// ogg reads Ogg pages: the first logical stream's last granule position is where its
// audio ends, in samples at the codec's rate (Opus: 48 kHz, less the pre-skip its
// OpusHead gives; Vorbis: its identification header's rate). Other codecs, and other
// logical streams, are not measured.
type ogg struct {
	serial    uint32
	known     bool // serial is the first page's
	codecRead bool
	preSkip   int64
	rate      int64 // 0: a codec this does not read
	// The page being read ends at endNanos, the page before at prevNanos (a page of
	// ffmpeg's holds up to a second): a stream cut inside a page counts the share of
	// its body that arrived (nanos).
	prevNanos, endNanos int64
	headerLen, bodyLen  int64
}

func (p *ogg) start() int { return 27 }
func (p *ogg) sync() byte { return 'O' }

func (p *ogg) header(m *Meter, h []byte) step {
	if string(h[:4]) != "OggS" || h[4] != 0 {
		return step{lost: true}
	}
	segments := int(h[26])
	if len(h) < 27+segments {
		return step{more: 27 + segments}
	}
	var body int
	for _, s := range h[27 : 27+segments] {
		body += int(s)
	}
	serial := binary.LittleEndian.Uint32(h[14:18])
	if !p.known {
		p.serial, p.known = serial, true
	}
	p.bodyLen = 0 // the page before is whole
	if serial == p.serial {
		if !p.codecRead {
			want := 27 + segments + min(body, 16)
			if len(h) < want {
				return step{more: want}
			}
			p.codecRead = true
			p.readCodec(h[27+segments : want])
		}
		if g := int64(binary.LittleEndian.Uint64(h[6:14])); g >= 0 && p.rate > 0 {
			// The granule is where the stream has got to, not an increment.
			p.prevNanos = p.endNanos
			p.endNanos = max(g-p.preSkip, 0) * 1_000_000_000 / p.rate
			p.headerLen, p.bodyLen = int64(27+segments), int64(body)
		}
	}
	page := int64(27 + segments + body)
	if int64(len(h)) > page {
		return step{consumed: int(page), next: 27}
	}
	return step{consumed: len(h), skip: page - int64(len(h)), next: 27}
}

// nanos is where the audio that arrived ends: skip bytes of the page just read have
// not.
func (p *ogg) nanos(skip int64) int64 {
	if skip == 0 || p.bodyLen == 0 {
		return p.endNanos
	}
	arrived := max(p.bodyLen-skip, 0)
	return p.prevNanos + (p.endNanos-p.prevNanos)*arrived/p.bodyLen
}

// readCodec reads the first bytes of the stream's first packet: its codec's header.
func (p *ogg) readCodec(id []byte) {
	switch {
	case len(id) >= 12 && string(id[:8]) == "OpusHead":
		p.rate, p.preSkip = 48_000, int64(binary.LittleEndian.Uint16(id[10:12]))
	case len(id) >= 16 && id[0] == 1 && string(id[1:7]) == "vorbis":
		p.rate = int64(binary.LittleEndian.Uint32(id[12:16]))
	}
}

// flac reads a FLAC stream: its STREAMINFO's sample rate (which a frame may refer to),
// then every frame header, found by its sync code and checked by its CRC-8 (frames do
// not give their length, so the bytes between headers are hunted through). A streamed
// FLAC's STREAMINFO does not know the total, so the frames are counted in every case.
type flac struct {
	phase int // 0: the "fLaC" marker; 1: metadata blocks; 2: frames
	rate  int64
	// next is the number the next frame's header must carry, once a frame was read
	// (counted): its frame number in a fixed-blocksize stream, its first sample's in a
	// variable one. A sync code and a CRC-8 that match by chance inside a frame's data
	// (one candidate in 256 passes the CRC) do not also carry the next number.
	next    int64
	counted bool
}

func (p *flac) start() int { return 4 }

func (p *flac) sync() byte {
	if p.phase == 2 {
		return 0xff
	}
	return 'f'
}

// flacRates are the sample rates of a frame header's rate codes 1 to 11.
var flacRates = [12]int64{0, 88200, 176400, 192000, 8000, 16000, 22050, 24000, 32000, 44100, 48000, 96000}

func (p *flac) header(m *Meter, h []byte) step {
	switch p.phase {
	case 0:
		p.phase = 2 // frames without a marker are still frames
		if string(h[:4]) != "fLaC" {
			return step{lost: true}
		}
		p.phase = 1
		return step{consumed: 4, next: 4}
	case 1:
		last, kind := h[0]&0x80 != 0, h[0]&0x7f
		length := int64(h[1])<<16 | int64(h[2])<<8 | int64(h[3])
		if kind == 0 && length >= 18 {
			if len(h) < 4+18 {
				return step{more: 4 + 18}
			}
			p.rate = int64(h[14])<<12 | int64(h[15])<<4 | int64(h[16]>>4)
		}
		if last {
			p.phase = 2
		}
		return step{consumed: len(h), skip: 4 + length - int64(len(h)), next: 4}
	}
	return p.frame(m, h)
}

func (p *flac) frame(m *Meter, h []byte) step {
	if h[0] != 0xff || h[1]&0xfe != 0xf8 {
		return step{lost: true}
	}
	sizeCode, rateCode, channels, sampleSize := h[2]>>4, h[2]&0xf, h[3]>>4, h[3]>>1&7
	if sizeCode == 0 || rateCode == 15 || channels >= 11 || sampleSize == 3 || h[3]&1 != 0 {
		return step{lost: true}
	}
	if len(h) < 5 {
		return step{more: 5}
	}
	// The frame's (or first sample's) number, coded as UTF-8 is, in one to seven bytes.
	n := 0
	for b := h[4]; b&0x80 != 0; b <<= 1 {
		n++
	}
	switch {
	case n == 0:
		n = 1
	case n == 1 || n > 7:
		return step{lost: true}
	}
	extra := 0
	switch sizeCode {
	case 6:
		extra = 1
	case 7:
		extra = 2
	}
	rateAt := 4 + n + extra
	switch rateCode {
	case 12:
		extra++
	case 13, 14:
		extra += 2
	}
	total := 4 + n + extra + 1
	if len(h) < total {
		return step{more: total}
	}
	number := int64(h[4])
	if n > 1 {
		number &= 0xff >> (n + 1)
	}
	for _, b := range h[5 : 4+n] {
		if b&0xc0 != 0x80 {
			return step{lost: true}
		}
		number = number<<6 | int64(b&0x3f)
	}
	if crc8(h[:total-1]) != h[total-1] || p.counted && number != p.next {
		return step{lost: true}
	}
	var samples int64
	switch {
	case sizeCode == 1:
		samples = 192
	case sizeCode <= 5:
		samples = 576 << (sizeCode - 2)
	case sizeCode == 6:
		samples = int64(h[4+n]) + 1
	case sizeCode == 7:
		samples = int64(h[4+n])<<8 | int64(h[4+n+1]) + 1
	default:
		samples = 256 << (sizeCode - 8)
	}
	rate := p.rate
	switch {
	case rateCode >= 1 && rateCode <= 11:
		rate = flacRates[rateCode]
	case rateCode == 12:
		rate = int64(h[rateAt]) * 1000
	case rateCode == 13:
		rate = int64(h[rateAt])<<8 | int64(h[rateAt+1])
	case rateCode == 14:
		rate = (int64(h[rateAt])<<8 | int64(h[rateAt+1])) * 10
	}
	m.add(samples, rate)
	p.counted, p.next = true, number+1
	if h[1]&1 == 1 { // variable blocksize: numbered by sample
		p.next = number + samples
	}
	// The frame's data follows; its end is found by the next header's sync code.
	return step{consumed: total, next: 4, hunt: true}
}

// crc8 is the CRC-8 of a FLAC frame header (polynomial x^8 + x^2 + x + 1, initial 0).
func crc8(b []byte) byte {
	var c byte
	for _, x := range b {
		c ^= x
		for range 8 {
			if c&0x80 != 0 {
				c = c<<1 ^ 0x07
			} else {
				c <<= 1
			}
		}
	}
	return c
}

// wav reads a RIFF WAVE stream: the format chunk's byte rate, then the data chunk's
// bytes as they come. A streamed WAV gives its sizes as 0 or 0xFFFFFFFF (unknown), so a
// data size is believed only when it is neither.
type wav struct {
	phase    int // 0: the RIFF header; 1: chunks
	byteRate int64
	dataSize int64 // 0: unknown
}

func (p *wav) start() int {
	if p.phase == 0 {
		return 12
	}
	return 8
}

func (p *wav) sync() byte {
	if p.phase == 0 {
		return 'R'
	}
	return 'd'
}

func (p *wav) header(m *Meter, h []byte) step {
	if p.phase == 0 {
		if (string(h[:4]) != "RIFF" && string(h[:4]) != "RF64") || string(h[8:12]) != "WAVE" {
			return step{lost: true}
		}
		p.phase = 1
		return step{consumed: 12, next: 8}
	}
	size := int64(binary.LittleEndian.Uint32(h[4:8]))
	switch string(h[:4]) {
	case "fmt ":
		if len(h) < 8+16 {
			return step{more: 8 + 16}
		}
		p.byteRate = int64(binary.LittleEndian.Uint32(h[16:20]))
	case "data":
		if size != 0 && size != 0xffffffff {
			p.dataSize = size
		}
		return step{consumed: 8, count: true}
	}
	return step{consumed: len(h), skip: size + size&1 - int64(len(h)) + 8, next: 8}
}

func (p *wav) nanosOf(bytes int64) int64 {
	if p.byteRate <= 0 {
		return 0
	}
	if p.dataSize > 0 {
		bytes = min(bytes, p.dataSize)
	}
	return bytes * 1_000_000_000 / p.byteRate
}
