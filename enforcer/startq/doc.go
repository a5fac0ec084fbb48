// Package startq owns the write-ahead start queue: admitted checks hand their start to
// it and wait until the control plane has made it durable (or refused it), while the
// queue batches many concurrent starts into one Start call.
//
// At most Workers Start calls are out at once. A start that finds nothing queued and a
// call free makes its call itself, in its caller's goroutine (no hand-off to a worker
// and back); the starts that arrive while calls are out wait in the queue, and a worker
// sends them together as soon as a call ends. A caller cannot leave its own call early:
// that call ends by the deadline, and its start is then handled as any start whose
// caller left while it was sent.
//
// The queue is bounded three ways (rule 16 of the specification): a global capacity, a
// per-member share (one member's burst cannot starve the others) and a deadline per
// start. A start whose caller goes away (Envoy cancelled the check, or the deadline
// passed) while it is still queued leaves before any work: it is never sent. Before a
// start is queued it reserves its settlement's slot in the settle queue, so that an
// admitted request can always be settled however overloaded starts are; the slot is
// given back when the start is not admitted.
//
// A start that was already sent when its caller left may still become durable. Nobody
// will forward that request, so the queue hands it to an orphan handler, which settles
// it as incomplete; otherwise it would stay pending until abandonment recovery. A
// withdrawable start (SubmitWithdrawable: a check's speculative start, package gate)
// leaves with its caller only while queued; once sent, its answer goes to its caller
// all the same, who voids what was recorded, and only the deadline makes it an orphan.
// A start never sent is never an orphan: one still queued when the queue stops is
// refused with ErrClosed, even to a caller leaving at that moment, and one whose
// caller's deadline has passed before its own call leaves unsent.
//
// It decides nothing about limits and renders no answers.
package startq
