package settleq

// Signalled is how often the workers were woken by a signal.
func (q *Queue) Signalled() int64 { return q.signalled.Load() }
