package typeid

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

func mustHex16(t testing.TB, s string) [16]byte {
	t.Helper()
	raw, err := hex.DecodeString(s)
	if err != nil || len(raw) != 16 {
		t.Fatalf("bad hex %q", s)
	}
	return [16]byte(raw)
}

// The spec's identifier table: these exact lengths appear in request
// validation, so they are pinned here rather than derived.
func TestSpecLengths(t *testing.T) {
	tests := []struct {
		name   string
		prefix Prefix
		want   int
	}{
		{"marketplace", Marketplace, 30},
		{"plugin", Plugin, 30},
		{"marketplace-plugin membership", Membership, 30},
		{"organization", Org, 30},
		{"organization membership", Member, 29},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.prefix.Len(); got != tc.want {
				t.Errorf("%q.Len() = %d, want %d", tc.prefix, got, tc.want)
			}
			id := New(tc.prefix)
			if len(id) != tc.want {
				t.Errorf("New(%q) = %q has length %d, want %d", tc.prefix, id, len(id), tc.want)
			}
			if !strings.HasPrefix(id, string(tc.prefix)+"_") {
				t.Errorf("New(%q) = %q lacks its prefix", tc.prefix, id)
			}
		})
	}
}

func TestAllPrefixesConstants(t *testing.T) {
	tests := []struct {
		name string
		got  Prefix
		want string
	}{
		{"Org", Org, "org"},
		{"Member", Member, "om"},
		{"Team", Team, "tem"},
		{"User", User, "usr"},
		{"APIKey", APIKey, "apk"},
		{"Plugin", Plugin, "plg"},
		{"Marketplace", Marketplace, "mkt"},
		{"Membership", Membership, "mkp"},
		{"Invitation", Invitation, "inv"},
		{"Session", Session, "ses"},
		{"AuditEvent", AuditEvent, "aud"},
		{"Policy", Policy, "ulp"},
		{"Assignment", Assignment, "ula"},
		{"ResetRequest", ResetRequest, "urr"},
	}
	seen := map[Prefix]string{}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if string(tc.got) != tc.want {
				t.Fatalf("%s = %q, want %q", tc.name, tc.got, tc.want)
			}
			// Two kinds sharing a prefix would make Check useless between them.
			if other, dup := seen[tc.got]; dup {
				t.Fatalf("%s reuses the prefix of %s", tc.name, other)
			}
			seen[tc.got] = tc.name
			id := New(tc.got)
			if err := Check(id, tc.got); err != nil {
				t.Fatalf("Check(New(%q)) = %v", tc.got, err)
			}
		})
	}
}

// Known vectors, computed independently of this package (the first is the
// example from the TypeID specification).
func TestFormatVectors(t *testing.T) {
	tests := []struct {
		name   string
		prefix Prefix
		hex    string
		want   string
	}{
		{"spec example", "prefix", "01890a5dac96774bbcceb302099a8057", "prefix_01h455vb4pex5vsknk084sn02q"},
		{"zero", Org, "00000000000000000000000000000000", "org_00000000000000000000000000"},
		{"one", Member, "00000000000000000000000000000001", "om_00000000000000000000000001"},
		{"thirty-two", Plugin, "00000000000000000000000000000020", "plg_00000000000000000000000010"},
		{"max", Marketplace, "ffffffffffffffffffffffffffffffff", "mkt_7zzzzzzzzzzzzzzzzzzzzzzzzz"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := mustHex16(t, tc.hex)
			got, err := Format(tc.prefix, b)
			if err != nil {
				t.Fatalf("Format: %v", err)
			}
			if got != tc.want {
				t.Fatalf("Format = %q, want %q", got, tc.want)
			}
			p, back, err := Parse(tc.want)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tc.want, err)
			}
			if p != tc.prefix || back != b {
				t.Fatalf("Parse(%q) = %q %x, want %q %x", tc.want, p, back, tc.prefix, b)
			}
		})
	}
}

func TestRoundTripRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	prefixes := []Prefix{Org, Member, Team, Plugin, "x", Prefix(strings.Repeat("z", 63))}
	for i := 0; i < 5000; i++ {
		var b [16]byte
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		p := prefixes[i%len(prefixes)]
		s, err := Format(p, b)
		if err != nil {
			t.Fatalf("Format(%q): %v", p, err)
		}
		gp, gb, err := Parse(s)
		if err != nil || gp != p || gb != b {
			t.Fatalf("Parse(Format(%q, %x)) = %q %x %v", p, b, gp, gb, err)
		}
	}
}

