package e2e_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cpapp "github.com/tollgate-dev/tollgate/controlplane/app"
	"github.com/tollgate-dev/tollgate/internal/storetest"
	"github.com/tollgate-dev/tollgate/internal/testio"
	"github.com/tollgate-dev/tollgate/internal/testredis"
	"github.com/tollgate-dev/tollgate/internal/testtls"
	"github.com/tollgate-dev/tollgate/pkg/credential"
)

// TestEnforcerTalksToTheControlPlaneOverMTLS: the real control plane serves its internal
// API over TLS and requires client certificates (TOLLGATE_GRPC_TLS_CERT, _KEY,
// _CLIENT_CA), with certificates made now. An enforcer given the CA, a client
// certificate and the server's name (TOLLGATE_CONTROLPLANE_TLS_*) is accepted and
// ready; one that trusts another CA, and one without a client certificate, are refused
// with a reason that names TLS, never ready, in either failure mode.
func TestEnforcerTalksToTheControlPlaneOverMTLS(t *testing.T) {
	t.Parallel()
	ca := testtls.NewCA(t, "tollgate test CA")
	server, client := ca.Server(t), ca.Client(t, "enforcer")
	other := testtls.NewCA(t, "another CA")
	otherClient := other.Client(t, "stranger")

	s, cp := startMTLSControlPlane(t, server.CertFile, server.KeyFile, ca.CertFile)
	// By IP: the certificate lists 127.0.0.1, so no server name is needed; by the
	// certificate's DNS name through TOLLGATE_CONTROLPLANE_TLS_SERVER_NAME, as a
	// Service name or a mesh name would be.
	grpcAddr := cp["grpc"]

	readyWithin := func(t *testing.T, admin string, code int, body string) {
		t.Helper()
		var gotCode int
		var gotBody string
		deadline := time.Now().Add(15 * time.Second)
		for time.Now().Before(deadline) {
			if gotCode, gotBody = readyz(t, admin); gotCode == code && gotBody == body {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("readyz answers %d %q, want %d %q", gotCode, gotBody, code, body)
	}
	tlsEnv := func(caFile string, pair testtls.Pair, serverName, mode string) map[string]string {
		return map[string]string{"TOLLGATE_CONTROLPLANE_TLS_CA": caFile, "TOLLGATE_CONTROLPLANE_TLS_CERT": pair.CertFile,
			"TOLLGATE_CONTROLPLANE_TLS_KEY": pair.KeyFile, "TOLLGATE_CONTROLPLANE_TLS_SERVER_NAME": serverName,
			"TOLLGATE_FAILURE_MODE": mode}
	}

	// Before the others (this one is not parallel): the control plane's certificate
	// renewed in place, as the kubelet renews a mounted Secret, is served from a new
	// handshake within the reload interval, without a restart; the enforcers below then
	// meet the renewed one.
	t.Run("a renewed certificate is served without a restart", func(t *testing.T) {
		before := serverSerial(t, grpcAddr, ca, client)
		renewed := ca.Server(t) // the same files, a new serial
		want := leafOf(t, renewed).SerialNumber.String()
		if want == before {
			t.Fatalf("the renewal kept serial %s", before)
		}
		waitFor(t, 30*time.Second, "the control plane to present the renewed certificate", func() bool {
			return serverSerial(t, grpcAddr, ca, client) == want
		})
		if !strings.Contains(s.cpLogs.String(), "internal API TLS: renewed certificate loaded") {
			t.Errorf("no log line for the renewal:\n%s", s.cpLogs.String())
		}
		const expiry = "tollgate_controlplane_grpc_tls_certificate_expiration_timestamp_seconds"
		wantExpiry := float64(leafOf(t, renewed).NotAfter.Unix())
		waitFor(t, 5*time.Second, expiry+" to follow the renewal", func() bool {
			return metricAt(t, "http://"+cp["admin"], expiry) == wantExpiry
		})
	})
	t.Run("the right CA and a client certificate", func(t *testing.T) {
		t.Parallel()
		admin, _ := startEnforcer(t, s, grpcAddr, internalToken, tlsEnv(ca.CertFile, client, "", "closed"))
		readyWithin(t, admin, http.StatusOK, "ok\n")
		const expiry = "tollgate_enforcer_controlplane_tls_client_certificate_expiration_timestamp_seconds"
		if got, want := metricAt(t, admin, expiry), float64(leafOf(t, client).NotAfter.Unix()); got != want {
			t.Errorf("%s %v, want the client certificate's expiry %v", expiry, got, want)
		}
	})
	t.Run("by the certificate's name", func(t *testing.T) {
		t.Parallel()
		admin, _ := startEnforcer(t, s, grpcAddr, internalToken, tlsEnv(ca.CertFile, client, testtls.ServerName, "closed"))
		readyWithin(t, admin, http.StatusOK, "ok\n")
	})
	for _, mode := range []string{"closed", "open"} {
		t.Run("a wrong CA, "+mode, func(t *testing.T) {
			t.Parallel()
			admin, logs := startEnforcer(t, s, grpcAddr, internalToken, tlsEnv(other.CertFile, client, "", mode))
			readyWithin(t, admin, http.StatusServiceUnavailable, "control plane TLS handshake failed\n")
			time.Sleep(1500 * time.Millisecond) // more probes, all failing the same way
			readyWithin(t, admin, http.StatusServiceUnavailable, "control plane TLS handshake failed\n")
			if n := strings.Count(logs.String(), `msg="control plane TLS handshake failed"`); n != 1 {
				t.Fatalf("%d TLS lines, want 1:\n%s", n, logs.String())
			}
			if !strings.Contains(logs.String(), "certificate signed by unknown authority") {
				t.Fatalf("the log does not say why:\n%s", logs.String())
			}
		})
	}
	t.Run("a name the certificate does not carry", func(t *testing.T) {
		t.Parallel()
		admin, logs := startEnforcer(t, s, grpcAddr, internalToken, tlsEnv(ca.CertFile, client, "elsewhere.test", "closed"))
		readyWithin(t, admin, http.StatusServiceUnavailable, "control plane TLS handshake failed\n")
		if !strings.Contains(logs.String(), "elsewhere.test") {
			t.Fatalf("the log does not name the expected name:\n%s", logs.String())
		}
	})
	t.Run("a client certificate of another CA", func(t *testing.T) {
		t.Parallel()
		admin, _ := startEnforcer(t, s, grpcAddr, internalToken, tlsEnv(ca.CertFile, otherClient, "", "closed"))
		readyWithin(t, admin, http.StatusServiceUnavailable, "control plane TLS handshake failed\n")
	})
	t.Run("no client certificate", func(t *testing.T) {
		t.Parallel()
		admin, _ := startEnforcer(t, s, grpcAddr, internalToken, tlsEnv(ca.CertFile, testtls.Pair{}, "", "closed"))
		readyWithin(t, admin, http.StatusServiceUnavailable, "control plane TLS handshake failed\n")
	})
	t.Run("plaintext to a TLS control plane", func(t *testing.T) {
		t.Parallel()
		admin, _ := startEnforcer(t, s, grpcAddr, internalToken)
		readyWithin(t, admin, http.StatusServiceUnavailable, "control plane unreachable\n")
	})
}

// startMTLSControlPlane starts the real control plane on a database and Redis prefix of
// its own, serving its internal API over TLS with the pair in certFile and keyFile and
// requiring client certificates that a CA of clientCA signed.
func startMTLSControlPlane(t *testing.T, certFile, keyFile, clientCA string) (*stack, map[string]string) {
	t.Helper()
	db := storetest.New(t)
	rdb, layout := testredis.New(t)
	s := &stack{db: db, rdb: rdb, layout: layout, cpLogs: &testio.SyncBuffer{}}
	cpEnv := envOf(map[string]string{
		"TOLLGATE_DATABASE_URL": storetest.URLFor(db.Pool.Config().ConnConfig.Database), "TOLLGATE_REDIS_URL": testredis.URL(),
		"TOLLGATE_REDIS_PREFIX": layout.Prefix, "TOLLGATE_HTTP_ADDR": "127.0.0.1:0", "TOLLGATE_GRPC_ADDR": "127.0.0.1:0",
		"TOLLGATE_ADMIN_ADDR": "127.0.0.1:0", "TOLLGATE_INTERNAL_TOKEN": internalToken, "TOLLGATE_SHUTDOWN_TIMEOUT": "5s", "TOLLGATE_SHUTDOWN_DELAY": "0s",
		"TOLLGATE_GRPC_TLS_CERT": certFile, "TOLLGATE_GRPC_TLS_KEY": keyFile, "TOLLGATE_GRPC_CLIENT_CA": clientCA,
	})
	cp := run(t, "control plane", 3, s.cpLogs, func(ctx context.Context) error {
		return cpapp.Run(ctx, []string{"serve"}, cpEnv, cpapp.IO{Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: s.cpLogs})
	})
	return s, cp
}

// serverSerial shakes hands with the TLS server at addr, trusting ca and presenting the
// client pair, and returns the serial of the certificate it presented.
func serverSerial(t *testing.T, addr string, ca *testtls.CA, client testtls.Pair) string {
	t.Helper()
	pem, err := os.ReadFile(ca.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	pair, err := tls.LoadX509KeyPair(client.CertFile, client.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr,
		&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatalf("handshake with %s: %v", addr, err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

// TestInternalCAChangesWithoutARestart: a change of the internal CA, made in the files of
// a running control plane and a running enforcer as the kubelet brings renewed Secrets
// into their mounts: both CA bundles become the new CA alone, both certificates the new
// CA's. Neither program restarts. Once each has read its files (within the 10 s
// interval), the connection they had is cut, and the enforcer's next one must verify the
// control plane's new certificate against its changed bundle, and be accepted with its
// new client certificate by the control plane's changed bundle: its calls reach the
// control plane again. Without any one of the four reloads the handshake fails.
func TestInternalCAChangesWithoutARestart(t *testing.T) {
	t.Parallel()
	oldCA, newCA := testtls.NewCA(t, "old internal CA"), testtls.NewCAUntil(t, "new internal CA", time.Now().Add(48*time.Hour))
	dir := t.TempDir()
	file := func(name string) string { return filepath.Join(dir, name) }
	// The two Secrets as mounted: the control plane's (its pair, the CA its clients'
	// certificates are checked against) and the enforcer's (its pair, the CA it checks
	// the control plane's certificate against).
	cpCert, cpKey, cpCA := file("cp-tls.crt"), file("cp-tls.key"), file("cp-ca.crt")
	enfCert, enfKey, enfCA := file("enf-tls.crt"), file("enf-tls.key"), file("enf-ca.crt")
	// issueFrom writes ca's new pairs and ca alone, as the bundles, into both Secrets.
	issueFrom := func(ca *testtls.CA) {
		server, client := ca.Server(t), ca.Client(t, "enforcer")
		testtls.CopyFile(t, ca.CertFile, cpCA)
		testtls.CopyFile(t, ca.CertFile, enfCA)
		// Each key before its certificate: a reload between the two keeps the pair before.
		testtls.CopyFile(t, server.KeyFile, cpKey)
		testtls.CopyFile(t, server.CertFile, cpCert)
		testtls.CopyFile(t, client.KeyFile, enfKey)
		testtls.CopyFile(t, client.CertFile, enfCert)
	}
	issueFrom(oldCA)
	s, cp := startMTLSControlPlane(t, cpCert, cpKey, cpCA)
	g := newGate(t, cp["grpc"]) // to cut the enforcer's connection
	g.Open()
	enf, enfLogs := startEnforcerAddrs(t, s, g.ln.Addr().String(), internalToken, map[string]string{
		"TOLLGATE_CONTROLPLANE_TLS_CA": enfCA, "TOLLGATE_CONTROLPLANE_TLS_CERT": enfCert, "TOLLGATE_CONTROLPLANE_TLS_KEY": enfKey,
		"TOLLGATE_FAILURE_MODE": "closed"})

	// An unknown key's check is answered 401 only when the control plane answered the
	// enforcer's Authenticate; an unreachable one makes it 503 (failing closed).
	checkStatus := func() int {
		t.Helper()
		key, _ := credential.New(credential.APIKeyPrefix)
		req, _ := http.NewRequest(http.MethodPost, "http://"+enf["http"]+"/check", nil)
		req.Header.Set("x-api-key", key)
		req.Close = true // no kept connection, which the server may close as it is reused
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	waitFor(t, 15*time.Second, "the enforcer to reach the control plane over the old CA's TLS", func() bool {
		return checkStatus() == http.StatusUnauthorized
	})
	// Each bundle's expiry is a gauge (alert TollgateInternalCertificateExpiring).
	const cpCAExpiry, enfCAExpiry = "tollgate_controlplane_grpc_tls_client_ca_expiration_timestamp_seconds", "tollgate_enforcer_controlplane_tls_ca_expiration_timestamp_seconds"
	caExpiries := func(ca *testtls.CA) {
		t.Helper()
		want := float64(ca.Certificate().NotAfter.Unix())
		for _, g := range [][2]string{{cp["admin"], cpCAExpiry}, {enf["admin"], enfCAExpiry}} {
			waitFor(t, 5*time.Second, fmt.Sprintf("%s to be %s's expiry %v", g[1], ca.Certificate().Subject, want), func() bool {
				return metricAt(t, "http://"+g[0], g[1]) == want
			})
		}
	}
	caExpiries(oldCA)

	issueFrom(newCA)
	for _, l := range []struct {
		logs *testio.SyncBuffer
		line string
	}{
		{s.cpLogs, `msg="internal API TLS: renewed certificate loaded" subject="CN=` + testtls.ServerName + `"`},
		{s.cpLogs, `msg="internal API client CA: changed CA bundle loaded" certificates=1 subjects="CN=new internal CA"`},
		{enfLogs, `msg="control plane TLS client certificate: renewed certificate loaded" subject="CN=enforcer"`},
		{enfLogs, `msg="control plane TLS CA: changed CA bundle loaded" certificates=1 subjects="CN=new internal CA"`},
	} {
		waitFor(t, 30*time.Second, l.line, func() bool { return strings.Contains(l.logs.String(), l.line) })
	}
	caExpiries(newCA)
	if got := checkStatus(); got != http.StatusUnauthorized {
		t.Fatalf("on the connection made before the change: %d, want 401", got)
	}

	g.Cut()
	waitFor(t, 30*time.Second, "the enforcer's new connection to be accepted", func() bool {
		return checkStatus() == http.StatusUnauthorized
	})
	if strings.Contains(enfLogs.String(), "TLS handshake failed") {
		t.Errorf("the enforcer logged a failed handshake:\n%s", enfLogs.String())
	}
}
