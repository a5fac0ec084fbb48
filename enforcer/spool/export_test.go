package spool

import (
	"os"
	"time"
)

// ReopenNow lets the next Append try to begin a segment at once after a failed rotation
// (reopen), without waiting out reopenEvery.
func (s *Spool) ReopenNow() {
	s.mu.Lock()
	s.reopenAt = time.Time{}
	s.mu.Unlock()
}

// SetFsync replaces how Sync fsyncs the current segment, for the test's lifetime.
func SetFsync(f func(*os.File) error) (restore func()) {
	old := fsync
	fsync = f
	return func() { fsync = old }
}

// Free tells whether nothing holds the spool's lock at this moment (an Append or Ack
// would not wait).
func (s *Spool) Free() bool {
	if !s.mu.TryLock() {
		return false
	}
	s.mu.Unlock()
	return true
}

// SetCompactionWrite replaces how Open's compaction writes its temporary file, for the
// test's lifetime.
func SetCompactionWrite(f func(*os.File, []byte) (int, error)) (restore func()) {
	old := compactionWrite
	compactionWrite = f
	return func() { compactionWrite = old }
}

// SetDirSync replaces how Sync and Close fsync the spool's directory, for the test's
// lifetime.
func SetDirSync(f func(string) error) (restore func()) {
	old := dirSync
	dirSync = f
	return func() { dirSync = old }
}
