package responseusage

import (
	"math"
	"strings"
)

// costFromHeaders reads the upstream-reported cost (see the package doc).
func costFromHeaders(h map[string]string) (int64, bool) {
	if v, ok := parseMicroUSD(h[HeaderCostMicroUSD]); ok {
		return v, true
	}
	if v, ok := parseUSDCeil(h[HeaderCostUSD]); ok {
		return v, true
	}
	return parseUSDCeil(h[HeaderLiteLLMCost])
}

// parseMicroUSD reads a non-negative integer of micro-USD.
func parseMicroUSD(s string) (int64, bool) {
	s = strings.Trim(s, " \t")
	if s == "" {
		return 0, false
	}
	return digitsValue(s)
}

// digitsValue is the value of a string of decimal digits, if it fits.
func digitsValue(s string) (int64, bool) {
	var v int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		d := int64(c - '0')
		if v > (math.MaxInt64-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}

// ticksPerMicroUSD: xAI's cost_in_usd_ticks counts ticks of 1e-10 USD.
const ticksPerMicroUSD = 10_000

// ticksOf is the micro-USD of xAI's usage.cost_in_usd_ticks, a JSON integer of ticks
// whose text c holds, rounded up; false when it is none (negative, fractional, an
// exponent, or beyond int64).
func ticksOf(c *capture) (int64, bool) {
	if c.over {
		return 0, false
	}
	n, ok := digitsValue(string(c.b))
	if !ok || len(c.b) == 0 {
		return 0, false
	}
	return n/ticksPerMicroUSD + min(n%ticksPerMicroUSD, 1), true
}

// costOf is the micro-USD of a usage's cost, a JSON number of USD whose text c holds
// (rounded up, as parseUSDCeil reads it); false when it is none (negative, or longer
// than c keeps).
func costOf(c *capture) (int64, bool) {
	if c.over || len(c.b) == 0 || c.b[0] == '-' {
		return 0, false
	}
	return parseUSDCeil(string(c.b))
}

// maxUSDLen is the longest USD value read; exponents have at most two
// digits.
const maxUSDLen = 64

// parseUSDCeil converts a non-negative decimal USD amount, digits with an
// optional fraction and an optional exponent ("0.0042", "12", "4.2e-3"), to
// micro-USD exactly, rounding any remainder below one micro-USD up.
func parseUSDCeil(s string) (int64, bool) {
	s = strings.Trim(s, " \t")
	if s == "" || len(s) > maxUSDLen {
		return 0, false
	}
	mant, expPart, hasExp := strings.Cut(strings.ToLower(s), "e")
	whole, frac, hasDot := strings.Cut(mant, ".")
	if whole == "" || !allDigits(whole) || (hasDot && (frac == "" || !allDigits(frac))) {
		return 0, false
	}
	exp := 0
	if hasExp {
		neg := false
		switch {
		case strings.HasPrefix(expPart, "-"):
			neg, expPart = true, expPart[1:]
		case strings.HasPrefix(expPart, "+"):
			expPart = expPart[1:]
		}
		if expPart == "" || len(expPart) > 2 || !allDigits(expPart) {
			return 0, false
		}
		e, _ := digitsValue(expPart)
		exp = int(e)
		if neg {
			exp = -exp
		}
	}
	// The amount is digits * 10^shift micro-USD.
	digits := strings.TrimLeft(whole+frac, "0")
	shift := exp - len(frac) + 6
	if digits == "" {
		return 0, true
	}
	if shift >= 0 {
		if len(digits)+shift > 19 {
			return 0, false // at least 10^19 micro-USD: beyond int64
		}
		return digitsValue(digits + strings.Repeat("0", shift))
	}
	cut := len(digits) + shift // digits before the micro-USD point
	var v int64
	if cut > 0 {
		var ok bool
		if v, ok = digitsValue(digits[:cut]); !ok {
			return 0, false
		}
		digits = digits[cut:]
	}
	if strings.Trim(digits, "0") != "" {
		if v == math.MaxInt64 {
			return 0, false
		}
		v++
	}
	return v, true
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
