package httpapi_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/apitest"
)

// activeOrganization reads the user's active organization ("" for none).
func activeOrganization(t *testing.T, e *apitest.Env, userID string) string {
	t.Helper()
	var org *string
	if err := e.Store.Pool.QueryRow(context.Background(), `SELECT active_organization_id FROM users WHERE id = $1`, userID).Scan(&org); err != nil {
		t.Fatal(err)
	}
	if org == nil {
		return ""
	}
	return *org
}

// A user removed from their active organization while they accept an invitation to
// another one ends up acting in the one they joined: the acceptance decides whether to
// make it active on the user's row as it is then. Before, it decided on the row read at
// authentication (still naming the organization they were being removed from), so the
// removal cleared it and the acceptance left it empty: the user's sessions acted as
// nobody (the gateway's 401) until they switched by hand.
func TestAcceptWhileRemovedFromTheActiveOrganization(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	ctx := context.Background()
	acme := e.NewOrg(t, "Acme")
	beta := e.NewOrg(t, "Beta")
	bob := e.AddMember(t, acme, "bob", "member") // Acme is his active organization
	var inv struct{ Token string }
	e.Do(t, "POST", "/v1/invitations", map[string]string{"email": bob.Email, "role": "member"}, beta.As()...).
		Expect(t, http.StatusCreated).Decode(t, &inv)

	// The acceptance authenticates (Acme active), then waits for the invitation's row.
	hold := openTx(t, e)
	if _, err := hold.Exec(ctx, `SELECT 1 FROM invitations WHERE organization_id = $1 FOR UPDATE`, beta.OrgID); err != nil {
		t.Fatal(err)
	}
	answered := make(chan *apitest.Resp, 1)
	go func() {
		answered <- e.Do(t, "POST", "/v1/invitations/accept", map[string]string{"token": inv.Token}, apitest.Session(bob.Token))
	}()
	awaitLockWaits(t, e, 1)
	e.Do(t, "DELETE", "/v1/members/"+bob.MemberID, nil, acme.As()...).Expect(t, http.StatusNoContent)
	if err := hold.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	(<-answered).Expect(t, http.StatusOK)
	if got := activeOrganization(t, e, bob.ID); got != beta.OrgID {
		t.Fatalf("active organization %q after joining Beta (%s), removed from Acme", got, beta.OrgID)
	}
}

// A user who switches to another organization while being removed from their active
// one keeps the one they switched to: the removal clears the active organization only
// while it still names the organization they are removed from. Before, it cleared it on
// what it had read before the switch committed, and the user's sessions acted as nobody.
func TestSwitchElsewhereWhileRemoved(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	ctx := context.Background()
	acme := e.NewOrg(t, "Acme")
	bob := e.AddMember(t, acme, "bob", "member") // Acme is his active organization
	home := e.CreateOrg(t, bob.User, "Home")
	if got := activeOrganization(t, e, bob.ID); got != acme.OrgID {
		t.Fatalf("active organization %q, want Acme", got)
	}

	// The removal reads the user, then waits for their row, which the switch holds.
	hold := openTx(t, e)
	if _, err := hold.Exec(ctx, `SELECT 1 FROM users WHERE id = $1 FOR UPDATE`, bob.ID); err != nil {
		t.Fatal(err)
	}
	answered := make(chan *apitest.Resp, 1)
	go func() { answered <- e.Do(t, "DELETE", "/v1/members/"+bob.MemberID, nil, acme.As()...) }()
	awaitLockWaits(t, e, 1)
	// The switch the user made meanwhile (PUT /v1/me/active-organization writes this).
	if _, err := hold.Exec(ctx, `UPDATE users SET active_organization_id = $2 WHERE id = $1`, bob.ID, home.OrgID); err != nil {
		t.Fatal(err)
	}
	if err := hold.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	(<-answered).Expect(t, http.StatusNoContent)
	if got := activeOrganization(t, e, bob.ID); got != home.OrgID {
		t.Fatalf("active organization %q after switching to Home (%s)", got, home.OrgID)
	}
}
