package cpclient

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"google.golang.org/grpc/credentials"
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

// Credentials reads the files and builds the transport credentials, or says which
// setting is wrong. Nil without error when TLS is not configured (plaintext).
//
// Files are read once, at start: a rotated certificate takes effect on restart (the
// chart's Secret mounts change, the rollout restarts the pods).
func (f TLSFiles) Credentials() (credentials.TransportCredentials, error) {
	cfg, err := f.Config()
	if cfg == nil || err != nil {
		return nil, err
	}
	return credentials.NewTLS(cfg), nil
}

// Config reads the files and builds the TLS configuration Credentials uses, or says
// which setting is wrong. Nil without error when TLS is not configured.
func (f TLSFiles) Config() (*tls.Config, error) {
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
	if f.Cert != "" {
		pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("TOLLGATE_CONTROLPLANE_TLS_CERT/KEY: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
