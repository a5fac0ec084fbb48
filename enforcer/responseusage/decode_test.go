package responseusage

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"fmt"
	"io"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/andybalholm/brotli"
)

// An encoding a test applies: the Content-Encoding header it is sent with
// and the codings applied in order ("deflate-raw" is deflate without the
// zlib wrapper, sent as "deflate").
type encoding struct {
	header  string
	codings []string
}

var encodings = []encoding{
	{"gzip", []string{"gzip"}},
	{"x-gzip", []string{"gzip"}},
	{"deflate", []string{"deflate"}},
	{"deflate", []string{"deflate-raw"}},
	{"br", []string{"br"}},
	{"gzip, br", []string{"gzip", "br"}},
	{"identity, deflate, GZIP", []string{"deflate", "gzip"}},
}

func (enc encoding) String() string { return strings.Join(enc.codings, "+") }

// flusher is a compressing writer that can end a block early, as a server
// streaming events does after each one.
type flusher interface {
	io.WriteCloser
	Flush() error
}

func newCompressor(coding string, w io.Writer) flusher {
	switch coding {
	case "gzip":
		return gzip.NewWriter(w)
	case "deflate":
		return zlib.NewWriter(w)
	case "deflate-raw":
		fw, _ := flate.NewWriter(w, flate.DefaultCompression)
		return fw
	case "br":
		return brotli.NewWriter(w)
	}
	panic("unknown coding " + coding)
}

