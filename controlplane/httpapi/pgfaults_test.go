package httpapi_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/apitest"
	"github.com/tollgate-dev/tollgate/internal/storetest"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// The REST API when Postgres is in trouble, each fault real (internal/storetest): what
// an admin and a member see is the documented 503 in the route's error shape, within the
// request's bound, and nothing half-written. docs/admin.md, "When Postgres is in
// trouble", says the same for operators.

// inBackground sends the request from another goroutine; await answers its response.
func inBackground(send func() *apitest.Resp) <-chan *apitest.Resp {
	done := make(chan *apitest.Resp, 1)
	go func() { done <- send() }()
	return done
}

// await answers the response of a request sent inBackground, failing the test when none
// comes within a minute (a request waiting for Postgres with no bound of its own);
// unblock then lets Postgres go, so that the request can end before the test does.
func await(t *testing.T, done <-chan *apitest.Resp, unblock func()) *apitest.Resp {
	t.Helper()
	select {
	case r := <-done:
		return r
	case <-time.After(time.Minute):
		unblock()
		r := <-done
		t.Fatalf("no answer while Postgres held the request for a minute (answered %d once let go: %s)", r.Status, r.Body)
		return nil
	}
}

// expectUnavailable checks the documented 503: the route's error code and a message,
// no Go or SQL text.
func expectUnavailable(t *testing.T, r *apitest.Resp, code string) {
	t.Helper()
	m := r.ExpectError(t, http.StatusServiceUnavailable, code)
	if m["message"] != "The service is temporarily unavailable; try again shortly." || len(m) != 2 {
		t.Fatalf("503 body %s", r.Body)
	}
}

// snapshot is every row of every table of the database, to tell that a refused write
// changed nothing.
func snapshot(t *testing.T, e *apitest.Env) map[string]string {
	t.Helper()
	return snapshotter(t, e)()
}

func sameSnapshot(t *testing.T, before, after map[string]string) {
	t.Helper()
	for tb, d := range before {
		if after[tb] != d {
			t.Errorf("table %s changed by a write that was answered 503", tb)
		}
	}
}

// TestWriteKilledMidTransaction: a multi-statement write whose Postgres backend is
// killed (pg_terminate_backend) after its first statements, while it waits to write
// its audit event, committed nothing, so the request runs it once more on another
// connection (store.InTx). Killed on that attempt too, nothing of it stays and the
// answer is the route's 503 (never 200, never a 500 or Go's text); killed once, the
// request succeeds and the write is done once. Before the retry, one kill was a 503.
func TestWriteKilledMidTransaction(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	bob := e.AddMember(t, o, "bob", "member")
	carol := e.SignUp(t, "carol")
	var inv struct{ Token string }
	e.Do(t, "POST", "/v1/invitations", map[string]string{"email": carol.Email, "role": "member"}, o.As()...).
		Expect(t, http.StatusCreated).Decode(t, &inv)
	p := dayPolicy(t, e, o, "Daily", "0.000005", map[string]any{"allowRequestReset": true})
	assign(t, e, o, p.ID, map[string]any{"memberId": bob.MemberID})
	setUsed(t, e, bob, window.Day, 5)
	reset := decodeReset(t, submit(t, e, bob, getStatus(t, e, bob).Buckets[0].ID, "deadline").Expect(t, http.StatusOK))
	mkt := newMarketplace(t, e, o, "Engineering")
	other := e.SignUp(t, "dave")

	for _, tc := range []struct {
		name, method, path string
		body               any
		as                 []apitest.Opt
		code               string
		ok                 int
	}{
		{"create an organization", "POST", "/v1/organizations", map[string]string{"name": "Beta"}, []apitest.Opt{apitest.Session(other.Token)}, "service_unavailable", http.StatusCreated},
		{"add a member", "POST", "/v1/invitations/accept", map[string]string{"token": inv.Token}, []apitest.Opt{apitest.Session(carol.Token)}, "service_unavailable", http.StatusOK},
		{"assign a policy", "POST", policiesPath + "/" + p.ID + "/assignments", map[string]any{"organization": true}, o.As(), "gateway_usage_unavailable", http.StatusOK},
		{"replace marketplace access", "PUT", "/v1/marketplaces/" + mkt + "/access", map[string]any{"grants": []any{memberGrant(bob, "editor"), orgGrant("viewer")}}, o.As(), "service_unavailable", http.StatusOK},
		{"approve an extension", "POST", resetsPath + "/" + reset.ID + "/approve", map[string]any{}, o.As(), "gateway_usage_unavailable", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// kills sends the write while the audit table is locked, kills its backend
			// n times (each attempt waits for the lock), then lets the lock go.
			kills := func(n int) *apitest.Resp {
				release := storetest.LockTable(t, e.Store, "audit_events", "EXCLUSIVE")
				killer := storetest.Conn(t, e.Store)
				done := inBackground(func() *apitest.Resp { return e.Do(t, tc.method, tc.path, tc.body, tc.as...) })
				for range n {
					storetest.WaitForTableLockWaiters(t, killer, "audit_events", 1)
					if k := storetest.TerminateTableLockWaiters(t, killer, "audit_events"); k != 1 {
						t.Fatalf("killed %d backends; the database's:\n%s", k, storetest.Activity(t, killer))
					}
				}
				if n == 1 {
					storetest.WaitForTableLockWaiters(t, killer, "audit_events", 1) // the request's second attempt
				}
				release()
				return await(t, done, release)
			}
			before := snapshot(t, e)
			expectUnavailable(t, kills(2), tc.code)
			sameSnapshot(t, before, snapshot(t, e))
			kills(1).Expect(t, tc.ok)
		})
	}
}

