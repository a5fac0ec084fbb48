package tlsreload_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/testio"
	"github.com/tollgate-dev/tollgate/internal/testtls"
	"github.com/tollgate-dev/tollgate/pkg/tlsreload"
)

// writeBundle writes the CAs' certificates, in order, to file (then extra, when given).
func writeBundle(t *testing.T, file string, extra []byte, cas ...*testtls.CA) {
	t.Helper()
	var b []byte
	for _, ca := range cas {
		pem, err := os.ReadFile(ca.CertFile)
		if err != nil {
			t.Fatal(err)
		}
		b = append(b, pem...)
	}
	if err := os.WriteFile(file, append(b, extra...), 0o600); err != nil {
		t.Fatal(err)
	}
}

// loadBundle writes the CAs to a bundle file of its own and loads it.
func loadBundle(t *testing.T, cas ...*testtls.CA) (string, *tlsreload.Pool) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "ca.crt")
	writeBundle(t, file, nil, cas...)
	pool, err := tlsreload.LoadPool(file)
	if err != nil {
		t.Fatal(err)
	}
	return file, pool
}

// verifies reports whether leaf verifies against the pool's bundle as now loaded.
func verifies(pool *tlsreload.Pool, leaf *x509.Certificate) bool {
	_, err := leaf.Verify(x509.VerifyOptions{Roots: pool.CertPool()})
	return err == nil
}

// A damaged certificate: PEM around bytes that are no certificate, as a bundle cut in
// the middle of a base64 line and closed by hand, or a file of another kind, would be.
var damaged = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("no certificate")})

func TestLoadPoolRefusesWhatVerifiesNothing(t *testing.T) {
	ca := testtls.NewCA(t, "test CA")
	dir := t.TempDir()
	file := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	key, _ := issue(t, ca)
	withDamaged := filepath.Join(dir, "damaged-second.pem")
	writeBundle(t, withDamaged, damaged, ca)
	for _, tc := range []struct{ name, file, want string }{
		{"a missing file", filepath.Join(dir, "none.pem"), "no such file"},
		{"no PEM", file("hello.pem", []byte("hello")), "no PEM certificate in " + filepath.Join(dir, "hello.pem")},
		{"a key, no certificate", key.KeyFile, "no PEM certificate in"},
		{"a damaged second certificate", withDamaged, withDamaged + ": certificate 2: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := tlsreload.LoadPool(tc.file)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("LoadPool: %v, %v; want an error saying %q", p, err, tc.want)
			}
		})
	}
}

// TestPoolFollowsAChangeOfCA: the steps of a change of CA, each used from the Reload that
// reads it: the new CA added beside the old one, a broken write kept out, the old one
// taken out.
func TestPoolFollowsAChangeOfCA(t *testing.T) {
	oldCA, newCA := testtls.NewCA(t, "old CA"), testtls.NewCA(t, "new CA")
	_, oldLeaf := issue(t, oldCA)
	_, newLeaf := issue(t, newCA)
	file, pool := loadBundle(t, oldCA)
	if !verifies(pool, oldLeaf) || verifies(pool, newLeaf) {
		t.Fatalf("the old CA's bundle: the old CA's leaf verifies %v, the new one's %v; want true, false", verifies(pool, oldLeaf), verifies(pool, newLeaf))
	}
	if changed, err := pool.Reload(); changed || err != nil {
		t.Fatalf("Reload of an unchanged file: %v, %v; want no change", changed, err)
	}

	writeBundle(t, file, nil, oldCA, newCA)
	if changed, err := pool.Reload(); !changed || err != nil {
		t.Fatalf("Reload with the new CA added: %v, %v; want a change", changed, err)
	}
	if !verifies(pool, oldLeaf) || !verifies(pool, newLeaf) || len(pool.Certificates()) != 2 {
		t.Fatalf("both CAs: the old leaf verifies %v, the new %v, %d certificates; want both and 2", verifies(pool, oldLeaf), verifies(pool, newLeaf), len(pool.Certificates()))
	}

	writeBundle(t, file, damaged, newCA) // a broken write: the bundle before stays
	if changed, err := pool.Reload(); changed || err == nil || !strings.Contains(err.Error(), "certificate 2") {
		t.Fatalf("Reload of a damaged bundle: %v, %v; want its error", changed, err)
	}
	if !verifies(pool, oldLeaf) || !verifies(pool, newLeaf) {
		t.Fatal("a damaged bundle changed what verifies")
	}

	writeBundle(t, file, nil, newCA)
	if changed, err := pool.Reload(); !changed || err != nil {
		t.Fatalf("Reload with the old CA taken out: %v, %v; want a change", changed, err)
	}
	if verifies(pool, oldLeaf) || !verifies(pool, newLeaf) {
		t.Fatalf("the new CA alone: the old leaf verifies %v, the new %v; want false, true", verifies(pool, oldLeaf), verifies(pool, newLeaf))
	}
}

