package cpclient

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

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

// TLS is the loaded configuration of the connection to the control plane: Config for
// the gRPC credentials and the health probe alike, and ClientCert, this enforcer's
// certificate for mTLS (nil without one), which Config presents at every handshake and
// which the enforcer reads again every 10 seconds (ClientCert.Watch), so that a renewed
// Secret is presented from the next connection without a restart. The CA bundle is read
// once, at start: a new CA takes a restart.
type TLS struct {
	Config     *tls.Config
	ClientCert *tlsreload.Pair
}

// Credentials are the gRPC transport credentials of t; nil (plaintext) when t is nil.
func (t *TLS) Credentials() credentials.TransportCredentials {
	if t == nil {
		return nil
	}
	return credentials.NewTLS(t.Config)
}

// Load reads the files and builds the connection's TLS, or says which setting is wrong.
// Nil without error when TLS is not configured (plaintext).
func (f TLSFiles) Load() (*TLS, error) {
	if !f.Enabled() {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}
	if f.CA != "" {
		pem, err := os.ReadFile(f.CA)
		if err != nil {
			return nil, fmt.Errorf("TOLLGATE_CONTROLPLANE_TLS_CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("TOLLGATE_CONTROLPLANE_TLS_CA: no PEM certificate in %s", f.CA)
		}
		cfg.RootCAs = pool
	}
	if (f.Cert == "") != (f.Key == "") {
		return nil, errors.New("TOLLGATE_CONTROLPLANE_TLS_CERT and TOLLGATE_CONTROLPLANE_TLS_KEY: set both or neither")
	}
	t := &TLS{Config: cfg}
	if f.Cert != "" {
		pair, err := tlsreload.Load(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("TOLLGATE_CONTROLPLANE_TLS_CERT/KEY: %w", err)
		}
		t.ClientCert = pair
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return pair.GetCertificate(nil) }
	}
	return t, nil
}
