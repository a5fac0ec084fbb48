// Package saturate adds and multiplies non-negative counts (tokens, bytes, units) without
// overflowing: a result past int64's range is math.MaxInt64, the dearest reading, never
// a wrapped negative one. The usage readers use it on counts a provider reported, which
// are bounded by nothing but their type.
package saturate

import "math"

// Add is a + b for non-negative a and b, at most math.MaxInt64.
func Add(a, b int64) int64 { return min(a, math.MaxInt64-b) + b }

// Mul is a * b for non-negative a and b, at most math.MaxInt64.
func Mul(a, b int64) int64 {
	if b != 0 && a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}