// compress applies one coding to body, flushing at random points when r is
// not nil.
func compress(coding string, body []byte, r *rand.Rand) []byte {
	var buf bytes.Buffer
	w := newCompressor(coding, &buf)
	for len(body) > 0 {
		n := len(body)
		if r != nil {
			n = 1 + r.IntN(min(len(body), 512))
		}
		if _, err := w.Write(body[:n]); err != nil {
			panic(err)
		}
		body = body[n:]
		if r != nil && r.IntN(2) == 0 {
			if err := w.Flush(); err != nil {
				panic(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

// compressOpen applies one coding to body, flushed as a streaming server flushes each
// event, without the coding's end (its last block, its checksum): a stream whose client
// left before them.
func compressOpen(coding string, body []byte) []byte {
	var buf bytes.Buffer
	w := newCompressor(coding, &buf)
	if _, err := w.Write(body); err != nil {
		panic(err)
	}
	if err := w.Flush(); err != nil {
		panic(err)
	}
	return bytes.Clone(buf.Bytes())
}

// decodePrefix undoes enc's codings of z, a compressed body perhaps cut short, with the
// standard decompressors: what they give before they fail.
func (enc encoding) decodePrefix(z []byte) []byte {
	for i := len(enc.codings) - 1; i >= 0; i-- {
		var r io.Reader
		var err error
		switch enc.codings[i] {
		case "gzip":
			r, err = gzip.NewReader(bytes.NewReader(z))
		case "deflate":
			r, err = zlib.NewReader(bytes.NewReader(z))
		case "deflate-raw":
			r = flate.NewReader(bytes.NewReader(z))
		case "br":
			r = brotli.NewReader(bytes.NewReader(z))
		}
		if err != nil {
			return nil
		}
		z, _ = io.ReadAll(r)
	}
	return z
}

func (enc encoding) apply(body []byte, r *rand.Rand) []byte {
	for _, c := range enc.codings {
		body = compress(c, body, r)
	}
	return body
}

func (enc encoding) headers() map[string]string {
	return map[string]string{"content-encoding": enc.header}
}

// TestEncodedFixtures reads every fixture compressed with every supported
// coding, cut in many ways: the usage is that of the plain body.
func TestEncodedFixtures(t *testing.T) {
	for _, tc := range fixtureCases {
		if tc.headers != nil {
			continue
		}
		for _, enc := range encodings {
			t.Run(tc.name+"/"+enc.String(), func(t *testing.T) {
				body := readFixture(t, tc.file)
				r := rand.New(rand.NewPCG(seedOf(t.Name()), 2))
				for _, flushes := range []*rand.Rand{nil, r} {
					z := enc.apply(body, flushes)
					check := func(how string, chunks [][]byte) {
						t.Helper()
						if got := run(tc.ct, enc.headers(), Limits{}, chunks, true); !reflect.DeepEqual(got, tc.want) {
							t.Fatalf("%s:\n got %s\nwant %s", how, show(got), show(tc.want))
						}
					}
					check("whole", [][]byte{z})
					check("byte by byte", bytewise(z))
					for i := range 20 {
						check(fmt.Sprintf("random split %d", i), randomSplit(z, r))
					}
					// Cut anywhere, the stream is complete only when what could be decoded of
					// it ended by its protocol (its terminal event after its final report,
					// a closed array), whatever the coding still owed (since 2026-12-03).
					for i := 0; i < len(z); i += 1 + len(z)/50 {
						want := tc.want.Complete && endedAt(tc.ct, enc.decodePrefix(z[:i]))
						if got := run(tc.ct, enc.headers(), Limits{}, splitAt(z[:i], i/2), false); got.Complete != want {
							t.Fatalf("cut at %d of %d: complete %v, want %v", i, len(z), got.Complete, want)
						}
					}
				}
			})
		}
	}
}

func TestEncodedEdgeCases(t *testing.T) {
	body := []byte(`{"object":"chat.completion","model":"m","choices":[{"message":{"content":"Hello"}}],"usage":{"prompt_tokens":1,"completion_tokens":2}}`)
	done := Usage{Model: "m", InputTokens: 1, OutputTokens: 2, Complete: true, Format: FormatOpenAIChat, InputReported: true, OutputReported: true, TextBytes: 5}
	notDone := done
	notDone.Complete = false
	gz := compress("gzip", body, nil)
	zl := compress("deflate", body, nil)
	br := compress("br", body, nil)
	corrupt := bytes.Clone(gz)
	corrupt[len(corrupt)-5] ^= 0xff // the CRC: every byte of the body decodes, the check fails
	midCorrupt := bytes.Clone(gz)
	midCorrupt[12] = 0xff // the first block header: nothing decodes
	gzHeaderOnly := gz[:10]

	cases := []struct {
		name     string
		encoding string
		body     []byte
		want     Usage
	}{
		{"gzip", "gzip", gz, done},
		{"upper case, spaces and identity", " GZip , identity", gz, done},
		{"zlib deflate", "deflate", zl, done},
		{"br", "br", br, done},
		{"gzip without its trailer", "gzip", gz[:len(gz)-8], notDone},
		{"gzip with a bad checksum", "gzip", corrupt, notDone},
		// What follows the end of the compressed stream is ignored.
		{"gzip followed by garbage", "gzip", append(bytes.Clone(gz), "garbage that is not a gzip header"...), done},
		{"gzip followed by another gzip member of white space", "gzip", append(bytes.Clone(gz), compress("gzip", []byte("\n\n"), nil)...), done},
		{"gzip followed by a gzip member of garbage", "gzip", append(bytes.Clone(gz), compress("gzip", []byte("x"), nil)...), notDone},
		{"gzip followed by a corrupt gzip member", "gzip", append(bytes.Clone(gz), corrupt...), notDone},
		{"zlib followed by garbage", "deflate", append(bytes.Clone(zl), 'x'), done},
		{"br followed by garbage", "br", append(bytes.Clone(br), 'x'), done},
		{"br without its end", "br", br[:len(br)-1], notDone},
		{"gzip labelled br", "br", gz, Usage{TextBytes: int64(len(gz)), TextBytesFromRaw: true}},
		{"a plain body labelled gzip: its bytes are the text", "gzip", body, Usage{TextBytes: int64(len(body)), TextBytesFromRaw: true}},
		{"corrupt from the first block", "gzip", midCorrupt, Usage{TextBytes: int64(len(midCorrupt)), TextBytesFromRaw: true}},
		{"gzip header only", "gzip", gzHeaderOnly, Usage{}},
		{"empty gzip body", "gzip", nil, Usage{}},
		{"empty deflate body", "deflate", nil, Usage{}},
		{"zstd is not decoded", "zstd", gz, Usage{Format: FormatUnsupportedEncoding, TextBytes: int64(len(gz)), TextBytesFromRaw: true}},
		{"gzip then zstd is not decoded", "gzip, zstd", gz, Usage{Format: FormatUnsupportedEncoding, TextBytes: int64(len(gz)), TextBytesFromRaw: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := map[string]string{"content-encoding": tc.encoding}
			if got := run(ctJSON, h, Limits{}, [][]byte{tc.body}, true); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("whole:\n got %s\nwant %s", show(got), show(tc.want))
			}
			got := run(ctJSON, h, Limits{}, bytewise(tc.body), true)
			if tc.want.TextBytesFromRaw && tc.want.Format == "" {
				// Where a decoder that reads ahead failed depends on the
				// chunks: the undecoded bytes are counted from the chunk
				// where the failure showed.
				if !got.TextBytesFromRaw || got.TextBytes <= 0 || got.TextBytes > tc.want.TextBytes {
					t.Fatalf("byte by byte: %s, want raw text bytes in (0, %d]", show(got), tc.want.TextBytes)
				}
				got.TextBytes = tc.want.TextBytes
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("byte by byte:\n got %s\nwant %s", show(got), show(tc.want))
			}
		})
	}
}

// TestEncodedStreamIsReadAsItArrives checks that what a chunk completes is
// read by the Write that brings it, not held back until Finish: a stream
// flushed after each event has its usage before it ends.
func TestEncodedStreamIsReadAsItArrives(t *testing.T) {
	body := readFixture(t, "openai_chat_stream.sse")
	var z bytes.Buffer
	w := gzip.NewWriter(&z)
	w.Write(body)
	w.Flush()
	e := New(ctSSE, map[string]string{"content-encoding": "gzip"}, Limits{})
	e.Write(z.Bytes())
	if got := e.acc.u; !got.hasTok(tokPrompt) || !got.hasTok(tokCompletion) {
		t.Fatalf("usage not read before the end of the stream: %+v", got)
	}
	e.Finish(false)
}

// TestDecoderGoroutinesEnd checks that Finish ends the decoder's goroutine
// wherever the stream stopped, and that an unfinished one does exist (so
// the check can fail).
func TestDecoderGoroutinesEnd(t *testing.T) {
	body := readFixture(t, "anthropic_stream.sse")
	gz := compress("gzip", body, nil)
	br := compress("br", body, nil)
	h := func(enc string) map[string]string { return map[string]string{"content-encoding": enc} }
	const n = 20
	// Counted by their stacks, not runtime.NumGoroutine: a goroutine an earlier test
	// left behind (a timer, the runtime's own) may end meanwhile and skew a plain count.
	start := decoderGoroutines()

	open := make([]*Extractor, n)
	for i := range open {
		open[i] = New(ctSSE, h("br"), Limits{})
		open[i].Write(br[:len(br)/2])
	}
	if g := decoderGoroutines(); g < start+n {
		t.Fatalf("%d decoder goroutines with %d decoders running, %d before", g, n, start)
	}
	for i, e := range open {
		e.Finish(i%2 == 0)
	}
	for range n {
		New(ctSSE, h("gzip"), Limits{}).Finish(true) // nothing written
		e := New(ctSSE, h("gzip"), Limits{})         // ended, then garbage
		e.Write(append(bytes.Clone(gz), 'x'))
		e.Finish(true)
		e = New(ctSSE, h("gzip, br"), Limits{}) // corrupt
		e.Write([]byte("not compressed at all"))
		e.Write([]byte("still not"))
		e.Finish(false)
	}
	if g := decoderGoroutines(); g != start {
		t.Fatalf("%d decoder goroutines after Finish, %d before", g, start)
	}
}

// decoderGoroutines counts the goroutines running a decoder (decoder.run on its stack).
func decoderGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte("responseusage.(*decoder).run")) {
			count++
		}
	}
	return count
}

// TestEncodedWriteAllocations: the cost of decoding is per response, not per
// chunk.
func TestEncodedWriteAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("-race: sync.Pool drops what is put back at random, so the decoders' pools refill per chunk")
	}
	body := readFixture(t, "openai_chat_stream.sse")
	for _, enc := range encodings {
		z := enc.apply(body, rand.New(rand.NewPCG(5, 6)))
		allocs := func(pieces int) float64 {
			chunks := splitEvenly(z, pieces)
			return testing.AllocsPerRun(20, func() {
				e := New(ctSSE, enc.headers(), Limits{})
				for _, c := range chunks {
					_ = e.Write(c)
				}
				e.Finish(true)
			})
		}
		// A collection during the runs empties the pools, whose refill
		// adds less than one allocation on average; one per chunk would add
		// thousands.
		few, many := allocs(2), allocs(len(z))
		if many > few+1 {
			t.Errorf("%s: %v allocations in 2 chunks, %v in %d", enc, few, many, len(z))
		}
	}
}

