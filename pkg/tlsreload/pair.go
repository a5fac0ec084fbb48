package tlsreload

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Pair is a certificate and its key, read from two PEM files. Its GetCertificate is a
// tls.Config's.
type Pair struct{ src source[*tls.Certificate] }

// Load reads the pair from certFile and keyFile. The error names the files and the
// cause: a file that cannot be read, no certificate, a key that does not match. A key
// file that cannot be read is not named (redact.FileError): the name may be the key.
func Load(certFile, keyFile string) (*Pair, error) {
	p := &Pair{}
	p.src.key = 2 // keyFile
	parse := func(c [][]byte) (*tls.Certificate, error) {
		cert, err := tls.X509KeyPair(c[0], c[1])
		if err != nil {
			return nil, fmt.Errorf("%s and %s: %w", certFile, keyFile, err)
		}
		if cert.Leaf == nil {
			return nil, errors.New(certFile + ": no certificate")
		}
		return &cert, nil
	}
	if err := p.src.init(parse, certFile, keyFile); err != nil {
		return nil, err
	}
	return p, nil
}

// GetCertificate returns the pair loaded last; it never fails.
func (p *Pair) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return p.src.current(), nil
}

// Leaf is the certificate served now (the chain's first), for its expiry and names.
func (p *Pair) Leaf() *x509.Certificate { return p.src.current().Leaf }

// Reload reads both files again and serves what they hold from the next handshake on.
// It reports whether the pair changed. When the files do not load, it returns the error
// and keeps the pair loaded before.
func (p *Pair) Reload() (changed bool, err error) {
	changed, _, err = p.src.reload()
	return changed, err
}

// Watch calls Reload every interval until ctx ends. It logs the certificate served at
// its start and each renewal it loads (subject, serial, expiry) at info, a certificate
// not valid now (expired, or not yet valid) at warn, and a renewal that does not load
// at warn, once for each content of the files that fails; onLoad, when not nil, is
// called with each leaf served, the first one included. what names the listener in the
// log lines.
func (p *Pair) Watch(ctx context.Context, every time.Duration, log *slog.Logger, what string, onLoad func(*x509.Certificate)) {
	p.src.watch(ctx, every, log, what+": the renewed certificate does not load; the one before is still served", func(first bool) {
		msg := "renewed certificate loaded"
		if first {
			msg = "serving certificate"
		}
		leaf := p.Leaf()
		log.Info(what+": "+msg, "subject", leaf.Subject.String(), "serial", leaf.SerialNumber.String(),
			"not_after", leaf.NotAfter.UTC().Format(time.RFC3339))
		if !validNow(leaf) {
			log.Warn(what+": the certificate served is not valid now: clients will refuse it",
				"not_before", leaf.NotBefore.UTC().Format(time.RFC3339), "not_after", leaf.NotAfter.UTC().Format(time.RFC3339))
		}
		if onLoad != nil {
			onLoad(leaf)
		}
	})
}

func validNow(c *x509.Certificate) bool {
	now := time.Now()
	return !now.After(c.NotAfter) && !now.Before(c.NotBefore)
}
