// Package record owns reading a member's accounting record: one Redis round trip on
// the hot path (the mirror record of pkg/mirror), the mirror's generation watched in
// the background (never read per check), and read-through Resolve on the control plane
// when the mirror does not know the member, or does not know a current window, or has
// lost its data (no generation). Concurrent resolves of one member share one call.
//
// It never turns "unknown" into zero: a missing record, a record of another generation
// and a flushed Redis all go to the control plane, and if that fails the caller gets an
// error, not a record. It keeps the last record it read per member (bounded) so that in
// open failure mode the caller can admit on the best-known state.
//
// It does not decide; it says where a record came from (Authoritative: straight from
// the control plane) so the decision can treat unlisted windows correctly.
package record
