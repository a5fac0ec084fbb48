package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/controlplane/password"
	"github.com/tollgate-dev/tollgate/controlplane/platform"
	"github.com/tollgate-dev/tollgate/internal/apitest"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
)

// A sign-in with the old password that is under way while a password reset commits
// (bootstrap-admin taking an address back from whoever registered it) gets no session
// that outlives the reset. Before, sign-in checked the password it had read before the
// reset and then opened its session unconditionally: the reset revoked the sessions it
// found, and the squatter's new one, opened just after, survived it, a live session of
// an account the reset had just made a platform administrator.
func TestSignInDuringAPasswordResetGetsNoSession(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	u := e.SignUp(t, "squatter")
	ctx := context.Background()
	hash, err := password.Hash("the operator's own new password")
	if err != nil {
		t.Fatal(err)
	}
	reset := openTx(t, e)
	if _, err := platform.ProvisionAdmin(ctx, reset, u.Email, "Root", hash, typeid.New(typeid.User), apitest.Start); err != nil {
		t.Fatal(err)
	}
	done := make(chan *apitest.Resp, 1)
	go func() {
		done <- e.Do(t, "POST", "/v1/auth/sign-in", map[string]string{"email": u.Email, "password": apitest.Password})
	}()
	// The sign-in either waits for the reset (it must not open a session the reset
	// does not see) or, before the fix, answers at once.
	var r *apitest.Resp
	deadline := time.Now().Add(10 * time.Second)
	for r == nil {
		var waiting int
		if err := e.Store.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		select {
		case r = <-done:
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the sign-in neither answered nor waited for the reset")
		}
	}
	if err := reset.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if r == nil {
		r = <-done
	}
	if r.Status == http.StatusOK {
		var out struct{ Token string }
		if err := json.Unmarshal(r.Body, &out); err != nil {
			t.Fatal(err)
		}
		if me := e.Do(t, "GET", "/v1/me", nil, apitest.Session(out.Token)); me.Status != http.StatusUnauthorized {
			t.Fatalf("a session opened with the old password during the reset outlived it: GET /v1/me %d", me.Status)
		}
		return
	}
	if r.Status != http.StatusUnauthorized {
		t.Fatalf("sign-in with the old password during the reset: %d %s", r.Status, r.Body)
	}
	// The new password works.
	e.Do(t, "POST", "/v1/auth/sign-in", map[string]string{"email": u.Email, "password": "the operator's own new password"}).Expect(t, http.StatusOK)
}

// An API key asked for by a session that a password reset (or a sign-out) ends while
// the request waits is not minted: the session must still be live when the key is. Before,
// the session was checked only at authentication, so a squatter asking for keys over and
// over could have one authenticated before bootstrap-admin's reset and written after it
// had revoked the account's keys: a live key of an account the reset had just made a
// platform administrator.
func TestAPIKeyIsNotMintedBySessionEndedMeanwhile(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Squat")
	ctx := context.Background()
	// The key's request waits for the caller's member row (its lock of the caller)...
	blocker := openTx(t, e)
	if _, err := blocker.Exec(ctx, `SELECT 1 FROM members WHERE id = $1 FOR UPDATE`, o.MemberID); err != nil {
		t.Fatal(err)
	}
	done := make(chan *apitest.Resp, 1)
	go func() { done <- e.Do(t, "POST", "/v1/api-keys", map[string]string{"name": "later"}, o.As()...) }()
	awaitLockWaits(t, e, 1)
	// ...while the reset commits: it ends the session and revokes the keys it finds.
	hash, err := password.Hash("the operator's own new password")
	if err != nil {
		t.Fatal(err)
	}
	reset := openTx(t, e)
	if _, err := platform.ProvisionAdmin(ctx, reset, o.Email, "Root", hash, typeid.New(typeid.User), apitest.Start); err != nil {
		t.Fatal(err)
	}
	if err := reset.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := blocker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.Status == http.StatusCreated {
		var out struct{ Key string }
		if err := json.Unmarshal(r.Body, &out); err != nil {
			t.Fatal(err)
		}
		if me := e.Do(t, "GET", "/v1/me", nil, apitest.Key(out.Key)); me.Status != http.StatusUnauthorized {
			t.Fatalf("a key minted by a session the reset ended outlived it: GET /v1/me %d", me.Status)
		}
		return
	}
	r.ExpectError(t, http.StatusUnauthorized, "unauthorized")
	if n := count(t, e, "api_keys", "revoked_at IS NULL"); n != 0 {
		t.Fatalf("%d live keys after the reset", n)
	}
}
