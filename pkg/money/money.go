package money

import (
	"errors"
	"math"
	"strconv"
	"strings"
)

const (
	// MicroPerUSD is the number of micro-USD in one USD.
	MicroPerUSD int64 = 1_000_000

	// MaxAllowanceMicroUSD is the largest base allowance (the spec's bound
	// for costLimitMicroUsd, 2^52-1). With it, base + ExtensionFor(base)
	// stays below 2^53, so every allowance is a safe integer in JSON.
	MaxAllowanceMicroUSD int64 = 4503599627370495

	// MaxUSDLen is the longest costUsd string accepted.
	MaxUSDLen = 32

	// decimals is the number of fractional digits micro-USD can hold.
	decimals = 6
)

var (
	// ErrInvalidAmount: the string is not a plain non-negative decimal with
	// at most six decimals and at most 32 characters.
	ErrInvalidAmount = errors.New(`money: amount must be a plain decimal USD string such as "1.5" (no sign, no leading zeros, at most 6 decimals, at most 32 characters)`)

	// ErrOverflow: a result does not fit in an int64 of micro-USD.
	ErrOverflow = errors.New("money: amount overflows int64 micro-USD")
)

// ParseUSD converts a decimal USD string such as "1.5" or "0.000005" to
// micro-USD, exactly. No sign, exponent, leading zeros, surrounding space or
// more than six decimals are accepted, so each value has few spellings and a
// typo never turns into a different amount.
func ParseUSD(s string) (int64, error) {
	if len(s) == 0 || len(s) > MaxUSDLen {
		return 0, ErrInvalidAmount
	}
	whole, frac, hasDot := strings.Cut(s, ".")
	if len(whole) == 0 || !allDigits(whole) || (len(whole) > 1 && whole[0] == '0') {
		return 0, ErrInvalidAmount
	}
	if hasDot && (len(frac) == 0 || len(frac) > decimals || !allDigits(frac)) {
		return 0, ErrInvalidAmount
	}
	// Read the whole part, the fraction, and the fraction's missing zeros as
	// one decimal number of micro-USD, checking for overflow at every digit.
	var v int64
	push := func(d int64) bool {
		if v > (math.MaxInt64-d)/10 {
			return false
		}
		v = v*10 + d
		return true
	}
	for i := 0; i < len(whole); i++ {
		if !push(int64(whole[i] - '0')) {
			return 0, ErrOverflow
		}
	}
	for i := 0; i < decimals; i++ {
		var d int64
		if i < len(frac) {
			d = int64(frac[i] - '0')
		}
		if !push(d) {
			return 0, ErrOverflow
		}
	}
	return v, nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// FormatUSD renders micro-USD as the shortest exact decimal USD string:
// 1500000 -> "1.5", 5 -> "0.000005", 0 -> "0", -1500000 -> "-1.5". For
// non-negative values the result is accepted by ParseUSD and parses back to
// micro.
func FormatUSD(micro int64) string {
	neg := micro < 0
	// Work on the magnitude as uint64 so math.MinInt64 needs no special case.
	mag := uint64(micro)
	if neg {
		mag = -mag
	}
	whole := strconv.FormatUint(mag/uint64(MicroPerUSD), 10)
	frac := mag % uint64(MicroPerUSD)
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	b.WriteString(whole)
	if frac != 0 {
		f := strconv.FormatUint(frac, 10)
		b.WriteByte('.')
		b.WriteString(strings.Repeat("0", decimals-len(f)))
		b.WriteString(strings.TrimRight(f, "0"))
	}
	return b.String()
}

// ExtensionFor is the size of an approved extension for a base allowance:
// ceil(base/4) micro-USD, so even a tiny base gets a non-zero extension
// (base 5 -> 2, base 100 -> 25). A base <= 0 gets no extension: the rules
// only allow requests when base > 0, and a negative extension would shrink
// an allowance.
func ExtensionFor(base int64) int64 {
	if base <= 0 {
		return 0
	}
	// base/4 + 1 cannot overflow, unlike (base+3)/4.
	ext := base / 4
	if base%4 != 0 {
		ext++
	}
	return ext
}

// AddChecked returns a+b, or ErrOverflow if the sum does not fit in an int64.
func AddChecked(a, b int64) (int64, error) {
	s := a + b
	// Overflow happened iff both operands have the same sign and the sum's
	// sign differs from it.
	if (a >= 0) == (b >= 0) && (s >= 0) != (a >= 0) {
		return 0, ErrOverflow
	}
	return s, nil
}

// SubChecked returns a-b, or ErrOverflow if the difference does not fit in
// an int64. Remaining allowance (allowance - used) may be negative, so this is
// the subtraction to use for it.
func SubChecked(a, b int64) (int64, error) {
	d := a - b
	// Overflow happened iff the operands have different signs and the
	// result's sign differs from a's.
	if (a >= 0) != (b >= 0) && (d >= 0) != (a >= 0) {
		return 0, ErrOverflow
	}
	return d, nil
}
