// Package decision owns the admission rule: given a member's mirrored record and the
// current instant, admit (within_limit, over_limit or unlimited), block (429, with the
// exhausted buckets and when to retry), refuse as unavailable (capture suspended), or
// say that the record is not good enough to decide on (it does not know a current
// window, so the caller must resolve through the control plane).
//
// It is pure: no clock, no I/O, no logging, no metrics, and it does not allocate on the
// deciding path, because it runs on every check. Rendering a decision into HTTP or
// Envoy answers belongs to the callers; building the version-2 admission snapshot of an
// admitted decision is here, because it must agree with what was decided.
package decision
