package cpclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/tollgate-dev/tollgate/pkg/tlsreload"
)

// TLSFiles name the PEM files that secure the connection to the control plane's
// internal API (TOLLGATE_CONTROLPLANE_TLS_CA, _CERT, _KEY) and the name its certificate
// must carry (TOLLGATE_CONTROLPLANE_TLS_SERVER_NAME).
type TLSFiles struct {
	// CA is a bundle of the certificates that may sign the control plane's; empty
	// trusts the system's roots.
	CA string
	// Cert and Key are this enforcer's client certificate and key, for a control plane
	// that requires mTLS (TOLLGATE_GRPC_CLIENT_CA); both or neither.
	Cert, Key string
	// ServerName is checked against the control plane's certificate instead of the
	// host of TOLLGATE_CONTROLPLANE_ADDR (an address by IP, or a Service name the
	// certificate does not list).
	ServerName string
}

// Enabled reports whether any TLS setting is given: then the connection uses TLS.
func (f TLSFiles) Enabled() bool {
	return f.CA != "" || f.Cert != "" || f.Key != "" || f.ServerName != ""
}

// TLS is the loaded configuration of the connection to the control plane, for the gRPC
// credentials and the health probe alike. Its files are read again while the enforcer
// serves (Watch, every tlsreload.Interval): ClientCert, this enforcer's certificate for
// mTLS (nil without one), is presented at every handshake as last loaded, and CA, the
// bundle the control plane's certificate is verified against (nil: the system's roots),
// is used as last loaded by every new connection. A renewed Secret, or a change of CA,
// then reaches the next connection without a restart.
type TLS struct {
	ClientCert *tlsreload.Pair
	CA         *tlsreload.Pool
	base       *tls.Config // without RootCAs, which CA gives at each handshake
}

// Config is the connection's TLS configuration as now loaded: a new one at each call.
func (t *TLS) Config() *tls.Config {
	c := t.base.Clone()
	if t.CA != nil {
		c.RootCAs = t.CA.CertPool()
	}
	return c
}

// Credentials are the gRPC transport credentials of t; nil (plaintext) when t is nil.
// Each connection's handshake uses Config as it is then.
func (t *TLS) Credentials() credentials.TransportCredentials {
	if t == nil {
		return nil
	}
	return reloadingCredentials{t}
}

// Watch reads the client certificate and the CA bundle again every interval until ctx
// ends (tlsreload's Watch: each renewal or change logged, a broken one logged once and
// kept out); onCert is called with each client certificate loaded, onCA with the expiry
// of each CA bundle.
func (t *TLS) Watch(ctx context.Context, every time.Duration, log *slog.Logger, onCert func(*x509.Certificate), onCA func(time.Time)) {
	var wg sync.WaitGroup
	if t.ClientCert != nil {
		wg.Go(func() { t.ClientCert.Watch(ctx, every, log, "control plane TLS client certificate", onCert) })
	}
	if t.CA != nil {
		wg.Go(func() { t.CA.Watch(ctx, every, log, "control plane TLS CA", onCA) })
	}
	wg.Wait()
}

// reloadingCredentials are gRPC's own TLS credentials, made again from TLS.Config at
// each handshake: a tls.Config's RootCAs cannot change under a running client, and
// verifying by hand (InsecureSkipVerify and a VerifyConnection) would lose the check of
// an address by IP, which the SNI the callback sees leaves out. Handshakes are rare (an
// enforcer keeps its connection), so a copy each is nothing.
type reloadingCredentials struct{ t *TLS }

func (c reloadingCredentials) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return credentials.NewTLS(c.t.Config()).ClientHandshake(ctx, authority, raw)
}

func (c reloadingCredentials) ServerHandshake(net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("cpclient: the control plane's TLS credentials are a client's")
}

func (c reloadingCredentials) Info() credentials.ProtocolInfo {
	return credentials.NewTLS(c.t.Config()).Info()
}

func (c reloadingCredentials) Clone() credentials.TransportCredentials { return c }

// OverrideServerName is gRPC's deprecated way to set the name; TOLLGATE_CONTROLPLANE_TLS_SERVER_NAME
// (TLSFiles.ServerName) is this client's.
func (c reloadingCredentials) OverrideServerName(string) error {
	return errors.New("cpclient: the server name is TLSFiles.ServerName")
}

// Load reads the files and builds the connection's TLS, or says which setting is wrong.
// Nil without error when TLS is not configured (plaintext).
func (f TLSFiles) Load() (*TLS, error) {
	if !f.Enabled() {
		return nil, nil
	}
	t := &TLS{base: &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}}
	if f.CA != "" {
		pool, err := tlsreload.LoadPool(f.CA)
		if err != nil {
			return nil, fmt.Errorf("TOLLGATE_CONTROLPLANE_TLS_CA: %w", err)
		}
		t.CA = pool
	}
	if (f.Cert == "") != (f.Key == "") {
		return nil, errors.New("TOLLGATE_CONTROLPLANE_TLS_CERT and TOLLGATE_CONTROLPLANE_TLS_KEY: set both or neither")
	}
	if f.Cert != "" {
		pair, err := tlsreload.Load(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("TOLLGATE_CONTROLPLANE_TLS_CERT/KEY: %w", err)
		}
		t.ClientCert = pair
		t.base.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return pair.GetCertificate(nil) }
	}
	return t, nil
}
