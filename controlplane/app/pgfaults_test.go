package app_test

import (
	"io"
	"net/http"
	"testing"
	"time"

	at "github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	"github.com/tollgate-dev/tollgate/internal/storetest"
	"github.com/tollgate-dev/tollgate/internal/testio"
)

// TestReadyzUnderPostgresTrouble: /readyz on the admin port under real Postgres faults.
// Every connection of the pool taken: not ready, and the reason names the pool, not an
// unreachable database (Postgres answers; before, it said "database unreachable"). A
// database that refuses writes, or a lock on a table: still ready, since the API serves
// (reads, and every route that does not need the locked table) and answers the rest 503.
func TestReadyzUnderPostgresTrouble(t *testing.T) {
	e := at.New(t, at.Options{})
	logs := &testio.SyncBuffer{}
	sv := serveControlPlane(t, e, 5*time.Second, 0, logs)
	readyz := "http://" + sv.lns.Admin.Addr().String() + "/readyz"
	get := func() (int, string) {
		t.Helper()
		res, err := http.Get(readyz)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	expect := func(what string, code int, body string) {
		t.Helper()
		if c, b := get(); c != code || b != body {
			t.Fatalf("%s: /readyz answered %d %q, want %d %q", what, c, b, code, body)
		}
	}
	waitFor(t, "ready", func() bool { c, _ := get(); return c == http.StatusOK })

	undo := storetest.ReadOnly(t, e.Store)
	expect("read-only database", http.StatusOK, "ok\n")
	undo()

	release := storetest.LockTable(t, e.Store, "members", "ACCESS EXCLUSIVE")
	expect("a table locked", http.StatusOK, "ok\n")
	release()

	release = storetest.Exhaust(t, e.Store)
	expect("every connection taken", http.StatusServiceUnavailable, "database connections all in use\n")
	release()
	expect("connections free again", http.StatusOK, "ok\n")
}
