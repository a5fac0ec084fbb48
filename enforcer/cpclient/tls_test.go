package cpclient_test

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/enforcer/cpclient"
	"github.com/tollgate-dev/tollgate/internal/testtls"
)

// TestClientCertificateRenewal: the enforcer's client certificate for mTLS is read
// from its files at Load and again at ClientCert.Reload (every 10 seconds while the
// enforcer serves), and each new handshake presents the one loaded last, so a renewed
// Secret reaches the control plane's next connection without a restart.
func TestClientCertificateRenewal(t *testing.T) {
	ca := testtls.NewCA(t, "cpclient test CA")
	server := ca.Server(t)
	dir := t.TempDir()
	files := cpclient.TLSFiles{CA: ca.CertFile, Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key")}
	put := func(p testtls.Pair) string {
		for _, f := range [][2]string{{p.CertFile, files.Cert}, {p.KeyFile, files.Key}} {
			b, err := os.ReadFile(f[0])
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(f[1], b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		c, err := tls.LoadX509KeyPair(p.CertFile, p.KeyFile)
		if err != nil {
			t.Fatal(err)
		}
		return c.Leaf.SerialNumber.String()
	}
	first := put(ca.Client(t, "enforcer"))
	loaded, err := files.Load()
	if err != nil || loaded == nil || loaded.ClientCert == nil || loaded.Credentials() == nil {
		t.Fatalf("Load: %+v, %v", loaded, err)
	}

	// A server that requires a client certificate of the CA, as the control plane with
	// TOLLGATE_GRPC_CLIENT_CA does, and tells the serial it was shown.
	pair, err := tls.LoadX509KeyPair(server.CertFile, server.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(mustRead(t, ca.CertFile))
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	seen := make(chan string, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tc := c.(*tls.Conn)
			if err := tc.Handshake(); err != nil {
				seen <- "handshake: " + err.Error()
			} else {
				seen <- tc.ConnectionState().PeerCertificates[0].SerialNumber.String()
			}
			c.Close()
		}
	}()
	shownSerial := func() string {
		t.Helper()
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), loaded.Config)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		defer conn.Close()
		select {
		case s := <-seen:
			return s
		case <-time.After(5 * time.Second):
			t.Fatal("the server saw no handshake")
			return ""
		}
	}
	if got := shownSerial(); got != first {
		t.Fatalf("the server was shown %s, want the first certificate's %s", got, first)
	}

	renewed := put(ca.Client(t, "enforcer"))
	if renewed == first {
		t.Fatal("the renewal kept its serial")
	}
	if got := shownSerial(); got != first {
		t.Fatalf("before Reload the server was shown %s, want the first certificate's %s", got, first)
	}
	if changed, err := loaded.ClientCert.Reload(); !changed || err != nil {
		t.Fatalf("Reload: %v, %v", changed, err)
	}
	if got := shownSerial(); got != renewed {
		t.Fatalf("after Reload the server was shown %s, want the renewal's %s", got, renewed)
	}
}

// TestLoadRefusesHalfAPair: the files' problems are start-up errors that name the
// variables.
func TestLoadRefusesHalfAPair(t *testing.T) {
	ca := testtls.NewCA(t, "cpclient test CA")
	client := ca.Client(t, "enforcer")
	for _, tc := range []struct {
		files cpclient.TLSFiles
		want  string
	}{
		{cpclient.TLSFiles{Cert: client.CertFile}, "TOLLGATE_CONTROLPLANE_TLS_CERT and TOLLGATE_CONTROLPLANE_TLS_KEY: set both or neither"},
		{cpclient.TLSFiles{Cert: client.CertFile, Key: ca.CertFile}, "TOLLGATE_CONTROLPLANE_TLS_CERT/KEY: "},
		{cpclient.TLSFiles{CA: filepath.Join(t.TempDir(), "none.pem")}, "TOLLGATE_CONTROLPLANE_TLS_CA: "},
	} {
		if got, err := tc.files.Load(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Load(%+v): %+v, %v; want an error saying %q", tc.files, got, err, tc.want)
		}
	}
	if got, err := (cpclient.TLSFiles{}).Load(); got != nil || err != nil || got.Credentials() != nil {
		t.Errorf("Load without settings: %+v, %v; want plaintext", got, err)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