// TestLockWaitEndsAtTheRequestDeadline: a write that waits for a lock another session
// holds (here the whole table) is answered 503 by the request's deadline, its statement
// ends in Postgres too (no backend goes on waiting while the lock is still held) and its
// connection goes back to the pool; nothing was written, and once the lock is gone the
// write succeeds. Before the deadline existed, the request waited as long as the lock
// lasted; reads the same.
func TestLockWaitEndsAtTheRequestDeadline(t *testing.T) {
	t.Parallel()
	setup := apitest.New(t)
	o := setup.NewOrg(t, "Acme")
	p := dayPolicy(t, setup, o, "Daily", "1", nil)
	e := setup.Bounded(t, 500*time.Millisecond)
	observer := storetest.Conn(t, e.Store)
	table := func(name string) string { return `LOCK TABLE ` + name + ` IN ACCESS EXCLUSIVE MODE` }
	for _, tc := range []struct {
		name, hold, method, path string
		body                     any
		code                     string
		ok                       int
	}{
		{"create a team", table("teams"), "POST", "/v1/teams", map[string]string{"name": "Platform"}, "service_unavailable", http.StatusCreated},
		{"read the teams", table("teams"), "GET", "/v1/teams", nil, "service_unavailable", http.StatusOK},
		{"update a policy whose row is locked", `SELECT 1 FROM usage_policies WHERE id = '` + p.ID + `' FOR UPDATE`, "PATCH", policiesPath + "/" + p.ID,
			map[string]any{"revision": 1, "name": "Daily 2", "limits": []map[string]any{{"timeframe": "day", "costUsd": "2"}}}, "gateway_usage_unavailable", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := snapshot(t, e)
			release := storetest.HoldInTx(t, e.Store, tc.hold)
			r := await(t, inBackground(func() *apitest.Resp { return e.Do(t, tc.method, tc.path, tc.body, o.As()...) }), release)
			storetest.WaitForNoLockWaiters(t, observer)
			storetest.WaitForReleasedConns(t, e.Store)
			release()
			expectUnavailable(t, r, tc.code)
			sameSnapshot(t, before, snapshot(t, e))
			e.Do(t, tc.method, tc.path, tc.body, o.As()...).Expect(t, tc.ok)
		})
	}
}

