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
