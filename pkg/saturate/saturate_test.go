package saturate

import (
	"math"
	"testing"
)

func TestAddAndMul(t *testing.T) {
	for _, tc := range []struct{ a, b, sum, product int64 }{
		{0, 0, 0, 0},
		{2, 3, 5, 6},
		{math.MaxInt64, 0, math.MaxInt64, 0},
		{math.MaxInt64, 1, math.MaxInt64, math.MaxInt64},
		{math.MaxInt64 - 1, 2, math.MaxInt64, math.MaxInt64},
		{math.MaxInt64/2 + 1, 2, math.MaxInt64/2 + 3, math.MaxInt64},
		{1 << 32, 1 << 31, 1<<32 + 1<<31, 1<<63 - 1},
		{1 << 31, 1 << 31, 1 << 32, 1 << 62},
	} {
		if got := Add(tc.a, tc.b); got != tc.sum {
			t.Errorf("Add(%d, %d) = %d, want %d", tc.a, tc.b, got, tc.sum)
		}
		if got := Add(tc.b, tc.a); got != tc.sum {
			t.Errorf("Add(%d, %d) = %d, want %d", tc.b, tc.a, got, tc.sum)
		}
		if got := Mul(tc.a, tc.b); got != tc.product {
			t.Errorf("Mul(%d, %d) = %d, want %d", tc.a, tc.b, got, tc.product)
		}
	}
}
