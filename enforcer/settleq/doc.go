// Package settleq owns the delivery of settlements to the control plane: a bounded
// in-memory queue, batched into Settle calls, retried with exponential backoff, and
// never silently dropped. With a spool (UseSpool, package spool) every settlement is
// written to disk before it is queued and acknowledged there once answered; what a
// stopping process could not send stays there for the next start, which sends it
// first. A settlement that finally cannot be delivered (too old, or, without a spool,
// the process is stopping and the drain deadline passed) is logged at error level with
// its request id and counted, so an operator can reconcile it (the control plane's
// abandonment recovery closes its start).
//
// Capacity is shared between queued settlements and reservations. Every admitted
// request reserves its slot at start (Reserve), so start overload can fill the start
// queue, never this one: a reserved settlement is always accepted. Only settlements
// without a reservation (rare: fail-open admissions when even the reservation failed,
// gateways reporting requests this process did not admit) can overflow.
//
// It also states what a settlement of its capacity costs in memory and in the spool
// (sizing.go), for the Helm chart's checks and the enforcer's warnings at start.
//
// It does not build settlements (see package inflight) and does not price anything.
package settleq
