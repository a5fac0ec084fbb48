package tlsreload_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testio"
	"github.com/tollgate-dev/tollgate/internal/testtls"
	"github.com/tollgate-dev/tollgate/pkg/tlsreload"
)

// served is where a listener reads its pair from: two files the test rewrites, as the
// kubelet does a Secret's.
type served struct{ cert, key string }

func newServed(t *testing.T) served {
	dir := t.TempDir()
	return served{filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")}
}

// put copies pair's files over the served ones (the certificate's, then the key's).
func (s served) put(t *testing.T, p testtls.Pair) {
	t.Helper()
	testtls.CopyPair(t, p, testtls.Pair{CertFile: s.cert, KeyFile: s.key})
}

// issue makes a new server pair of ca in a directory of its own, so that the files of
// one pair outlive the next's.
func issue(t *testing.T, ca *testtls.CA) (testtls.Pair, *x509.Certificate) {
	t.Helper()
	p := ca.Server(t)
	dir := t.TempDir()
	own := testtls.Pair{CertFile: filepath.Join(dir, "cert.pem"), KeyFile: filepath.Join(dir, "key.pem")}
	testtls.CopyFile(t, p.CertFile, own.CertFile)
	testtls.CopyFile(t, p.KeyFile, own.KeyFile)
	c, err := tls.LoadX509KeyPair(own.CertFile, own.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	return own, c.Leaf
}

// renewal is a test's listener: the files it serves (the first of two pairs of one CA
// in them, loaded as pair) and the second pair, to renew them with.
type renewal struct {
	ca                    *testtls.CA
	served                served
	pair                  *tlsreload.Pair
	second                testtls.Pair
	firstLeaf, secondLeaf *x509.Certificate
}

func newRenewal(t *testing.T) renewal {
	t.Helper()
	r := renewal{ca: testtls.NewCA(t, "test CA"), served: newServed(t)}
	var first testtls.Pair
	first, r.firstLeaf = issue(t, r.ca)
	r.second, r.secondLeaf = issue(t, r.ca)
	r.served.put(t, first)
	var err error
	if r.pair, err = tlsreload.Load(r.served.cert, r.served.key); err != nil {
		t.Fatal(err)
	}
	return r
}

// handshakeSerial dials a TLS listener served by pair and returns the serial of the
// certificate the handshake presented.
func handshakeSerial(t *testing.T, pair *tlsreload.Pair, ca *testtls.CA) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{GetCertificate: pair.GetCertificate})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	roots := x509.NewCertPool()
	pem, err := os.ReadFile(ca.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	roots.AppendCertsFromPEM(pem)
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), &tls.Config{RootCAs: roots})
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

func TestLoadRefusesWhatCannotBeServed(t *testing.T) {
	ca := testtls.NewCA(t, "test CA")
	a, _ := issue(t, ca)
	b, _ := issue(t, ca)
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, cert, key, want string
	}{
		{"a missing certificate", filepath.Join(t.TempDir(), "none.pem"), a.KeyFile, "no such file"},
		{"a missing key", a.CertFile, filepath.Join(t.TempDir(), "none.pem"), "no such file"},
		{"a key of another certificate", a.CertFile, b.KeyFile, "private key does not match public key"},
		{"no PEM", notPEM, a.KeyFile, "failed to find any PEM data in certificate input"},
		{"the files swapped", a.KeyFile, a.CertFile, "failed to find certificate PEM data"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := tlsreload.Load(tc.cert, tc.key)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load: %v, %v; want an error saying %q", p, err, tc.want)
			}
		})
	}
}

func TestReloadServesARenewalFromTheNextHandshake(t *testing.T) {
	r := newRenewal(t)
	ca, s, pair, second, firstLeaf, secondLeaf := r.ca, r.served, r.pair, r.second, r.firstLeaf, r.secondLeaf
	if got := handshakeSerial(t, pair, ca); got != firstLeaf.SerialNumber.String() {
		t.Fatalf("served serial %s, want the first pair's %s", got, firstLeaf.SerialNumber)
	}
	if changed, err := pair.Reload(); changed || err != nil {
		t.Fatalf("Reload of unchanged files: %v, %v; want no change", changed, err)
	}

	s.put(t, second)
	if changed, err := pair.Reload(); !changed || err != nil {
		t.Fatalf("Reload of a renewal: %v, %v; want a change", changed, err)
	}
	if got := handshakeSerial(t, pair, ca); got != secondLeaf.SerialNumber.String() {
		t.Errorf("served serial %s after the renewal, want the second pair's %s", got, secondLeaf.SerialNumber)
	}
	if got := pair.Leaf().SerialNumber; got.Cmp(secondLeaf.SerialNumber) != 0 {
		t.Errorf("Leaf's serial %s, want %s", got, secondLeaf.SerialNumber)
	}
}

