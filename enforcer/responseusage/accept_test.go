package responseusage_test

import (
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/enforcer/responseusage"
)

func TestReadableAcceptEncoding(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		changed  bool
	}{
		{"", "", false},
		{"gzip, deflate, br", "gzip, deflate, br", false},
		{"gzip;q=1.0, identity; q=0.5", "gzip;q=1.0, identity; q=0.5", false},
		{"X-Gzip", "X-Gzip", false},
		{"deflate, gzip, br, zstd", "deflate, gzip, br", true}, // curl --compressed
		{"gzip, deflate, br, zstd", "gzip, deflate, br", true}, // Chrome
		{"zstd;q=1.0, br;q=0.9", "br;q=0.9", true},
		{"zstd", "identity", true},
		{"compress, zstd", "identity", true},
		{"*", "gzip, deflate, br", true},
		{"br, *;q=0.1", "br, gzip;q=0.1, deflate;q=0.1", true},
		{" gzip , ZSTD ,, br ", "gzip, br", true},
	} {
		got, changed := responseusage.ReadableAcceptEncoding(tc.in)
		if got != tc.want || changed != tc.changed {
			t.Errorf("ReadableAcceptEncoding(%q) = %q, %v; want %q, %v", tc.in, got, changed, tc.want, tc.changed)
		}
	}
}

func TestStreamAcceptEncoding(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		changed  bool
	}{
		{"", "", false},
		{"identity", "identity", false},
		{"gzip, deflate", "identity", true}, // Node's fetch, the OpenAI and Anthropic SDKs
		{"gzip, deflate, br, zstd", "identity", true},
		{"gzip, identity;q=0.5", "identity", true},
		{"*", "identity", true},
		{"*;q=0, gzip", "deflate;q=0, br;q=0, gzip", true}, // narrowed as ReadableAcceptEncoding does
		{"*;q=0, identity, gzip", "identity", true},
		{"gzip, identity;q=0", "gzip, identity;q=0", false},
		{"gzip, Identity; Q=0.000", "gzip, Identity; Q=0.000", false},
		{"br, zstd, identity;q=0", "br, identity;q=0", true},
		{"gzip, identity;q=0.01", "identity", true},
		{"gzip, identity;q=00.1", "identity", true},
	} {
		got, changed := responseusage.StreamAcceptEncoding(tc.in)
		if got != tc.want || changed != tc.changed {
			t.Errorf("StreamAcceptEncoding(%q) = %q, %v; want %q, %v", tc.in, got, changed, tc.want, tc.changed)
		}
	}
}

// Every coding ReadableAcceptEncoding keeps is one the extractor decodes, and every one
// it drops is one the extractor reports as unsupported: the list and the decoders agree.
func TestReadableAcceptEncodingKeepsOnlyDecodedCodings(t *testing.T) {
	offered := []string{"gzip", "x-gzip", "deflate", "br", "zstd", "compress", "dcz"}
	v, _ := responseusage.ReadableAcceptEncoding(strings.Join(offered, ", "))
	kept := map[string]bool{}
	for _, c := range strings.Split(v, ", ") {
		kept[c] = true
	}
	for _, c := range offered {
		ext := responseusage.New("application/json", map[string]string{"content-encoding": c}, responseusage.Limits{})
		decoded := ext.Finish(true).Format != responseusage.FormatUnsupportedEncoding
		if decoded != kept[c] {
			t.Errorf("%s: decoded %v, kept in Accept-Encoding %v (%q)", c, decoded, kept[c], v)
		}
	}
}

// The common case, a list of codings all read here, allocates nothing: every proxied
// request passes through it.
func TestReadableAcceptEncodingAllocatesNothingWhenUnchanged(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { responseusage.ReadableAcceptEncoding("gzip, deflate, br") }); n != 0 {
		t.Errorf("%v allocations for a readable list, want 0", n)
	}
}
