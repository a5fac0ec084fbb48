package gateway

import (
	"bytes"
	"io"
	"testing"
	"testing/iotest"
)

// readBody reserves at most firstBodyBytes before a body's bytes arrive, whatever
// length it announced, and still ends at the announced length with the bytes whole:
// before 2026-12-02 a client that announced the cap (16 MiB) and sent nothing had the
// cap reserved for it.
func TestReadBodyGrowsAsItsBytesArrive(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 300<<10+7)
	for _, tc := range []struct {
		name      string
		body      []byte
		announced int64
		mostCap   int
	}{
		{"small, announced", []byte(`{"model":"m"}`), 13, 14},
		{"announced the cap, sent two bytes", []byte("{}"), 16 << 20, firstBodyBytes},
		{"large, announced", big, int64(len(big)), len(big) + 1},
		{"longer than announced", big, 100 << 10, 2 * len(big)},
		{"not announced", big, -1, 2 * len(big)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// One byte a read at first: the buffer must not be sized by the announcement.
			r := io.MultiReader(iotest.OneByteReader(bytes.NewReader(tc.body[:1])), bytes.NewReader(tc.body[1:]))
			b, err := readBody(r, tc.announced, 16<<20)
			if err != nil || !bytes.Equal(b, tc.body) {
				t.Fatalf("read %d bytes (%v), want the %d sent", len(b), err, len(tc.body))
			}
			if cap(b) > tc.mostCap {
				t.Fatalf("buffer of %d bytes for a body of %d announced %d, want at most %d", cap(b), len(b), tc.announced, tc.mostCap)
			}
		})
	}
	if b, err := readBody(iotest.ErrReader(io.ErrUnexpectedEOF), 10, 100); err == nil || len(b) != 0 {
		t.Fatalf("a failing body read %q, %v", b, err)
	}
}
