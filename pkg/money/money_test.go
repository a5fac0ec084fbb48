package money

import (
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

// usdPattern is the contract from ACCOUNTING.md, used as an independent
// oracle for the hand-written parser.
var usdPattern = regexp.MustCompile(`^(0|[1-9][0-9]*)(\.[0-9]{1,6})?$`)

func TestParseUSD(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want int64
	}{
		{"zero", "0", 0},
		{"zero with decimals", "0.0", 0},
		{"smallest unit", "0.000001", 1},
		{"five micro", "0.000005", 5},
		{"one and a half", "1.5", 1_500_000},
		{"trailing zeros", "1.500000", 1_500_000},
		{"one dollar", "1", 1_000_000},
		{"all six decimals", "12.345678", 12_345_678},
		{"max allowance", "4503599627.370495", MaxAllowanceMicroUSD},
		{"max int64", "9223372036854.775807", math.MaxInt64},
		{"max int64 whole dollars", "9223372036854", 9_223_372_036_854_000_000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseUSD(tc.in)
			if err != nil {
				t.Fatalf("ParseUSD(%q): %v", tc.in, err)
			}
			if got != tc.want {
				t.Fatalf("ParseUSD(%q) = %d, want %d", tc.in, got, tc.want)
			}
		})
	}
}

func TestParseUSDRejects(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want error
	}{
		{"empty", "", ErrInvalidAmount},
		{"negative", "-1", ErrInvalidAmount},
		{"plus sign", "+1", ErrInvalidAmount},
		{"leading zero", "01", ErrInvalidAmount},
		{"double zero", "00", ErrInvalidAmount},
		{"leading dot", ".5", ErrInvalidAmount},
		{"trailing dot", "1.", ErrInvalidAmount},
		{"seven decimals", "0.0000001", ErrInvalidAmount},
		{"exponent", "1e6", ErrInvalidAmount},
		{"two dots", "1.2.3", ErrInvalidAmount},
		{"comma", "1,5", ErrInvalidAmount},
		{"space", " 1", ErrInvalidAmount},
		{"trailing newline", "1\n", ErrInvalidAmount},
		{"hex", "0x10", ErrInvalidAmount},
		{"unicode digit", "\u0661", ErrInvalidAmount},
		{"33 characters", strings.Repeat("1", 33), ErrInvalidAmount},
		{"max int64 plus one micro", "9223372036854.775808", ErrOverflow},
		{"too many whole dollars", "9223372036855", ErrOverflow},
		{"32 digits", strings.Repeat("9", 32), ErrOverflow},
		{"32 characters with decimals", strings.Repeat("9", 25) + ".999999", ErrOverflow},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseUSD(tc.in)
			if !errors.Is(err, tc.want) {
				t.Fatalf("ParseUSD(%q) = %d, %v; want %v", tc.in, got, err, tc.want)
			}
			if got != 0 {
				t.Fatalf("ParseUSD(%q) returned %d alongside an error", tc.in, got)
			}
		})
	}
}

