package audiolength

// mp3 reads MPEG audio frames (layers I, II and III of MPEG-1, 2 and 2.5): each frame's
// four-byte header gives its length and how many samples it plays. ID3v2 tags are
// passed over; a Xing, Info or VBRI frame (an encoder's table of contents in the shape
// of a silent frame, which decoders do not play) is not counted.
type mp3 struct{ frames bool }

func (p *mp3) start() int {
	if !p.frames {
		return 10 // an ID3v2 tag's header, or the first frame
	}
	return 4
}

func (p *mp3) sync() byte { return 0xff }

// mpegBitrates are the bitrates in kbit/s by bitrate index, for MPEG-1 layers I, II
// and III, then MPEG-2 and 2.5 layer I, then their layers II and III.
var mpegBitrates = [5][15]int64{
	{0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448},
	{0, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384},
	{0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320},
	{0, 32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256},
	{0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160},
}

// mpegRates are the sample rates by version bits (2.5, reserved, 2, 1) and rate index.
var mpegRates = [4][3]int64{{11025, 12000, 8000}, {}, {22050, 24000, 16000}, {44100, 48000, 32000}}

// mpegFrame is what a frame header says.
type mpegFrame struct {
	length, samples, rate int64
	// sideInfo is the length of layer III's side information, after which a Xing or
	// Info tag sits in an encoder's table-of-contents frame (0 for layers I and II).
	sideInfo int
}

func parseMPEG(h []byte) (mpegFrame, bool) {
	if h[0] != 0xff || h[1]&0xe0 != 0xe0 {
		return mpegFrame{}, false
	}
	version, layer := h[1]>>3&3, h[1]>>1&3
	bitrateIndex, rateIndex, padding := h[2]>>4, h[2]>>2&3, int64(h[2]>>1&1)
	if version == 1 || layer == 0 || bitrateIndex == 0 || bitrateIndex == 15 || rateIndex == 3 {
		return mpegFrame{}, false // reserved, or the free format, whose length no header gives
	}
	mpeg1 := version == 3
	table := 3 - int(layer) // layer I, II, III: 0, 1, 2
	if !mpeg1 {
		table = 4
		if layer == 3 {
			table = 3
		}
	}
	bitrate := mpegBitrates[table][bitrateIndex] * 1000
	rate := mpegRates[version][rateIndex]
	mono := h[3]>>6 == 3
	f := mpegFrame{rate: rate}
	switch layer {
	case 3: // layer I
		f.length, f.samples = (12*bitrate/rate+padding)*4, 384
	case 2: // layer II
		f.length, f.samples = 144*bitrate/rate+padding, 1152
	default: // layer III
		f.length, f.samples = 144*bitrate/rate+padding, 1152
		f.sideInfo = 32
		if mono {
			f.sideInfo = 17
		}
		if !mpeg1 {
			f.length, f.samples = 72*bitrate/rate+padding, 576
			f.sideInfo = 17
			if mono {
				f.sideInfo = 9
			}
		}
	}
	return f, true
}

func (p *mp3) header(m *Meter, h []byte) step {
	if !p.frames {
		p.frames = true
		if n := id3Length(h); n > 0 {
			return step{consumed: len(h), skip: n - int64(len(h)), next: 10}
		}
	}
	f, ok := parseMPEG(h)
	if !ok {
		return step{lost: true}
	}
	// A layer III frame may be an encoder's table of contents: read up to its tag.
	if tag := 4 + f.sideInfo + 4; f.sideInfo > 0 && m.nanos == 0 && int64(tag) <= f.length {
		if len(h) < tag {
			return step{more: tag}
		}
		if t := string(h[tag-4 : tag]); t == "Xing" || t == "Info" {
			return step{consumed: len(h), skip: f.length - int64(len(h)), next: 4}
		}
	}
	if len(h) > 36+4 && string(h[36:40]) == "VBRI" && m.nanos == 0 {
		return step{consumed: len(h), skip: f.length - int64(len(h)), next: 4}
	}
	m.add(f.samples, f.rate)
	if int64(len(h)) > f.length {
		return step{consumed: int(f.length), next: 4}
	}
	return step{consumed: len(h), skip: f.length - int64(len(h)), next: 4}
}

// adts reads AAC in ADTS frames: a seven-byte header (nine with a CRC) gives the
// frame's length, its sample rate and its raw data blocks, 1,024 samples each. An ID3v2
// tag at the start is passed over.
type adts struct{ frames bool }

func (p *adts) start() int {
	if !p.frames {
		return 10
	}
	return 7
}

func (p *adts) sync() byte { return 0xff }

var adtsRates = [13]int64{96000, 88200, 64000, 48000, 44100, 32000, 24000, 22050, 16000, 12000, 11025, 8000, 7350}

func (p *adts) header(m *Meter, h []byte) step {
	if !p.frames {
		p.frames = true
		if n := id3Length(h); n > 0 {
			return step{consumed: len(h), skip: n - int64(len(h)), next: 7}
		}
	}
	if h[0] != 0xff || h[1]&0xf6 != 0xf0 {
		return step{lost: true}
	}
	rateIndex := h[2] >> 2 & 0xf
	length := int64(h[3]&3)<<11 | int64(h[4])<<3 | int64(h[5]>>5)
	if int(rateIndex) >= len(adtsRates) || length < 7 {
		return step{lost: true}
	}
	m.add(1024*int64(h[6]&3+1), adtsRates[rateIndex])
	if int64(len(h)) > length {
		return step{consumed: int(length), next: 7}
	}
	return step{consumed: len(h), skip: length - int64(len(h)), next: 7}
}
