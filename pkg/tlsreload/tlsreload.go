// Package tlsreload serves TLS material from PEM files that are renewed in place: a
// Kubernetes Secret that cert-manager renews (the kubelet swaps the mounted files), or a
// certificate an ACME client rewrites. A Pair is a certificate and its key, a Pool a CA
// bundle; each reads its files at start and again at each Reload, so the next handshake
// presents the renewed certificate, or verifies against the changed bundle, without a
// restart. Connections already open keep what they were made with.
//
// Files that do not load (a renewal half written, a key that does not match its
// certificate, a bundle without a certificate) are an error of that Reload, and what was
// loaded before stays in use: a listener never loses a good certificate, nor a client its
// trust, to a bad renewal. Reload compares the files' bytes rather than their
// modification times, since a Secret's swap can keep them.
//
// Why not a library: the standard library has no reloading certificate source, and the
// packages that have one either bring an ACME client (certmagic) or watch files with
// inotify (fsnotify), which misses the kubelet's symlink swap unless the directory is
// watched; reading a few small files every few seconds is simpler and cannot miss one.
package tlsreload

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/pkg/redact"
)

// Interval is how often the programs Watch their certificate files: the kubelet brings
// a renewed Secret into a mounted directory within about a minute, so a renewal is
// served at most 10 seconds after it lands.
const Interval = 10 * time.Second

// source is what Pair and Pool share: files read again at each reload and compared by
// their bytes, and the value parsed from them, kept until a change that parses.
type source[T any] struct {
	files []string
	// key is the index in files of a private key's, plus one (0: none). Its name is
	// left out of a read's error: a key setting is at times given the PEM key itself.
	key   int
	parse func(contents [][]byte) (T, error)

	cur atomic.Pointer[version[T]]

	mu sync.Mutex // serializes reload, and guards failed
	// failed is the error and the files' content of the last reload that failed, so
	// that watch reports a broken renewal once, not at every interval while it stays
	// broken.
	failed []byte
}

// version is one parsed value and the bytes it was parsed from.
type version[T any] struct {
	value    T
	contents [][]byte
}

// init reads and parses the files for the first time.
func (s *source[T]) init(parse func([][]byte) (T, error), files ...string) error {
	s.files, s.parse = files, parse
	contents, err := s.read()
	if err != nil {
		return err
	}
	v, err := parse(contents)
	if err != nil {
		return err
	}
	s.cur.Store(&version[T]{value: v, contents: contents})
	return nil
}

func (s *source[T]) current() T { return s.cur.Load().value }

// reload reads the files again and keeps what they hold when it changed and parses.
// repeated is true when its error is the same content's (or the same read error) as the
// last failed reload's, which watch has already reported.
func (s *source[T]) reload() (changed, repeated bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	contents, err := s.read()
	if err == nil {
		if same(contents, s.cur.Load().contents) {
			s.failed = nil
			return false, false, nil
		}
		var v T
		if v, err = s.parse(contents); err == nil {
			s.cur.Store(&version[T]{value: v, contents: contents})
			s.failed = nil
			return true, false, nil
		}
	}
	content := append([]byte(err.Error()), 0)
	for _, c := range contents {
		content = append(content, c...)
	}
	repeated = bytes.Equal(content, s.failed)
	s.failed = content
	return false, repeated, err
}

// watch calls reload every interval until ctx ends: announce(true) at its start,
// announce(false) after each change loaded, and broken (a warning) once for each content
// of the files that fails.
func (s *source[T]) watch(ctx context.Context, every time.Duration, log *slog.Logger, broken string, announce func(first bool)) {
	announce(true)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		changed, repeated, err := s.reload()
		switch {
		case err != nil && !repeated:
			log.Warn(broken, "err", err)
		case changed:
			announce(false)
		}
	}
}

func (s *source[T]) read() ([][]byte, error) {
	contents := make([][]byte, len(s.files))
	for i, f := range s.files {
		b, err := os.ReadFile(f)
		if err != nil {
			if i+1 == s.key {
				return nil, redact.FileError("the key file", err)
			}
			return nil, err
		}
		contents[i] = b
	}
	return contents, nil
}

func same(a, b [][]byte) bool {
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return len(a) == len(b)
}