func TestFormatUSD(t *testing.T) {
	tests := []struct {
		name string
		in   int64
		want string
	}{
		{"zero", 0, "0"},
		{"five micro", 5, "0.000005"},
		{"one micro", 1, "0.000001"},
		{"one and a half", 1_500_000, "1.5"},
		{"one dollar", 1_000_000, "1"},
		{"just under a dollar", 999_999, "0.999999"},
		{"ten cents", 100_000, "0.1"},
		{"mixed", 12_345_678, "12.345678"},
		{"inner zeros kept", 1_000_010, "1.00001"},
		{"max allowance", MaxAllowanceMicroUSD, "4503599627.370495"},
		{"max int64", math.MaxInt64, "9223372036854.775807"},
		{"negative", -1_500_000, "-1.5"},
		{"negative micro", -5, "-0.000005"},
		{"min int64", math.MinInt64, "-9223372036854.775808"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := FormatUSD(tc.in); got != tc.want {
				t.Fatalf("FormatUSD(%d) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// Property: every non-negative int64 formats to a string that matches the
// contract and parses back to itself.
func TestFormatParseRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	values := []int64{0, 1, 9, 10, 999_999, 1_000_000, 1_000_001, MaxAllowanceMicroUSD, math.MaxInt64, math.MaxInt64 - 1}
	for p := int64(1); p > 0 && p <= math.MaxInt64/10; p *= 10 {
		values = append(values, p, p-1, p+1)
	}
	for i := 0; i < 100_000; i++ {
		// Mix magnitudes so short and long values are both exercised.
		values = append(values, r.Int64N(math.MaxInt64)>>r.UintN(63))
	}
	for _, v := range values {
		s := FormatUSD(v)
		if !usdPattern.MatchString(s) || len(s) > MaxUSDLen {
			t.Fatalf("FormatUSD(%d) = %q does not match the contract", v, s)
		}
		back, err := ParseUSD(s)
		if err != nil || back != v {
			t.Fatalf("ParseUSD(FormatUSD(%d)) = %d, %v", v, back, err)
		}
	}
}

func TestExtensionFor(t *testing.T) {
	tests := []struct {
		name string
		base int64
		want int64
	}{
		{"zero base", 0, 0},
		{"negative base", -10, 0},
		{"one", 1, 1},
		{"four", 4, 1},
		{"five (ACCOUNTING example)", 5, 2},
		{"eight", 8, 2},
		{"hundred (ACCOUNTING example)", 100, 25},
		{"max allowance", MaxAllowanceMicroUSD, 1 << 50},
		{"max int64 does not overflow", math.MaxInt64, math.MaxInt64/4 + 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ExtensionFor(tc.base); got != tc.want {
				t.Fatalf("ExtensionFor(%d) = %d, want %d", tc.base, got, tc.want)
			}
		})
	}
}

// The reason for MaxAllowanceMicroUSD: base + extension must stay a safe
// JSON integer (at most 2^53-1).
func TestMaxAllowanceIsJSONSafe(t *testing.T) {
	const maxSafe = 1<<53 - 1
	total, err := AddChecked(MaxAllowanceMicroUSD, ExtensionFor(MaxAllowanceMicroUSD))
	if err != nil || total > maxSafe {
		t.Fatalf("max allowance + extension = %d, %v; want <= %d", total, err, int64(maxSafe))
	}
}

func TestAddChecked(t *testing.T) {
	tests := []struct {
		name    string
		a, b    int64
		want    int64
		wantErr bool
	}{
		{"small", 2, 3, 5, false},
		{"mixed signs", -7, 3, -4, false},
		{"to max", math.MaxInt64 - 1, 1, math.MaxInt64, false},
		{"to min", math.MinInt64 + 1, -1, math.MinInt64, false},
		{"max plus min", math.MaxInt64, math.MinInt64, -1, false},
		{"positive overflow", math.MaxInt64, 1, 0, true},
		{"large positive overflow", math.MaxInt64, math.MaxInt64, 0, true},
		{"negative overflow", math.MinInt64, -1, 0, true},
		{"min plus min", math.MinInt64, math.MinInt64, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := AddChecked(tc.a, tc.b)
			if tc.wantErr {
				if !errors.Is(err, ErrOverflow) {
					t.Fatalf("AddChecked(%d, %d) = %d, %v; want ErrOverflow", tc.a, tc.b, got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("AddChecked(%d, %d) = %d, %v; want %d", tc.a, tc.b, got, err, tc.want)
			}
		})
	}
}

func TestSubChecked(t *testing.T) {
	tests := []struct {
		name    string
		a, b    int64
		want    int64
		wantErr bool
	}{
		{"small", 5, 3, 2, false},
		{"negative remaining", 100, 130, -30, false},
		{"to min", math.MinInt64 + 1, 1, math.MinInt64, false},
		{"minus min", -1, math.MinInt64, math.MaxInt64, false},
		{"zero minus min", 0, math.MinInt64, 0, true},
		{"negative overflow", math.MinInt64, 1, 0, true},
		{"positive overflow", math.MaxInt64, -1, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := SubChecked(tc.a, tc.b)
			if tc.wantErr {
				if !errors.Is(err, ErrOverflow) {
					t.Fatalf("SubChecked(%d, %d) = %d, %v; want ErrOverflow", tc.a, tc.b, got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("SubChecked(%d, %d) = %d, %v; want %d", tc.a, tc.b, got, err, tc.want)
			}
		})
	}
}

// Cross-check the checked arithmetic against math/big on random operands,
// concentrated near the int64 limits where overflow happens.
func TestCheckedArithmeticAgainstBig(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	maxI, minI := big.NewInt(math.MaxInt64), big.NewInt(math.MinInt64)
	fits := func(x *big.Int) bool { return x.Cmp(minI) >= 0 && x.Cmp(maxI) <= 0 }
	operand := func() int64 {
		switch r.IntN(3) {
		case 0:
			return math.MaxInt64 - r.Int64N(1000)
		case 1:
			return math.MinInt64 + r.Int64N(1000)
		default:
			return int64(r.Uint64())
		}
	}
	for i := 0; i < 100_000; i++ {
		a, b := operand(), operand()
		sum := new(big.Int).Add(big.NewInt(a), big.NewInt(b))
		if got, err := AddChecked(a, b); fits(sum) != (err == nil) || (err == nil && got != sum.Int64()) {
			t.Fatalf("AddChecked(%d, %d) = %d, %v; exact %s", a, b, got, err, sum)
		}
		diff := new(big.Int).Sub(big.NewInt(a), big.NewInt(b))
		if got, err := SubChecked(a, b); fits(diff) != (err == nil) || (err == nil && got != diff.Int64()) {
			t.Fatalf("SubChecked(%d, %d) = %d, %v; exact %s", a, b, got, err, diff)
		}
	}
}

func FuzzParseUSD(f *testing.F) {
	for _, s := range []string{
		"0", "0.000005", "1.5", "1.500000", "01", "-1", "1e6", "0.0000001", "",
		"9223372036854.775807", "9223372036854.775808", strings.Repeat("9", 32), "1.", ".5",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseUSD(s)
		contract := usdPattern.MatchString(s) && len(s) <= MaxUSDLen
		if err != nil {
			switch {
			case !errors.Is(err, ErrInvalidAmount) && !errors.Is(err, ErrOverflow):
				t.Fatalf("ParseUSD(%q): unexpected error %v", s, err)
			case contract && !errors.Is(err, ErrOverflow):
				t.Fatalf("ParseUSD(%q) rejected a contract-conforming string: %v", s, err)
			case !contract && errors.Is(err, ErrOverflow):
				t.Fatalf("ParseUSD(%q) reported overflow for a malformed string", s)
			case contract:
				// An overflow must be real: the exact value exceeds int64.
				exact, _ := new(big.Rat).SetString(s)
				exact.Mul(exact, big.NewRat(MicroPerUSD, 1))
				if exact.Num().IsInt64() {
					t.Fatalf("ParseUSD(%q) reported overflow for %s", s, exact.RatString())
				}
			}
			return
		}
		if !contract {
			t.Fatalf("ParseUSD(%q) = %d accepted a string outside the contract", s, v)
		}
		// Exactness: compare with an arbitrary-precision reading of s.
		want, ok := new(big.Rat).SetString(s)
		if !ok {
			t.Fatalf("big.Rat cannot read %q", s)
		}
		want.Mul(want, big.NewRat(MicroPerUSD, 1))
		if !want.IsInt() || want.Num().Int64() != v || !want.Num().IsInt64() {
			t.Fatalf("ParseUSD(%q) = %d, exact value %s", s, v, want.RatString())
		}
		back, err := ParseUSD(FormatUSD(v))
		if err != nil || back != v {
			t.Fatalf("ParseUSD(FormatUSD(%d)) = %d, %v", v, back, err)
		}
	})
}
