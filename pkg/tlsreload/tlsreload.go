// Package tlsreload serves a TLS certificate from PEM files that are renewed in place: a
// Kubernetes Secret that cert-manager renews (the kubelet swaps the mounted files), or a
// certificate an ACME client rewrites. A Pair reads the two files at start and again at
// each Reload, so the next handshake presents the renewed certificate without a restart,
// and the connections already open keep theirs.
//
// A pair that does not load (a renewal half written, a key that does not match its
// certificate) is an error of that Reload, and the pair loaded before it stays served: a
// listener never loses a good certificate to a bad renewal. Reload compares the files'
// bytes rather than their modification times, since a Secret's swap can keep them.
//
// Why not a library: the standard library has no reloading certificate source, and the
// packages that have one either bring an ACME client (certmagic) or watch files with
// inotify (fsnotify), which misses the kubelet's symlink swap unless the directory is
// watched; reading two small files every few seconds is simpler and cannot miss one.
package tlsreload

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Interval is how often the programs Watch their certificate files: the kubelet brings
// a renewed Secret into a mounted directory within about a minute, so a renewal is
// served at most 10 seconds after it lands.
const Interval = 10 * time.Second

// Pair is a certificate and its key, read from two PEM files. Its GetCertificate is a
// tls.Config's.
type Pair struct {
	certFile, keyFile string

	cur atomic.Pointer[loaded]

	mu sync.Mutex // serializes Reload, and guards failed
	// failed is the error and the files' content of the last reload that failed, so
	// that Watch reports a broken renewal once, not at every interval while it stays
	// broken.
	failed []byte
}

// loaded is one loaded pair and the bytes it was loaded from.
type loaded struct {
	cert            *tls.Certificate
	certPEM, keyPEM []byte
}

// Load reads the pair from certFile and keyFile. The error names the files and the
// cause: a file that cannot be read, no certificate, a key that does not match.
func Load(certFile, keyFile string) (*Pair, error) {
	p := &Pair{certFile: certFile, keyFile: keyFile}
	certPEM, keyPEM, err := p.read()
	if err != nil {
		return nil, err
	}
	l, err := p.parse(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	p.cur.Store(l)
	return p, nil
}

// GetCertificate returns the pair loaded last; it never fails.
func (p *Pair) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return p.cur.Load().cert, nil
}

// Leaf is the certificate served now (the chain's first), for its expiry and names.
func (p *Pair) Leaf() *x509.Certificate { return p.cur.Load().cert.Leaf }

// Reload reads both files again and serves what they hold from the next handshake on.
// It reports whether the pair changed. When the files do not load, it returns the error
// and keeps the pair loaded before.
func (p *Pair) Reload() (changed bool, err error) {
	changed, _, err = p.reload()
	return changed, err
}

// reload is Reload; repeated is true when its error is the same content's (or the same
// read error) as the last failed reload's, which Watch has already reported.
func (p *Pair) reload() (changed, repeated bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	certPEM, keyPEM, err := p.read()
	if err == nil {
		cur := p.cur.Load()
		if bytes.Equal(certPEM, cur.certPEM) && bytes.Equal(keyPEM, cur.keyPEM) {
			p.failed = nil
			return false, false, nil
		}
		var l *loaded
		if l, err = p.parse(certPEM, keyPEM); err == nil {
			p.cur.Store(l)
			p.failed = nil
			return true, false, nil
		}
	}
	content := []byte(err.Error())
	content = append(append(append(content, 0), certPEM...), keyPEM...)
	repeated = bytes.Equal(content, p.failed)
	p.failed = content
	return false, repeated, err
}

// Watch calls Reload every interval until ctx ends. It logs the certificate served at
// its start and each renewal it loads (subject, serial, expiry) at info, a certificate
// not valid now (expired, or not yet valid) at warn, and a renewal that does not load
// at warn, once for each content of the files that fails; onLoad, when not nil, is
// called with each leaf served, the first one included. what names the listener in the
// log lines.
func (p *Pair) Watch(ctx context.Context, every time.Duration, log *slog.Logger, what string, onLoad func(*x509.Certificate)) {
	loadedNow := func(msg string) {
		leaf := p.Leaf()
		log.Info(what+": "+msg, "subject", leaf.Subject.String(), "serial", leaf.SerialNumber.String(),
			"not_after", leaf.NotAfter.UTC().Format(time.RFC3339))
		if now := time.Now(); now.After(leaf.NotAfter) || now.Before(leaf.NotBefore) {
			log.Warn(what+": the certificate served is not valid now: clients will refuse it",
				"not_before", leaf.NotBefore.UTC().Format(time.RFC3339), "not_after", leaf.NotAfter.UTC().Format(time.RFC3339))
		}
		if onLoad != nil {
			onLoad(leaf)
		}
	}
	loadedNow("serving certificate")
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		changed, repeated, err := p.reload()
		switch {
		case err != nil && !repeated:
			log.Warn(what+": the renewed certificate does not load; the one before is still served", "err", err)
		case changed:
			loadedNow("renewed certificate loaded")
		}
	}
}

func (p *Pair) read() (certPEM, keyPEM []byte, err error) {
	if certPEM, err = os.ReadFile(p.certFile); err != nil {
		return nil, nil, err
	}
	if keyPEM, err = os.ReadFile(p.keyFile); err != nil {
		return nil, nil, err
	}
	return certPEM, keyPEM, nil
}

func (p *Pair) parse(certPEM, keyPEM []byte) (*loaded, error) {
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s and %s: %w", p.certFile, p.keyFile, err)
	}
	if cert.Leaf == nil {
		return nil, errors.New(p.certFile + ": no certificate")
	}
	return &loaded{cert: &cert, certPEM: certPEM, keyPEM: keyPEM}, nil
}
