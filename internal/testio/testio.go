// Package testio holds the small I/O helpers several packages' tests share: a log
// destination a test may read while a program writes it, and a body cut into the
// arbitrary pieces a stream arrives in. Tests only; nothing in a program imports it.
package testio

import (
	"bytes"
	"sync"
)

// SyncBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Chunks cuts s into n pieces of about the same size, wherever they fall: a stream
// arrives in arbitrary pieces, not in events.
func Chunks(s string, n int) [][]byte {
	var out [][]byte
	step := (len(s) + n - 1) / n
	for i := 0; i < len(s); i += step {
		out = append(out, []byte(s[i:min(i+step, len(s))]))
	}
	return out
}
