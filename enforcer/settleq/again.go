package settleq

import (
	"time"

	"google.golang.org/protobuf/proto"

	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// A settlement the control plane answered is final for this queue, but not always for
// Postgres: a replica promoted after its primary crashed lacks the last commits the
// primary acknowledged (asynchronous replication's lost tail), and a restore lacks what
// came after its copy. The control plane notices such a replacement (a new timeline or
// system identifier) and rebuilds the mirror under a new generation, which every
// enforcer sees within a generation poll. So the queue keeps what it had answered in
// the last ResendWindow and, told of a rebuild, sends it all again. Settlements are
// idempotent by request id: one the database still has is answered duplicate and
// charged nothing twice; one it lost is charged now, and one whose durable start was
// lost too is charged from its start's snapshot, which the queue keeps with it
// (startsnap.go), or else quarantined for review (no_snapshot) instead of vanishing
// without a word. Before 2026-12-04 a lost tail's settlements were simply gone, as a
// restore's are.

// answeredFor is e, just answered r, as kept for SendAnsweredAgain (marshaled here,
// outside the queue's lock; leave keeps it), or none (nil item): no window, or an answer that a
// second sending could not change (invalid). It counts from when e was first answered,
// so that rebuilds in a row do not keep it past the window.
func (q *Queue) answeredFor(e *entry, r Result, now time.Time) answeredItem {
	if q.cfg.ResendWindow <= 0 || r.Outcome == internalv1.SettleOutcome_SETTLE_OUTCOME_INVALID {
		return answeredItem{}
	}
	at := now
	if e.again {
		at = e.answered
	}
	b, err := proto.Marshal(e.item)
	if err != nil {
		return answeredItem{} // not a settlement that could have been sent
	}
	kept := answeredItem{at: at, item: b}
	if attachable(e.start, e.item) {
		kept.start = e.start
	}
	return kept
}

// keepLocked keeps a, then forgets what the window and the capacity no longer hold.
func (q *Queue) keepLocked(a answeredItem, now time.Time) {
	q.answered = append(q.answered, a)
	q.forgetAnsweredLocked(now)
}

// forgetAnsweredLocked drops the kept settlements older than the window, and the
// oldest ones past Capacity.
func (q *Queue) forgetAnsweredLocked(now time.Time) {
	n := max(len(q.answered)-q.cfg.Capacity, 0)
	for n < len(q.answered) && now.Sub(q.answered[n].at) > q.cfg.ResendWindow {
		n++
	}
	if n > 0 {
		clear(q.answered[:n])
		q.answered = q.answered[n:]
	}
	q.m.SettleAnsweredKept.Set(float64(len(q.answered)))
}

// MirrorRebuilt is told of each rebuild of the mirror under a new generation
// (record.Reader.OnRebuild). Unless the control plane noted that the rebuild was for
// Redis alone and found Postgres as it was (postgresKept), the settlements answered in
// the window are sent again (SendAnsweredAgain): the database may have lost them. When
// it did find it so, every answered settlement is still there, and sending them again
// would only cost the control plane a duplicate's work for each, from every enforcer at
// once, while it rebuilds the mirror and resolves the checks Redis cannot answer.
func (q *Queue) MirrorRebuilt(postgresKept bool) {
	if !postgresKept {
		q.m.MirrorRebuilds.WithLabelValues("sent_again").Inc()
		q.SendAnsweredAgain()
		return
	}
	q.m.MirrorRebuilds.WithLabelValues("not_needed").Inc()
	q.mu.Lock()
	n := len(q.answered)
	q.mu.Unlock()
	q.log.Info("the mirror was rebuilt for Redis alone, and the control plane found Postgres as it was: no settlement is sent again",
		"answered_in_window", n)
}

// SendAnsweredAgain queues again every settlement answered in the last ResendWindow
// (the package's comment above answeredFor says why), and returns how many. Call it
// when the mirror was rebuilt under a new generation. They are sent when no other
// settlement is due (a window of them must not delay the live ones), outside the
// queue's capacity (the window's bound is theirs), and spooled again with their start's
// snapshot until answered: each was acknowledged in the spool when first answered, and
// a process that stops or dies before the second answer leaves them to the next start
// (until 2026-12-07 they were never spooled, and such a restart lost what the replaced
// database had lost). Unspooled (no spool, or one full or failing), they are dropped
// quietly when the process stops first: each was answered once. Their answers are counted by
// tollgate_enforcer_settle_sent_again_total, not with the first ones. From now, the
// settlement of every request admitted before now carries its start's snapshot
// (attachStarts).
func (q *Queue) SendAnsweredAgain() int {
	now := time.Now()
	q.mu.Lock()
	if q.stopping || q.drained {
		q.mu.Unlock()
		return 0
	}
	// The starts admitted before now may have been lost with the rest.
	q.rebuiltAt.Store(now.UnixMilli())
	q.forgetAnsweredLocked(now)
	kept := q.answered
	q.answered = nil
	q.m.SettleAnsweredKept.Set(0)
	q.mu.Unlock()
	if len(kept) == 0 {
		return 0
	}
	entries := make([]*entry, 0, len(kept))
	for _, a := range kept {
		item := new(internalv1.SettleItem)
		if proto.Unmarshal(a.item, item) != nil {
			continue // cannot happen: answeredFor marshaled it
		}
		e := &entry{item: item, queued: now, next: now, again: true, replayed: true, answered: a.at, start: a.start}
		if q.spool != nil {
			// Outside the queue's lock: a write is a system call. finish acknowledges it.
			e.ref = q.spoolWithStart(item, a.start)
		}
		entries = append(entries, e)
	}
	q.mu.Lock()
	if q.stopping || q.drained {
		// Stopped meanwhile: those spooled stay there for the next start to send.
		q.mu.Unlock()
		return 0
	}
	for _, e := range entries {
		q.again = append(q.again, e)
		q.linkLocked(e)
		q.replayed++
	}
	q.m.SettleQueueDepth.Set(float64(q.lenLocked()))
	q.m.SettleOutsideCapacity.Set(float64(q.replayed))
	q.mu.Unlock()
	q.log.Info("the mirror was rebuilt: settlements answered in the last window are sent again, in case Postgres lost them (a failover's lost tail, a restore)",
		"count", len(entries), "window", q.cfg.ResendWindow.String())
	q.wake()
	return len(entries)
}

// finishAgain counts and logs the answer to a settlement sent again, then takes it out
// (keeping it again, as kept).
func (q *Queue) finishAgain(e *entry, outcome string, r Result, kept answeredItem) {
	q.m.SettleSentAgain.WithLabelValues(outcome).Inc()
	switch r.Outcome {
	case internalv1.SettleOutcome_SETTLE_OUTCOME_DUPLICATE, internalv1.SettleOutcome_SETTLE_OUTCOME_VOIDED:
		// The database still had it: the usual answer.
	case internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED, internalv1.SettleOutcome_SETTLE_OUTCOME_PROMOTED:
		q.log.Warn("a settlement the replaced database had lost is charged again", "request_id", e.item.GetRequestId(),
			"outcome", outcome, "cost_micro_usd", r.CostMicroUSD, "first_answered", e.answered)
	default:
		q.log.Warn("a settlement sent again after the mirror's rebuild was refused", "request_id", e.item.GetRequestId(),
			"outcome", outcome, "message", r.Message, "first_answered", e.answered)
	}
	q.leave(e, kept)
}

// dropAgain takes out a settlement sent again, not spooled, that was not answered (it
// was retried for the maximum age; the drain drops those left at shutdown the same way):
// it was answered once, so it is counted, not logged as lost. A spooled one is never
// given up (retry), and stays in the spool at shutdown (Drain).
func (q *Queue) dropAgain(e *entry) {
	q.m.SettleSentAgain.WithLabelValues("unanswered").Inc()
	q.leave(e, answeredItem{})
}
