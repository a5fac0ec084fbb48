package typeid

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// Prefix is the type part of a TypeID, without the trailing underscore.
type Prefix string

// The prefixes Tollgate uses. The spec fixes mkt, plg, mkp, org and om; the
// others are ours and follow the same rules.
const (
	Org          Prefix = "org"
	Member       Prefix = "om"
	Team         Prefix = "tem"
	User         Prefix = "usr"
	APIKey       Prefix = "apk"
	Plugin       Prefix = "plg"
	Marketplace  Prefix = "mkt"
	Membership   Prefix = "mkp"
	Invitation   Prefix = "inv"
	Session      Prefix = "ses"
	AuditEvent   Prefix = "aud"
	Policy       Prefix = "ulp"
	Assignment   Prefix = "ula"
	ResetRequest Prefix = "urr"
)

const (
	// SuffixLen is the number of base32 characters after the underscore:
	// 26 characters carry 130 bits, of which the top 2 are always zero.
	SuffixLen = 26

	// maxPrefixLen follows the TypeID spec. It also bounds how much of an
	// untrusted string Parse ever looks at.
	maxPrefixLen = 63

	// alphabet is Crockford's base32 in lower case. Its characters are in
	// ascending ASCII order, which is what makes the string order of two
	// suffixes equal to the numeric order of their payloads.
	alphabet = "0123456789abcdefghjkmnpqrstvwxyz"

	// maxMillis is the largest time a UUIDv7 can carry (48 bits of ms).
	maxMillis = 1<<48 - 1
)

// ErrInvalid is wrapped by every error of Parse, Check and NewAt that is
// caused by a malformed id or prefix, so callers can test with errors.Is.
var ErrInvalid = errors.New("invalid TypeID")

// decodeTable maps an ASCII byte to its 5-bit value, or 0xff when the byte is
// not in the alphabet. Upper case and Crockford's aliases (i, l, o, u) are
// deliberately absent: accepting them would give one id several spellings.
var decodeTable = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for i := 0; i < len(alphabet); i++ {
		t[alphabet[i]] = byte(i)
	}
	return t
}()

// New returns a fresh id with prefix p, using the current time and
// crypto/rand. It panics if p is not a valid prefix: prefixes are compile-time
// constants, so that is a programming error, not an input error.
func New(p Prefix) string {
	s, err := NewAt(p, time.Now(), rand.Reader)
	if err != nil {
		panic("typeid.New: " + err.Error())
	}
	return s
}

// NewAt returns an id with prefix p whose payload is a UUIDv7: 48 bits of
// Unix milliseconds of t, then version and variant bits, the rest read from
// r. It exists so tests and callers with an injected clock get deterministic
// or time-controlled ids. t must lie between 1970 and the year 10889.
func NewAt(p Prefix, t time.Time, r io.Reader) (string, error) {
	if err := validPrefix(p); err != nil {
		return "", err
	}
	ms := t.UnixMilli()
	if ms < 0 || ms > maxMillis {
		return "", fmt.Errorf("typeid: time %s cannot be stored in 48 bits of Unix milliseconds", t.UTC().Format(time.RFC3339))
	}
	var b [16]byte
	// Big-endian milliseconds first, so later ids compare greater.
	var msb [8]byte
	binary.BigEndian.PutUint64(msb[:], uint64(ms))
	copy(b[:6], msb[2:])
	if _, err := io.ReadFull(r, b[6:]); err != nil {
		return "", fmt.Errorf("typeid: reading random bytes: %w", err)
	}
	b[6] = b[6]&0x0f | 0x70 // version 7
	b[8] = b[8]&0x3f | 0x80 // RFC 9562 variant
	return format(p, b), nil
}

// Format encodes a 128-bit payload under prefix p. It is the inverse of Parse.
func Format(p Prefix, b [16]byte) (string, error) {
	if err := validPrefix(p); err != nil {
		return "", err
	}
	return format(p, b), nil
}