func TestRejections(t *testing.T) {
	valid := "mkt_01h455vb4pex5vsknk084sn02q"
	tests := []struct {
		name string
		in   string
	}{
		{"empty", ""},
		{"prefix only", "mkt_"},
		{"no separator", "mkt01h455vb4pex5vsknk084sn02q"},
		{"suffix only", "01h455vb4pex5vsknk084sn02q"},
		{"empty prefix", "_01h455vb4pex5vsknk084sn02q"},
		{"wrong prefix", "plg_01h455vb4pex5vsknk084sn02q"},
		{"prefix upper case", "MKT_01h455vb4pex5vsknk084sn02q"},
		{"suffix upper case", "mkt_01H455VB4PEX5VSKNK084SN02Q"},
		{"one upper case letter", "mkt_01h455vb4pex5vsknk084sn02Q"},
		{"letter i", "mkt_01h455vb4pex5vsknk084sn02i"},
		{"letter l", "mkt_01h455vb4pex5vsknk084sn02l"},
		{"letter o", "mkt_01h455vb4pex5vsknk084sn02o"},
		{"letter u", "mkt_01h455vb4pex5vsknk084sn02u"},
		{"first char 8", "mkt_81h455vb4pex5vsknk084sn02q"},
		{"first char z", "mkt_z1h455vb4pex5vsknk084sn02q"},
		{"too short", valid[:len(valid)-1]},
		{"too long", valid + "0"},
		{"hyphen", "mkt_01h455vb4pex5vsknk084sn0-q"},
		{"space", "mkt_01h455vb4pex5vsknk084sn02 "},
		{"double underscore", "mkt__1h455vb4pex5vsknk084sn02q"},
		{"underscore in prefix", "mk_t_01h455vb4pex5vsknk084sn02q"},
		{"digit in prefix", "mk1_01h455vb4pex5vsknk084sn02q"},
		{"non-ASCII", "mkt_01h455vb4pex5vsknk084sn0\u00e9"},
		{"NUL byte", "mkt_01h455vb4pex5vsknk084sn02\x00"},
	}
	if err := Check(valid, Marketplace); err != nil {
		t.Fatalf("baseline %q rejected: %v", valid, err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if Valid(tc.in, Marketplace) {
				t.Fatalf("Valid(%q, mkt) = true", tc.in)
			}
			err := Check(tc.in, Marketplace)
			if err == nil {
				t.Fatalf("Check(%q, mkt) = nil", tc.in)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("Check error %v does not wrap ErrInvalid", err)
			}
			var ce *CheckError
			if !errors.As(err, &ce) || ce.Want != Marketplace {
				t.Errorf("Check error %#v is not a *CheckError for mkt", err)
			}
		})
	}
}

func TestCheckMessage(t *testing.T) {
	tests := []struct {
		name   string
		prefix Prefix
		want   string
	}{
		{"marketplace", Marketplace, `must be a "mkt_" TypeID of exactly 30 characters`},
		{"plugin", Plugin, `must be a "plg_" TypeID of exactly 30 characters`},
		{"membership", Member, `must be a "om_" TypeID of exactly 29 characters`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Check("nope", tc.prefix)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("Check message = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestInvalidPrefixes(t *testing.T) {
	tests := []struct {
		name   string
		prefix Prefix
	}{
		{"empty", ""},
		{"upper case", "Org"},
		{"underscore", "o_rg"},
		{"digit", "org1"},
		{"too long", Prefix(strings.Repeat("a", 64))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewAt(tc.prefix, time.Unix(0, 0), bytes.NewReader(make([]byte, 16))); !errors.Is(err, ErrInvalid) {
				t.Errorf("NewAt(%q) error = %v, want ErrInvalid", tc.prefix, err)
			}
			if _, err := Format(tc.prefix, [16]byte{}); !errors.Is(err, ErrInvalid) {
				t.Errorf("Format(%q) error = %v, want ErrInvalid", tc.prefix, err)
			}
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("New(%q) did not panic", tc.prefix)
					}
				}()
				New(tc.prefix)
			}()
		})
	}
}

