// Package heapsize measures the heap a structure holds, for the sizing budgets the
// enforcer's tests hold to measurements (enforcer/settleq, enforcer/record,
// enforcer/identity, enforcer/gate; docs/enforcer.md, "Memory").
package heapsize

import "runtime"

// Held is the heap that calls add(0) to add(n-1) hold once collected: the live heap
// after them less the live heap before. What add keeps must stay reachable until Held
// returns (the caller keeps its structure alive after the call).
func Held(n int, add func(i int)) int64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range n {
		add(i)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	return int64(after.HeapAlloc) - int64(before.HeapAlloc)
}

// TB is the part of testing.TB these helpers use (this package is imported by tests
// only, and does not import testing itself so that it stays out of the programs).
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Errorf(format string, args ...any)
	Logf(format string, args ...any)
}

// PerKept is the heap that add(0) to add(n-1) hold once collected, per entry the
// structure kept (kept, read after): a bounded structure may drop some, but fewer than
// nine tenths of n kept means the measurement is of something else, and fails.
func PerKept(tb TB, n int, add func(i int), kept func() int) float64 {
	tb.Helper()
	held := Held(n, add)
	k := kept()
	if k < n*9/10 {
		tb.Fatalf("%d kept of %d added", k, n)
	}
	return float64(held) / float64(k)
}

// WithinBudget measures at each of sizes (a Go map's cost an entry varies with how
// full its last growth left it) and fails where the measurement is over budget, or
// under floor (then the measurement itself is broken). what names the entry and
// budgetName the constant to raise.
func WithinBudget(tb TB, what, budgetName string, sizes []int, measure func(n int) float64, floor, budget int) {
	tb.Helper()
	for _, n := range sizes {
		per := measure(n)
		if per < float64(floor) {
			tb.Fatalf("%d entries: %.0f bytes a %s: the measurement is broken", n, per, what)
		}
		if per > float64(budget) {
			tb.Errorf("%d entries: %.0f bytes a %s, over %s %d: raise it", n, per, what, budgetName, budget)
		}
		tb.Logf("%d entries: %.0f bytes a %s, budgeted %d", n, per, what, budget)
	}
}