func format(p Prefix, b [16]byte) string {
	hi := binary.BigEndian.Uint64(b[:8])
	lo := binary.BigEndian.Uint64(b[8:])
	out := make([]byte, 0, len(p)+1+SuffixLen)
	out = append(out, p...)
	out = append(out, '_')
	// Character i holds bits [5*(25-i), 5*(25-i)+5) of the 130-bit number
	// whose top two bits are zero, so the first character is always 0-7.
	for i := 0; i < SuffixLen; i++ {
		out = append(out, alphabet[shr128(hi, lo, uint(5*(SuffixLen-1-i)))&31])
	}
	return string(out)
}

// shr128 returns the low 64 bits of (hi:lo) >> n.
func shr128(hi, lo uint64, n uint) uint64 {
	switch {
	case n == 0:
		return lo
	case n >= 64:
		return hi >> (n - 64)
	default:
		return lo>>n | hi<<(64-n)
	}
}

// Parse splits s into its prefix and 128-bit payload. It accepts any prefix of
// 1 to 63 lowercase ASCII letters; use Check or Valid to require a specific
// one. Every string Parse accepts is the only spelling of its payload, so
// Format(Parse(s)) == s.
func Parse(s string) (Prefix, [16]byte, error) {
	var zero [16]byte
	if s == "" {
		return "", zero, fmt.Errorf("typeid: %w: empty string", ErrInvalid)
	}
	if len(s) > maxPrefixLen+1+SuffixLen {
		return "", zero, fmt.Errorf("typeid: %w: longer than %d characters", ErrInvalid, maxPrefixLen+1+SuffixLen)
	}
	sep := len(s) - SuffixLen - 1
	if sep < 1 || s[sep] != '_' {
		return "", zero, fmt.Errorf("typeid: %w: want <prefix>_ followed by %d characters", ErrInvalid, SuffixLen)
	}
	p := Prefix(s[:sep])
	if err := validPrefix(p); err != nil {
		return "", zero, err
	}
	suffix := s[sep+1:]
	var hi, lo uint64
	for i := 0; i < SuffixLen; i++ {
		d := decodeTable[suffix[i]]
		if d == 0xff {
			return "", zero, fmt.Errorf("typeid: %w: character %d of the suffix is not lowercase Crockford base32", ErrInvalid, i+1)
		}
		// A first digit above 7 would need more than 128 bits.
		if i == 0 && d > 7 {
			return "", zero, fmt.Errorf("typeid: %w: the suffix must start with 0-7", ErrInvalid)
		}
		hi = hi<<5 | lo>>59
		lo = lo<<5 | uint64(d)
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], hi)
	binary.BigEndian.PutUint64(b[8:], lo)
	return p, b, nil
}

// validPrefix is stricter than the TypeID spec (which allows inner
// underscores): none of our prefixes need one, and without them the
// separator is unambiguous.
func validPrefix(p Prefix) error {
	if len(p) == 0 || len(p) > maxPrefixLen {
		return fmt.Errorf("typeid: %w: prefix must be 1 to %d characters", ErrInvalid, maxPrefixLen)
	}
	for i := 0; i < len(p); i++ {
		if p[i] < 'a' || p[i] > 'z' {
			return fmt.Errorf("typeid: %w: prefix must be lowercase ASCII letters", ErrInvalid)
		}
	}
	return nil
}

// Len is the exact length of every id with prefix p.
func (p Prefix) Len() int { return len(p) + 1 + SuffixLen }

// CheckError is returned by Check. Its message describes what was expected,
// not what was wrong, so it can go straight into a 400 response without
// echoing attacker-controlled input; Unwrap gives the precise cause for logs.
type CheckError struct {
	Want Prefix
	Err  error
}

func (e *CheckError) Error() string {
	return fmt.Sprintf("must be a %q TypeID of exactly %d characters", string(e.Want)+"_", e.Want.Len())
}

func (e *CheckError) Unwrap() error { return e.Err }

// Check returns nil if s is a well-formed id with prefix p, else a
// *CheckError that wraps ErrInvalid.
func Check(s string, p Prefix) error {
	got, _, err := Parse(s)
	if err != nil {
		return &CheckError{Want: p, Err: err}
	}
	if got != p {
		return &CheckError{Want: p, Err: fmt.Errorf("typeid: %w: prefix is not %q", ErrInvalid, string(p))}
	}
	return nil
}

// Valid reports whether s is a well-formed id with prefix p.
func Valid(s string, p Prefix) bool { return Check(s, p) == nil }
