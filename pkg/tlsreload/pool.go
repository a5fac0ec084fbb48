package tlsreload

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// Pool is a bundle of CA certificates read from one PEM file: the roots a client
// verifies its server against, or the CAs a server accepts client certificates of. A
// change of CA is made in steps (the new CA added to the bundle, certificates issued by
// it, the old CA taken out), and each step is used from the next handshake.
type Pool struct{ src source[bundle] }

type bundle struct {
	pool  *x509.CertPool
	certs []*x509.Certificate
}

// LoadPool reads the bundle in file. The error names the file and the cause: a file that
// cannot be read, a certificate that does not parse, no certificate at all.
func LoadPool(file string) (*Pool, error) {
	p := &Pool{}
	if err := p.src.init(func(c [][]byte) (bundle, error) { return parseBundle(file, c[0]) }, file); err != nil {
		return nil, err
	}
	return p, nil
}

// parseBundle is x509.CertPool.AppendCertsFromPEM that fails on a certificate it cannot
// parse instead of leaving it out: a bundle silently short of the new CA would refuse the
// certificates it issued with no word of why.
func parseBundle(file string, pemBytes []byte) (bundle, error) {
	b := bundle{pool: x509.NewCertPool()}
	for rest := pemBytes; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return bundle{}, fmt.Errorf("%s: certificate %d: %w", file, len(b.certs)+1, err)
		}
		b.pool.AddCert(c)
		b.certs = append(b.certs, c)
	}
	if len(b.certs) == 0 {
		return bundle{}, fmt.Errorf("no PEM certificate in %s", file)
	}
	return b, nil
}

// CertPool is the bundle loaded last, for a tls.Config's RootCAs or ClientCAs.
func (p *Pool) CertPool() *x509.CertPool { return p.src.current().pool }

// Certificates are the bundle's certificates, in the file's order.
func (p *Pool) Certificates() []*x509.Certificate { return p.src.current().certs }

// Expiry is when the first of the bundle's certificates expires: past it, what that CA
// signed no longer verifies, so a change of CA must be over by then (the old CA taken
// out) or a renewed CA be in the bundle.
func (p *Pool) Expiry() time.Time {
	certs := p.Certificates()
	soonest := certs[0].NotAfter
	for _, c := range certs[1:] {
		if c.NotAfter.Before(soonest) {
			soonest = c.NotAfter
		}
	}
	return soonest
}

// Reload reads the file again and uses what it holds from the next handshake on. It
// reports whether the bundle changed. When the file does not load, it returns the error
// and keeps the bundle loaded before.
func (p *Pool) Reload() (changed bool, err error) {
	changed, _, err = p.src.reload()
	return changed, err
}

// Watch calls Reload every interval until ctx ends. It logs the bundle at its start and
// each change it loads (how many certificates, their subjects, the first expiry) at
// info, each certificate in it that is not valid now at warn, and a change that does not
// load at warn, once for each content of the file that fails; onLoad, when not nil, is
// called with the Expiry of each bundle used, the first one included. what names the
// bundle's use in the log lines.
func (p *Pool) Watch(ctx context.Context, every time.Duration, log *slog.Logger, what string, onLoad func(expiry time.Time)) {
	p.src.watch(ctx, every, log, what+": the changed CA bundle does not load; the one before is still used", func(first bool) {
		msg := "changed CA bundle loaded"
		if first {
			msg = "CA bundle loaded"
		}
		certs := p.Certificates()
		subjects := make([]string, len(certs))
		for i, c := range certs {
			subjects[i] = c.Subject.String()
		}
		log.Info(what+": "+msg, "certificates", len(certs), "subjects", strings.Join(subjects, "; "),
			"first_not_after", p.Expiry().UTC().Format(time.RFC3339))
		for _, c := range certs {
			if !validNow(c) {
				log.Warn(what+": a CA certificate in the bundle is not valid now: it verifies nothing", "subject", c.Subject.String(),
					"not_before", c.NotBefore.UTC().Format(time.RFC3339), "not_after", c.NotAfter.UTC().Format(time.RFC3339))
			}
		}
		if onLoad != nil {
			onLoad(p.Expiry())
		}
	})
}
