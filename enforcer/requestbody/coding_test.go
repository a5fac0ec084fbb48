package requestbody

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"errors"
	"net/http"
	"slices"
	"testing"

	"github.com/andybalholm/brotli"
)

func TestCodings(t *testing.T) {
	got := Codings([]string{"gzip, identity", " BR ", "", "Identity"})
	if !slices.Equal(got, []string{"gzip", "br"}) {
		t.Fatalf("%q", got)
	}
	if Codings(nil) != nil {
		t.Fatal("codings of no header")
	}
}

// Decode undoes the codings last first; raw deflate (no zlib wrapper) and x-gzip are
// read too; what it cannot read is an error, never a body.
func TestDecode(t *testing.T) {
	const plain = `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`
	var gz, raw, br bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(plain))
	_ = zw.Close()
	fw, _ := flate.NewWriter(&raw, flate.BestSpeed)
	_, _ = fw.Write([]byte(plain))
	_ = fw.Close()
	bw := brotli.NewWriter(&br)
	_, _ = bw.Write(gz.Bytes()) // gzip, then br
	_ = bw.Close()
	for _, tc := range []struct {
		name    string
		codings []string
		body    []byte
		limit   int64
		err     error
	}{
		{"x-gzip", []string{"x-gzip"}, gz.Bytes(), 1 << 10, nil},
		{"raw deflate", []string{"deflate"}, raw.Bytes(), 1 << 10, nil},
		{"gzip then br", []string{"gzip", "br"}, br.Bytes(), 1 << 10, nil},
		{"at the limit", []string{"gzip"}, gz.Bytes(), int64(len(plain)), nil},
		{"past the limit", []string{"gzip"}, gz.Bytes(), int64(len(plain)) - 1, &http.MaxBytesError{}},
		{"zstd", []string{"zstd"}, gz.Bytes(), 1 << 10, ErrCodingUnsupported},
		{"three codings", []string{"gzip", "gzip", "gzip"}, gz.Bytes(), 1 << 10, ErrCodingUnsupported},
		{"not gzip", []string{"gzip"}, []byte(plain), 1 << 10, ErrCodingCorrupt},
		{"cut gzip", []string{"gzip"}, gz.Bytes()[:gz.Len()-9], 1 << 10, ErrCodingCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Decode(tc.codings, tc.body, tc.limit)
			var tooLarge *http.MaxBytesError
			switch {
			case tc.err == nil && (err != nil || string(got) != plain):
				t.Fatalf("%q %v", got, err)
			case tc.err != nil && errors.As(tc.err, &tooLarge):
				if !errors.As(err, &tooLarge) || tooLarge.Limit != tc.limit || got != nil {
					t.Fatalf("%q %v, want a MaxBytesError at %d", got, err, tc.limit)
				}
			case tc.err != nil && (!errors.Is(err, tc.err) || got != nil):
				t.Fatalf("%q %v, want %v", got, err, tc.err)
			}
		})
	}
}