func TestABrokenRenewalKeepsThePairBefore(t *testing.T) {
	r := newRenewal(t)
	ca, s, pair, second, firstLeaf, secondLeaf := r.ca, r.served, r.pair, r.second, r.firstLeaf, r.secondLeaf
	// Half a renewal: the new certificate, the old key.
	testtls.CopyFile(t, second.CertFile, s.cert)
	if changed, err := pair.Reload(); changed || err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Fatalf("Reload of a half-written renewal: %v, %v; want the mismatch's error", changed, err)
	}
	if got := handshakeSerial(t, pair, ca); got != firstLeaf.SerialNumber.String() {
		t.Fatalf("served serial %s after a broken renewal, want the first pair's %s", got, firstLeaf.SerialNumber)
	}
	// The key file gone for a moment is no different.
	if err := os.Remove(s.key); err != nil {
		t.Fatal(err)
	}
	if _, err := pair.Reload(); err == nil {
		t.Fatal("Reload without a key file: no error")
	}
	if got := handshakeSerial(t, pair, ca); got != firstLeaf.SerialNumber.String() {
		t.Fatalf("served serial %s without a key file, want the first pair's %s", got, firstLeaf.SerialNumber)
	}
	// The renewal completed.
	testtls.CopyFile(t, second.KeyFile, s.key)
	if changed, err := pair.Reload(); !changed || err != nil {
		t.Fatalf("Reload of the completed renewal: %v, %v; want a change", changed, err)
	}
	if got := handshakeSerial(t, pair, ca); got != secondLeaf.SerialNumber.String() {
		t.Errorf("served serial %s, want the second pair's %s", got, secondLeaf.SerialNumber)
	}
}

func TestWatchReloadsAndReportsABrokenRenewalOnce(t *testing.T) {
	r := newRenewal(t)
	ca, s, pair, second, firstLeaf, secondLeaf := r.ca, r.served, r.pair, r.second, r.firstLeaf, r.secondLeaf
	logs := &testio.SyncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	loaded := make(chan string, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		pair.Watch(ctx, time.Millisecond, log, "gateway TLS", func(c *x509.Certificate) { loaded <- c.SerialNumber.String() })
	}()
	defer func() { cancel(); <-done }()
	if got := <-loaded; got != firstLeaf.SerialNumber.String() {
		t.Fatalf("first onLoad with serial %s, want %s", got, firstLeaf.SerialNumber)
	}

	testtls.CopyFile(t, second.CertFile, s.cert) // half a renewal, for many intervals
	waitFor(t, "the broken renewal's warning", func() bool { return strings.Contains(logs.String(), "does not load") })
	time.Sleep(50 * time.Millisecond)
	if n := strings.Count(logs.String(), "does not load"); n != 1 {
		t.Errorf("the broken renewal was reported %d times, want once:\n%s", n, logs)
	}

	testtls.CopyFile(t, second.KeyFile, s.key)
	select {
	case got := <-loaded:
		if got != secondLeaf.SerialNumber.String() {
			t.Errorf("onLoad with serial %s, want the renewal's %s", got, secondLeaf.SerialNumber)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the completed renewal was not loaded; logs:\n%s", logs)
	}
	waitFor(t, "the renewal's log line", func() bool { return strings.Contains(logs.String(), "renewed certificate loaded") })
	if !strings.Contains(logs.String(), "serial="+secondLeaf.SerialNumber.String()) {
		t.Errorf("the renewal's log line does not name its serial:\n%s", logs)
	}
	if got := handshakeSerial(t, pair, ca); got != secondLeaf.SerialNumber.String() {
		t.Errorf("served serial %s, want the renewal's %s", got, secondLeaf.SerialNumber)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// A key setting (TOLLGATE_GATEWAY_TLS_KEY, TOLLGATE_GRPC_TLS_KEY, ...) is at times given
// the PEM key itself, as other tools take it, rather than the name of its file. The
// file cannot be opened then, and the error, printed as a configuration problem (to
// stderr, which is the log), must not quote the key; it still says why, and which file.
func TestKeyGivenInPlaceOfItsFileIsNotQuoted(t *testing.T) {
	ca := testtls.NewCA(t, "test CA")
	a, _ := issue(t, ca)
	pemKey, err := os.ReadFile(a.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	// The whole PEM (longer than a file name may be), and one line of it (a name that
	// may be, of a file that does not exist).
	body := strings.Split(string(pemKey), "\n")[1]
	for _, key := range []string{string(pemKey), body} {
		_, err := tlsreload.Load(a.CertFile, key)
		if err == nil {
			t.Fatal("Load took a key that is no file")
		}
		if strings.Contains(err.Error(), body[:16]) {
			t.Errorf("the error quotes the key: %v", err)
		}
		if !strings.Contains(err.Error(), "key file") {
			t.Errorf("the error does not say it is the key file that cannot be read: %v", err)
		}
	}
}
