package app_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	at "github.com/tollgate-dev/tollgate/controlplane/internal/accountingtest"
	"github.com/tollgate-dev/tollgate/internal/storetest"
	"github.com/tollgate-dev/tollgate/internal/testio"
	internalv1 "github.com/tollgate-dev/tollgate/pkg/internalapi/v1"
	"github.com/tollgate-dev/tollgate/pkg/internaltoken"
	"github.com/tollgate-dev/tollgate/pkg/window"
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

// TestAccountingKeepsItsShareOfThePool: REST requests that wait for a lock (a signed-in
// user's reads while another session holds the users table) hold every connection of the REST API's
// share (TOLLGATE_REST_DATABASE_CONNS, half the pool by default) and more wait for one
// (tollgate_controlplane_rest_database_waiting); meanwhile the enforcers' durable starts
// and settlements still get connections and commit, while REST is still held. Before the
// share, those sign-ins took the whole pool and the start waited until its deadline.
func TestAccountingKeepsItsShareOfThePool(t *testing.T) {
	e := at.New(t, at.Options{})
	org, ms := e.Org(t, 1)
	logs := &testio.SyncBuffer{}
	sv := serveControlPlane(t, e, 5*time.Second, 0, logs)
	defer func() {
		if t.Failed() {
			t.Logf("logs:\n%s", logs.String())
		}
	}()
	share := sv.cp.RESTDatabase.Stat().Size
	if pool := int64(e.Store.Pool.Config().MaxConns); share != pool/2 {
		t.Fatalf("the REST API's share is %d of the pool's %d connections, want half", share, pool)
	}
	// One user's session, whose every request reads the users table. Sign-ins would
	// not do: since 2026-12-07 more than five at once from one address meet the
	// password brake's 429 before the database.
	rest := "http://" + sv.lns.REST.Addr().String()
	res, err := http.Post(rest+"/v1/auth/sign-up", "application/json",
		strings.NewReader(`{"email":"held@example.test","password":"123456789012","name":"Held"}`))
	if err != nil {
		t.Fatal(err)
	}
	var session struct{ Token string }
	err = json.NewDecoder(res.Body).Decode(&session)
	res.Body.Close()
	if err != nil || res.StatusCode != http.StatusCreated || session.Token == "" {
		t.Fatalf("sign-up answered %d (%v)", res.StatusCode, err)
	}
	observer := storetest.Conn(t, e.Store)
	release := storetest.LockTable(t, e.Store, "users", "ACCESS EXCLUSIVE")
	reads := int(share) + 2
	answered := make(chan int, reads)
	for range reads {
		go func() {
			req, _ := http.NewRequest("GET", rest+"/v1/me", nil)
			req.Header.Set("Authorization", "Bearer "+session.Token)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				answered <- 0
				return
			}
			res.Body.Close()
			answered <- res.StatusCode
		}()
	}
	// REST holds its whole share, waiting for the lock, and two more wait for a slot.
	storetest.WaitForLockWaiters(t, observer, int(share))
	waitFor(t, "two reads waiting for a connection of the REST API's share", func() bool {
		return sv.cp.RESTDatabase.Stat().Waiting == 2
	})

	client := grpcClient(t, sv.lns.GRPC.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 3 {
		id := at.ReqID()
		if _, err := client.Start(ctx, &internalv1.StartRequest{Items: []*internalv1.StartItem{at.StartItem(id, org, ms[0], e.Clock.Now(), 0)}}); err != nil {
			t.Fatalf("start %d while REST holds its share: %v", i, err)
		}
		res, err := client.Settle(ctx, &internalv1.SettleRequest{Items: []*internalv1.SettleItem{
			{RequestId: id, UpstreamCostMicroUsd: at.Cost(700), Complete: true, Model: "m"}}})
		if err != nil || res.GetResults()[0].GetOutcome() != internalv1.SettleOutcome_SETTLE_OUTCOME_SETTLED {
			t.Fatalf("settlement %d while REST holds its share: %v %v", i, res, err)
		}
	}
	if st := sv.cp.RESTDatabase.Stat(); storetest.LockWaiters(t, observer) != int(share) || st.InUse != share || st.Waiting != 2 {
		t.Fatalf("REST no longer held while accounting committed: %d lock waiters, %+v", storetest.LockWaiters(t, observer), st)
	}
	if used := e.Used(t, org, ms[0], window.Day, e.Clock.Now()); used != 3*700 {
		t.Errorf("charged %d micro-USD, want %d", used, 3*700)
	}
	release()
	for range reads {
		if code := <-answered; code != http.StatusOK {
			t.Errorf("a read held by the lock answered %d once it was released, want 200", code)
		}
	}
}

// grpcClient is an accounting client of the internal API at addr, with the token.
func grpcClient(t *testing.T, addr string) internalv1.AccountingClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(internaltoken.PerRPC(at.Token, false)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return internalv1.NewAccountingClient(cc)
}
