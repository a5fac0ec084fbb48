// Package testtls makes the certificates of a TLS or mTLS test at test time: a CA, a
// server certificate it signed (for 127.0.0.1, localhost and a name), and a client
// certificate it signed, written as PEM files in the test's temporary directory. Nothing
// is checked in, nothing outlives the test. Tests only; nothing in a program imports it.
package testtls

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// ServerName is the DNS name every server certificate carries besides localhost.
const ServerName = "controlplane.tollgate.test"

// CA is a certificate authority of one test.
type CA struct {
	// CertFile is the CA certificate, PEM.
	CertFile string
	dir      string
	cert     *x509.Certificate
	key      *ecdsa.PrivateKey
	serial   int64
}

// Pair names the PEM files of a certificate and its key.
type Pair struct{ CertFile, KeyFile string }

// NewCA makes a CA named name in t's temporary directory, valid for a day.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	return NewCAUntil(t, name, time.Now().Add(24*time.Hour))
}

// NewCAUntil is NewCA with the CA's expiry given.
func NewCAUntil(t testing.TB, name string, notAfter time.Time) *CA {
	t.Helper()
	ca := &CA{dir: t.TempDir(), key: newKey(t)}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: notAfter,
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &ca.key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	if ca.cert, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	ca.CertFile = writePEM(t, ca.dir, "ca.pem", "CERTIFICATE", der)
	ca.serial = 1
	return ca
}

// Certificate is the CA's own certificate.
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// Server makes a server certificate for 127.0.0.1, ::1, localhost and ServerName.
func (ca *CA) Server(t testing.TB) Pair {
	t.Helper()
	return ca.issue(t, "server", &x509.Certificate{Subject: pkix.Name{CommonName: ServerName},
		DNSNames: []string{"localhost", ServerName}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
}

// Client makes a client certificate (for mTLS) named name.
func (ca *CA) Client(t testing.TB, name string) Pair {
	t.Helper()
	return ca.issue(t, "client-"+name, &x509.Certificate{Subject: pkix.Name{CommonName: name},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
}

func (ca *CA) issue(t testing.TB, file string, tmpl *x509.Certificate) Pair {
	t.Helper()
	ca.serial++
	tmpl.SerialNumber = big.NewInt(ca.serial)
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	key := newKey(t)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return Pair{CertFile: writePEM(t, ca.dir, file+".pem", "CERTIFICATE", der),
		KeyFile: writePEM(t, ca.dir, file+"-key.pem", "PRIVATE KEY", keyDER)}
}

// CopyFile writes from's bytes over to, as the kubelet swaps a mounted Secret's file or
// an ACME client rewrites one.
func CopyFile(t testing.TB, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// CopyPair writes from's certificate and key over to's files, the certificate first.
func CopyPair(t testing.TB, from, to Pair) {
	t.Helper()
	CopyFile(t, from.CertFile, to.CertFile)
	CopyFile(t, from.KeyFile, to.KeyFile)
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func writePEM(t testing.TB, dir, name, typ string, der []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
