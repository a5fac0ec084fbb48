package cpclient_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

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
		testtls.CopyPair(t, p, testtls.Pair{CertFile: files.Cert, KeyFile: files.Key})
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
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), loaded.Config())
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

// TestChangeOfCA: the bundle the control plane's certificate is verified against
// (TOLLGATE_CONTROLPLANE_TLS_CA) is read again at CA.Reload (every 10 seconds while the
// enforcer serves), and the gRPC connection's next handshake uses it: an enforcer that
// cannot verify a control plane whose certificate a new CA signed reaches it, on the
// same connection and credentials, once the new CA is in the bundle, without a restart.
func TestChangeOfCA(t *testing.T) {
	oldCA, newCA := testtls.NewCA(t, "old CA"), testtls.NewCA(t, "new CA")
	bundle := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(bundle, mustRead(t, oldCA.CertFile), 0o600); err != nil {
		t.Fatal(err)
	}
	loaded, err := cpclient.TLSFiles{CA: bundle}.Load()
	if err != nil {
		t.Fatal(err)
	}

	// A control plane whose certificate the new CA signed.
	server := newCA.Server(t)
	pair, err := tls.LoadX509KeyPair(server.CertFile, server.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{pair}})))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()

	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(loaded.Credentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	check := func(wait time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		return err
	}
	if err := check(2 * time.Second); err == nil {
		t.Fatal("the old CA's bundle verified the new CA's certificate")
	} else if !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Fatalf("before the change: %v; want the handshake's refusal", err)
	}

	if err := os.WriteFile(bundle, append(mustRead(t, oldCA.CertFile), mustRead(t, newCA.CertFile)...), 0o600); err != nil {
		t.Fatal(err)
	}
	if changed, err := loaded.CA.Reload(); !changed || err != nil {
		t.Fatalf("Reload: %v, %v", changed, err)
	}
	if err := check(20 * time.Second); err != nil {
		t.Fatalf("after the new CA was added: %v", err)
	}
	if got := loaded.Config().RootCAs; !got.Equal(loaded.CA.CertPool()) {
		t.Error("Config's roots are not the bundle loaded last")
	}
}