func splitEvenly(b []byte, pieces int) [][]byte {
	var out [][]byte
	size := (len(b) + pieces - 1) / pieces
	for len(b) > 0 {
		n := min(size, len(b))
		out = append(out, b[:n])
		b = b[n:]
	}
	return out
}

func TestParseEncoding(t *testing.T) {
	cases := []struct {
		v    string
		want []coding
		ok   bool
	}{
		{"", nil, true},
		{"identity", nil, true},
		{" , identity,", nil, true},
		{"gzip", []coding{codingGzip}, true},
		{"X-GZIP", []coding{codingGzip}, true},
		{"deflate", []coding{codingDeflate}, true},
		{"Br", []coding{codingBr}, true},
		{"gzip, br", []coding{codingGzip, codingBr}, true},
		{"gzip,identity,br", []coding{codingGzip, codingBr}, true},
		{"gzip, br, gzip", nil, false},
		{"zstd", nil, false},
		{"compress", nil, false},
		{"gzip;q=1", nil, false},
	}
	for _, tc := range cases {
		cs, n, ok := parseEncoding(tc.v)
		if ok != tc.ok || !reflect.DeepEqual(append([]coding(nil), cs[:n]...), append([]coding(nil), tc.want...)) {
			t.Errorf("%q: %v %v, want %v %v", tc.v, cs[:n], ok, tc.want, tc.ok)
		}
	}
}