func TestPoolWatchLogsEachChangeAndABrokenOneOnce(t *testing.T) {
	oldCA, newCA := testtls.NewCA(t, "old CA"), testtls.NewCA(t, "new CA")
	_, newLeaf := issue(t, newCA)
	file, pool := loadBundle(t, oldCA)
	oldExpiry := pool.Certificates()[0].NotAfter
	logs := &testio.SyncBuffer{}
	expiries := make(chan time.Time, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		pool.Watch(ctx, time.Millisecond, slog.New(slog.NewTextHandler(logs, nil)), "control plane TLS CA", func(e time.Time) { expiries <- e })
	}()
	defer func() { cancel(); <-done }()
	if got := <-expiries; !got.Equal(oldExpiry) {
		t.Fatalf("onLoad at start with %v, want the old CA's expiry %v", got, oldExpiry)
	}
	waitFor(t, "the bundle's first log line", func() bool {
		return strings.Contains(logs.String(), `msg="control plane TLS CA: CA bundle loaded" certificates=1 subjects="CN=old CA"`)
	})

	writeBundle(t, file, damaged, oldCA, newCA)
	waitFor(t, "the broken change's warning", func() bool { return strings.Contains(logs.String(), "does not load") })
	time.Sleep(50 * time.Millisecond)
	if n := strings.Count(logs.String(), "does not load"); n != 1 {
		t.Errorf("the broken change was reported %d times, want once:\n%s", n, logs)
	}
	if verifies(pool, newLeaf) {
		t.Fatal("a broken change was used")
	}

	writeBundle(t, file, nil, oldCA, newCA)
	waitFor(t, "the change's log line", func() bool {
		return strings.Contains(logs.String(), `msg="control plane TLS CA: changed CA bundle loaded" certificates=2 subjects="CN=old CA; CN=new CA"`)
	})
	if !verifies(pool, newLeaf) {
		t.Fatal("the new CA's leaf does not verify after the change was logged")
	}
	select {
	case got := <-expiries:
		if want := pool.Expiry(); !got.Equal(want) || got.After(oldExpiry) {
			t.Errorf("onLoad after the change with %v, want the bundle's first expiry %v, no later than the old CA's %v", got, want, oldExpiry)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no onLoad for the change")
	}
}

// TestPoolExpiryIsTheFirstCAToExpire: a bundle's Expiry is its soonest NotAfter, whatever
// the order in the file: the moment a CA in it stops verifying what it signed.
func TestPoolExpiryIsTheFirstCAToExpire(t *testing.T) {
	longer, shorter := testtls.NewCA(t, "longer CA"), testtls.NewCAUntil(t, "shorter CA", time.Now().Add(2*time.Hour))
	for _, order := range [][]*testtls.CA{{longer, shorter}, {shorter, longer}} {
		_, pool := loadBundle(t, order...)
		if got, want := pool.Expiry(), shorter.Certificate().NotAfter; !got.Equal(want) {
			t.Errorf("Expiry of %s then %s: %v, want the shorter CA's %v", order[0].Certificate().Subject, order[1].Certificate().Subject, got, want)
		}
	}
}
