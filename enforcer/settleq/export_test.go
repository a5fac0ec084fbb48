package settleq

import (
	"time"

	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
)

// Signalled is how often the workers were woken by a signal.
func (q *Queue) Signalled() int64 { return q.signalled.Load() }

// KeepAnswered keeps item as if the control plane had just answered it.
func (q *Queue) KeepAnswered(item *internalv1.SettleItem) {
	now := time.Now()
	kept := q.answeredFor(&entry{item: item}, Result{}, now)
	q.mu.Lock()
	q.keepLocked(kept, now)
	q.mu.Unlock()
}

// ShareKeptStart tells whether a and b keep the same interned snapshot (KeepStart).
func ShareKeptStart(a, b *Reservation) bool {
	return a.start.kept() && a.start.shared == b.start.shared
}
