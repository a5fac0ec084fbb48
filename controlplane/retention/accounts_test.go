package retention_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tollgate-dev/tollgate/controlplane/metrics"
	"github.com/tollgate-dev/tollgate/controlplane/retention"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/apitest"
	"github.com/tollgate-dev/tollgate/pkg/credential"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
)

// invite has by invite email as a member and returns the invitation's token.
func invite(t *testing.T, e *apitest.Env, by apitest.Member, email string) string {
	t.Helper()
	var out struct{ Token string }
	e.Do(t, "POST", "/v1/invitations", map[string]string{"email": email, "role": "member"}, by.As()...).
		Expect(t, http.StatusCreated).Decode(t, &out)
	return out.Token
}

func accept(t *testing.T, e *apitest.Env, u apitest.User, token string) *apitest.Resp {
	t.Helper()
	return e.Do(t, "POST", "/v1/invitations/accept", map[string]string{"token": token}, apitest.Session(u.Token))
}

// Sessions and invitations that ended (signed out, expired; accepted, expired) longer ago
// than the retention age are deleted; live ones and those that ended since stay, however
// old; a deleted invitation's token then answers what an unknown token answers (404
// invitation_not_found), and what the audit trail says of them stays. Before, retention
// never touched either table, and both grew with every sign-in and invitation for as long
// as the deployment ran.
func TestRetentionDeletesEndedSessionsAndInvitations(t *testing.T) {
	e := apitest.New(t)
	t0 := e.Clock.Now()
	count := func(sql string, args ...any) int64 {
		t.Helper()
		var n int64
		if err := e.Store.Pool.QueryRow(t.Context(), sql, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	day := 24 * time.Hour

	// Day 0: the owner's and bob's sign-up sessions (they expire on day 7), a session of
	// bob's signed out at once, an invitation accepted (A) and one never used (B): all
	// ended more than 90 days before day 100.
	owner := e.NewOrg(t, "acme")
	bob := e.SignUp(t, "bob")
	gone := e.SignIn(t, bob)
	e.Do(t, "POST", "/v1/auth/sign-out", nil, apitest.Session(gone.Token)).Expect(t, http.StatusNoContent)
	tokenA := invite(t, e, owner, bob.Email)
	accept(t, e, bob, tokenA).Expect(t, http.StatusOK)
	tokenB := invite(t, e, owner, "carol@example.test")
	// A session of bob's that lives 200 days: old, and live.
	oldLive, hash := credential.New(credential.SessionPrefix)
	if err := store.CreateSession(t.Context(), e.Store.Pool, store.Session{ID: typeid.New(typeid.Session), UserID: bob.ID, TokenHash: hash,
		AuthenticatedAt: t0, CreatedAt: t0, ExpiresAt: t0.Add(200 * day)}); err != nil {
		t.Fatal(err)
	}

	// Day 90: the owner signs in (that session expires on day 97) and invites carol
	// again (C: expires on day 97). Day 95: bob signs in and out. All ended within the
	// 90 days before day 100.
	e.Clock.Set(t0.Add(90 * day))
	owner.User = e.SignIn(t, owner.User)
	tokenC := invite(t, e, owner, "carol@example.test")
	e.Clock.Set(t0.Add(95 * day))
	recent := e.SignIn(t, bob)
	e.Do(t, "POST", "/v1/auth/sign-out", nil, apitest.Session(recent.Token)).Expect(t, http.StatusNoContent)

	// Day 100: the owner signs in, dave signs up, and the owner invites dave (D): live.
	e.Clock.Set(t0.Add(100 * day))
	owner.User = e.SignIn(t, owner.User)
	dave := e.SignUp(t, "dave")
	tokenD := invite(t, e, owner, dave.Email)

	// Before retention the ended invitations answer as ended ones.
	accept(t, e, dave, tokenA).ExpectError(t, http.StatusConflict, "invitation_used")
	accept(t, e, dave, tokenB).ExpectError(t, http.StatusConflict, "invitation_expired")
	sessions, invitations := count(`SELECT count(*) FROM sessions`), count(`SELECT count(*) FROM invitations`)
	if sessions != 8 || invitations != 4 {
		t.Fatalf("the test made %d sessions and %d invitations, want 8 and 4", sessions, invitations)
	}
	audited := count(`SELECT count(*) FROM audit_events WHERE action LIKE 'invitation.%'`)

	m := metrics.Discard()
	run := func(apply bool) retention.Report {
		t.Helper()
		r, err := retention.Run(t.Context(), retention.Deps{Store: e.Store, Clock: e.Clock, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: m},
			retention.Options{Age: retention.DefaultAge, Batch: 2, Apply: apply})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	preview := run(false)
	if preview.Sessions.Removed != 3 || preview.Invitations.Removed != 2 {
		t.Fatalf("the preview would remove %d session(s) and %d invitation(s), want 3 and 2", preview.Sessions.Removed, preview.Invitations.Removed)
	}
	if n, i := count(`SELECT count(*) FROM sessions`), count(`SELECT count(*) FROM invitations`); n != sessions || i != invitations {
		t.Fatalf("a preview deleted: %d sessions and %d invitations left of %d and %d", n, i, sessions, invitations)
	}

	r := run(true) // batches of 2: several per kind
	if r.Sessions.Removed != 3 || r.Sessions.Examined != 8 || r.Sessions.Kept[retention.KeptLive] != 3 || r.Sessions.Kept[retention.KeptRecent] != 2 ||
		r.Invitations.Removed != 2 || r.Invitations.Examined != 4 || r.Invitations.Kept[retention.KeptLive] != 1 || r.Invitations.Kept[retention.KeptRecent] != 1 {
		t.Fatalf("applied: sessions %+v, invitations %+v", r.Sessions, r.Invitations)
	}
	if n := count(`SELECT count(*) FROM sessions`); n != 5 {
		t.Fatalf("%d sessions left, want 5 (3 live, 2 ended within the age)", n)
	}
	if n := count(`SELECT count(*) FROM invitations`); n != 2 {
		t.Fatalf("%d invitations left, want 2 (C, ended within the age, and D, open)", n)
	}
	if n := count(`SELECT count(*) FROM audit_events WHERE action LIKE 'invitation.%'`); n != audited {
		t.Fatalf("the invitations' audit events went from %d to %d", audited, n)
	}
	if n := count(`SELECT count(*) FROM audit_events WHERE action = 'usage.retention.apply' AND (details->>'sessionsDeleted')::int = 3
		AND (details->>'invitationsDeleted')::int = 2`); n != 1 {
		t.Fatal("the applied run's audit event does not say what it deleted")
	}
	if s, i := testutil.ToFloat64(m.RetentionRemoved.WithLabelValues("session")), testutil.ToFloat64(m.RetentionRemoved.WithLabelValues("invitation")); s != 3 || i != 2 {
		t.Fatalf("tollgate_controlplane_retention_removed_total session %v, invitation %v; want 3 and 2", s, i)
	}

	// A deleted invitation's link answers what an unknown token answers.
	unknown := accept(t, e, dave, "tgi_nothing").ExpectError(t, http.StatusNotFound, "invitation_not_found")
	for name, tok := range map[string]string{"accepted": tokenA, "expired": tokenB} {
		if got := accept(t, e, dave, tok).ExpectError(t, http.StatusNotFound, "invitation_not_found"); got["message"] != unknown["message"] {
			t.Fatalf("the deleted %s invitation answers %v, an unknown token %v", name, got, unknown)
		}
	}
	accept(t, e, dave, tokenC).ExpectError(t, http.StatusConflict, "invitation_expired")
	accept(t, e, dave, tokenD).Expect(t, http.StatusOK)
	// Sessions: the deleted ones stay refused, the kept live ones work.
	for _, tok := range []string{gone.Token, bob.Token} {
		e.Do(t, "GET", "/v1/me", nil, apitest.Session(tok)).ExpectError(t, http.StatusUnauthorized, "unauthorized")
	}
	for _, tok := range []string{oldLive, owner.Token, dave.Token} {
		e.Do(t, "GET", "/v1/me", nil, apitest.Session(tok)).Expect(t, http.StatusOK)
	}

	again := run(true)
	if again.Sessions.Removed+again.Invitations.Removed != 0 {
		t.Fatalf("a second run removed %d session(s) and %d invitation(s)", again.Sessions.Removed, again.Invitations.Removed)
	}
	var out bytes.Buffer
	r.Write(&out)
	if s := out.String(); !strings.Contains(s, "ended sessions") || !strings.Contains(s, "ended invitations") {
		t.Fatalf("the summary does not list sessions and invitations:\n%s", s)
	}
}
