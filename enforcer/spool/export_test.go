package spool

import "time"

// ReopenNow lets the next Append try to begin a segment at once after a failed rotation
// (reopen), without waiting out reopenEvery.
func (s *Spool) ReopenNow() {
	s.mu.Lock()
	s.reopenAt = time.Time{}
	s.mu.Unlock()
}