// TestExhaustedPoolAnswers503: with every connection of the pool taken (by slow
// requests, or accounting at its peak), a request is answered 503 by its deadline
// instead of waiting for a connection as long as its client waits; public routes that
// need no database still answer, and once connections are free again so does the API.
func TestExhaustedPoolAnswers503(t *testing.T) {
	t.Parallel()
	setup := apitest.New(t)
	o := setup.NewOrg(t, "Acme")
	e := setup.Bounded(t, 500*time.Millisecond)
	release := storetest.Exhaust(t, e.Store)
	for _, tc := range []struct{ method, path, code string }{
		{"GET", "/v1/me", "service_unavailable"},
		{"GET", "/v1/members", "service_unavailable"},
		{"GET", "/v1/gateway/usage-limits/me", "gateway_usage_unavailable"},
		{"GET", "/ready", "service_unavailable"},
	} {
		r := await(t, inBackground(func() *apitest.Resp { return e.Do(t, tc.method, tc.path, nil, o.As()...) }), release)
		expectUnavailable(t, r, tc.code)
	}
	e.Do(t, "GET", "/health", nil).Expect(t, http.StatusOK)
	release()
	e.Do(t, "GET", "/v1/me", nil, o.As()...).Expect(t, http.StatusOK)
}

// TestReadOnlyDatabase: Postgres refusing writes (SQLSTATE 25006, a standby during a
// failover) answers every write 503 in its route's shape, never 400, 409 or 500, and
// changes nothing; reads go on working. Once the database takes writes again, so does
// the API.
func TestReadOnlyDatabase(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	bob := e.AddMember(t, o, "bob", "member")
	p := dayPolicy(t, e, o, "Daily", "1", nil)
	before := snapshot(t, e)
	undo := storetest.ReadOnly(t, e.Store)
	for _, tc := range []struct {
		method, path string
		body         any
		code         string
	}{
		{"POST", "/v1/auth/sign-up", map[string]string{"email": "new@example.test", "password": apitest.Password, "name": "New"}, "service_unavailable"},
		{"POST", "/v1/auth/sign-in", map[string]string{"email": o.Email, "password": apitest.Password}, "service_unavailable"},
		{"POST", "/v1/organizations", map[string]string{"name": "Beta"}, "service_unavailable"},
		{"POST", "/v1/invitations", map[string]string{"email": "x@example.test", "role": "member"}, "service_unavailable"},
		{"PATCH", "/v1/members/" + bob.MemberID, map[string]string{"role": "admin"}, "service_unavailable"},
		{"POST", "/v1/teams", map[string]string{"name": "Platform"}, "service_unavailable"},
		{"POST", "/v1/api-keys", map[string]string{"name": "k"}, "service_unavailable"},
		{"POST", policiesPath, map[string]any{"name": "Weekly", "limits": []map[string]any{{"timeframe": "week", "costUsd": "1"}}}, "gateway_usage_unavailable"},
		{"POST", policiesPath + "/" + p.ID + "/assignments", map[string]any{"memberId": bob.MemberID}, "gateway_usage_unavailable"},
		{"PUT", "/v1/gateway/model-prices", map[string]any{"prices": []any{}}, "gateway_usage_unavailable"},
		{"POST", "/v1/auth/sign-out", nil, "service_unavailable"},
	} {
		expectUnavailable(t, e.Do(t, tc.method, tc.path, tc.body, o.As()...), tc.code)
	}
	for _, path := range []string{"/v1/me", "/v1/members", "/v1/teams", policiesPath, "/v1/gateway/usage-limits/me", "/ready"} {
		e.Do(t, "GET", path, nil, o.As()...).Expect(t, http.StatusOK)
	}
	undo()
	sameSnapshot(t, before, snapshot(t, e))
	e.Do(t, "POST", "/v1/teams", map[string]string{"name": "Platform"}, o.As()...).Expect(t, http.StatusCreated)
}

// TestServerTimeoutsAnswer503: Postgres's own bounds, set by an operator on the database
// (lock_timeout, statement_timeout), end a request before its deadline; the refusal
// (SQLSTATE 55P03 or 57014) is the route's 503 like any other failure of the database,
// not a 500 and not a 4xx, and nothing is written.
func TestServerTimeoutsAnswer503(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	for _, param := range []string{"lock_timeout", "statement_timeout"} {
		t.Run(param, func(t *testing.T) {
			before := snapshot(t, e)
			undo := storetest.SetDatabase(t, e.Store, param, "100ms")
			release := storetest.LockTable(t, e.Store, "teams", "ACCESS EXCLUSIVE")
			r := await(t, inBackground(func() *apitest.Resp {
				return e.Do(t, "POST", "/v1/teams", map[string]string{"name": "Platform"}, o.As()...)
			}), release)
			release()
			undo()
			expectUnavailable(t, r, "service_unavailable")
			sameSnapshot(t, before, snapshot(t, e))
		})
	}
}