func TestNewAtLayout(t *testing.T) {
	at := time.Date(2026, 9, 14, 5, 0, 0, 123_000_000, time.UTC)
	rnd := bytes.Repeat([]byte{0xff}, 10)
	s, err := NewAt(Org, at, bytes.NewReader(rnd))
	if err != nil {
		t.Fatal(err)
	}
	_, b, err := Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	var ms uint64
	for _, x := range b[:6] {
		ms = ms<<8 | uint64(x)
	}
	if int64(ms) != at.UnixMilli() {
		t.Errorf("timestamp = %d, want %d", ms, at.UnixMilli())
	}
	if b[6]>>4 != 7 {
		t.Errorf("version nibble = %x, want 7", b[6]>>4)
	}
	if b[8]>>6 != 2 {
		t.Errorf("variant bits = %b, want 10", b[8]>>6)
	}
}

func TestNewAtErrors(t *testing.T) {
	tests := []struct {
		name string
		at   time.Time
		rnd  []byte
	}{
		{"before 1970", time.Date(1969, 12, 31, 23, 59, 59, 0, time.UTC), make([]byte, 10)},
		{"beyond 48-bit millis", time.UnixMilli(1 << 48), make([]byte, 10)},
		{"short random source", time.Unix(0, 0), make([]byte, 9)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if s, err := NewAt(Org, tc.at, bytes.NewReader(tc.rnd)); err == nil {
				t.Fatalf("NewAt = %q, want error", s)
			}
		})
	}
}

// Ids made at later milliseconds must sort after earlier ones as plain
// strings, whatever the random bits: that is what makes them usable as a
// time-ordered key.
func TestOrderingByTime(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	src := readerFunc(func(p []byte) (int, error) {
		for i := range p {
			p[i] = byte(r.Uint32())
		}
		return len(p), nil
	})
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var ids []string
	at := base
	for i := 0; i < 2000; i++ {
		at = at.Add(time.Duration(1+r.IntN(10_000)) * time.Millisecond)
		s, err := NewAt(Session, at, src)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s)
	}
	if !slices.IsSorted(ids) {
		t.Fatal("ids generated at increasing milliseconds are not in string order")
	}
	// Random bits always sort after a zero-random id of the same ms, and
	// before an id of the next ms.
	lo, _ := NewAt(Session, base, bytes.NewReader(make([]byte, 10)))
	mid, _ := NewAt(Session, base, src)
	hi, _ := NewAt(Session, base.Add(time.Millisecond), bytes.NewReader(make([]byte, 10)))
	if !(lo <= mid && mid < hi) {
		t.Fatalf("ordering within a millisecond broken: %q %q %q", lo, mid, hi)
	}
}

func TestNewIsUnique(t *testing.T) {
	seen := make(map[string]bool)
	for i := 0; i < 10000; i++ {
		id := New(Session)
		if seen[id] {
			t.Fatalf("duplicate id %q", id)
		}
		seen[id] = true
	}
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"", "_", "org_", "mkt_01h455vb4pex5vsknk084sn02q", "om_00000000000000000000000000",
		"mkt_7zzzzzzzzzzzzzzzzzzzzzzzzz", "mkt_8zzzzzzzzzzzzzzzzzzzzzzzzz", "MKT_01H455VB4PEX5VSKNK084SN02Q",
		"a_b_01h455vb4pex5vsknk084sn02q", strings.Repeat("a", 63) + "_01h455vb4pex5vsknk084sn02q",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, b, err := Parse(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse(%q) error %v does not wrap ErrInvalid", s, err)
			}
			if Valid(s, Org) {
				t.Fatalf("Valid accepted %q that Parse rejects", s)
			}
			return
		}
		back, err := Format(p, b)
		if err != nil {
			t.Fatalf("Format(Parse(%q)): %v", s, err)
		}
		if back != s {
			t.Fatalf("round trip %q -> %q", s, back)
		}
		if len(s) != p.Len() {
			t.Fatalf("accepted %q of length %d, want %d", s, len(s), p.Len())
		}
		if !Valid(s, p) {
			t.Fatalf("Valid(%q, %q) = false after Parse accepted it", s, p)
		}
	})
}
