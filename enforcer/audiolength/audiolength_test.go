package audiolength

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/testaudio"
)

// fixtures are internal/testaudio's files, with what ffmpeg decodes of each.
func fixtures(t testing.TB) map[string]testaudio.File {
	t.Helper()
	all, err := testaudio.All()
	if err != nil {
		t.Fatal(err)
	}
	return all
}

func measure(contentType string, chunks [][]byte) int64 {
	m := New(contentType)
	for _, c := range chunks {
		m.Write(c)
	}
	return m.Millis()
}

// split cuts b into chunks of the sizes next gives.
func split(b []byte, next func() int) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		n := min(max(next(), 1), len(b))
		out = append(out, b[:n])
		b = b[n:]
	}
	return out
}

// TestMetersReadWhatFFmpegDecodes: each fixture measures what ffmpeg decodes of it, to
// the millisecond, however its bytes are cut into chunks.
func TestMetersReadWhatFFmpegDecodes(t *testing.T) {
	for name, f := range fixtures(t) {
		t.Run(name, func(t *testing.T) {
			b := f.Bytes
			rng := rand.New(rand.NewPCG(1, uint64(len(b))))
			cuts := map[string][][]byte{
				"whole":  {b},
				"bytes":  split(b, func() int { return 1 }),
				"random": split(b, func() int { return rng.IntN(700) }),
			}
			for how, chunks := range cuts {
				if got := measure(f.ContentType, chunks); got != f.DecodedMillis {
					t.Errorf("%s: %d ms, ffmpeg decodes %d ms", how, got, f.DecodedMillis)
				}
			}
		})
	}
}

// TestCutStreamsCountWhatArrived: a stream cut halfway measures about half, never
// more than the whole.
func TestCutStreamsCountWhatArrived(t *testing.T) {
	for name, f := range fixtures(t) {
		got := measure(f.ContentType, [][]byte{f.Bytes[:len(f.Bytes)/2]})
		if half := f.DecodedMillis / 2; got < half*8/10 || got > half*12/10 {
			t.Errorf("%s cut at half its bytes: %d ms, want about %d", name, got, half)
		}
	}
}

// TestJunkIsPassedOver: bytes no header begins (before the first frame, between
// frames, an ID3v1 tag at the end) do not stop the count.
func TestJunkIsPassedOver(t *testing.T) {
	all := fixtures(t)
	for _, name := range []string{"speech.mp3", "speech.aac"} {
		f := all[name]
		junk := []byte("\x00\xff\x01junk\xff")
		var withJunk []byte
		withJunk = append(withJunk, junk...)
		withJunk = append(withJunk, f.Bytes...)
		withJunk = append(withJunk, []byte("TAG"+strings.Repeat("\x00", 125))...)
		if got := measure(f.ContentType, [][]byte{withJunk}); got != f.DecodedMillis {
			t.Errorf("%s with junk around it: %d ms, want %d", name, got, f.DecodedMillis)
		}
	}
}

func TestPCMParameters(t *testing.T) {
	second := make([]byte, 48_000)
	for ct, want := range map[string]int64{
		"audio/pcm":                         1000,
		"audio/L16; rate=48000":             500,
		"audio/l16;rate=16000;channels=2":   750,
		"audio/pcm; rate=junk; channels=-1": 1000,
	} {
		if got := measure(ct, [][]byte{second}); got != want {
			t.Errorf("%q: 48,000 bytes are %d ms, want %d", ct, got, want)
		}
	}
}

func TestTypesNotRead(t *testing.T) {
	for _, ct := range []string{"", "application/json", "audio/x-unknown", "text/event-stream", "audio/mpeg; bad=\""} {
		if New(ct) != nil {
			t.Errorf("%q gets a meter", ct)
		}
	}
}

// FuzzMeter: any bytes, cut anywhere, measure the same as whole, and never panic.
func FuzzMeter(f *testing.F) {
	for _, a := range fixtures(f) {
		f.Add(a.ContentType, a.Bytes[:min(len(a.Bytes), 4096)], uint16(7))
	}
	// A format chunk shorter than the fields read of it (it once made a negative skip).
	f.Add("audio/wav", []byte("RIFF0000WAVEfmt \x0e\x00\x00\x00000000000000000000"), uint16(94))
	f.Fuzz(func(t *testing.T, ct string, b []byte, cut uint16) {
		m := New(ct)
		if m == nil {
			return
		}
		m.Write(b)
		whole := m.Millis()
		if whole < 0 {
			t.Fatalf("negative duration %d", whole)
		}
		step := int(cut%512) + 1
		if got := measure(ct, split(b, func() int { return step })); got != whole {
			t.Fatalf("in chunks of %d: %d ms, whole %d ms", step, got, whole)
		}
	})
}

// BenchmarkMeter measures each container in 4 KiB chunks, as a response body arrives:
//
//	go test -run '^$' -bench Meter ./enforcer/audiolength
func BenchmarkMeter(b *testing.B) {
	all := fixtures(b)
	for _, name := range []string{"speech.mp3", "speech.opus", "speech.aac", "speech.flac", "speech.wav"} {
		f := all[name]
		chunks := split(f.Bytes, func() int { return 4096 })
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(f.Bytes)))
			b.ReportAllocs()
			for b.Loop() {
				if measure(f.ContentType, chunks) != f.DecodedMillis {
					b.Fatal("wrong duration")
				}
			}
		})
	}
}

// TestFLACFalseSyncIsNotAFrame: a frame header found inside another frame's data (sync
// code and CRC-8 alike, as one candidate in 256 passes the CRC by chance) but out of the
// stream's numbering is not counted.
func TestFLACFalseSyncIsNotAFrame(t *testing.T) {
	f := fixtures(t)["speech.flac"]
	b := f.Bytes
	// The first frame follows the metadata blocks.
	at := 4
	for last := false; !last; {
		last = b[at]&0x80 != 0
		at += 4 + (int(b[at+1])<<16 | int(b[at+2])<<8 | int(b[at+3]))
	}
	m := New(f.ContentType)
	s := (&flac{phase: 2}).frame(m, b[at:at+16])
	if s.lost || s.more > 0 || s.consumed < 6 || m.nanos == 0 {
		t.Fatalf("the first frame's header at %d was not read: %+v", at, s)
	}
	// The same header renumbered 3 (with its CRC-8 made right), put inside the first
	// frame's data.
	fake := append([]byte(nil), b[at:at+s.consumed]...)
	fake[4] = 3
	fake[len(fake)-1] = crc8(fake[:len(fake)-1])
	inside := at + s.consumed + 100
	withFake := append(append(append([]byte(nil), b[:inside]...), fake...), b[inside:]...)
	if got := measure(f.ContentType, [][]byte{withFake}); got != f.DecodedMillis {
		t.Fatalf("%d ms with a false header inside a frame, want %d", got, f.DecodedMillis)
	}
}
