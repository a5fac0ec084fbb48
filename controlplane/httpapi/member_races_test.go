package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/internal/apitest"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// concurrently runs the requests at the same moment and answers their responses in
// order.
func concurrently(reqs ...func() *apitest.Resp) []*apitest.Resp {
	out := make([]*apitest.Resp, len(reqs))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, req := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out[i] = req()
		}()
	}
	close(start)
	wg.Wait()
	return out
}

// noServerErrors fails the test on any 5xx among rs.
func noServerErrors(t *testing.T, round int, rs ...*apitest.Resp) {
	t.Helper()
	for _, r := range rs {
		if r.Status >= 500 {
			t.Fatalf("round %d: answered %d: %s", round, r.Status, r.Body)
		}
	}
}

// expectStatus fails the test unless r answered status with the given error code
// (code "" for a success).
func expectStatus(t *testing.T, round int, r *apitest.Resp, status int, code string) {
	t.Helper()
	if r.Status != status || (code != "" && r.JSON(t)["error"] != code) {
		t.Fatalf("round %d: answered %d, want %d %s: %s", round, r.Status, status, code, r.Body)
	}
}

// writeWhileRemoved sends write (a request that stores a row naming member m) at the
// same moment as m's removal by owner, and checks their answers: no 5xx, the removal
// 204, and the write either its success (written) or refused as coming too late (404
// with refusedCode).
func writeWhileRemoved(t *testing.T, e *apitest.Env, round int, owner, m apitest.Member, write func() *apitest.Resp, written int, refusedCode string) {
	t.Helper()
	rs := concurrently(write, func() *apitest.Resp { return e.Do(t, "DELETE", "/v1/members/"+m.MemberID, nil, owner.As()...) })
	noServerErrors(t, round, rs...)
	if rs[0].Status != written {
		expectStatus(t, round, rs[0], http.StatusNotFound, refusedCode)
	}
	expectStatus(t, round, rs[1], http.StatusNoContent, "")
}

// Two invitations of one user to one organization, accepted at the same moment: one
// joins, the other is 409 already_member (as when accepted one after the other) and
// stays unused.
func TestAcceptTwoInvitationsConcurrently(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	for round := range 10 {
		u := e.SignUp(t, "ann")
		var tokens [2]string
		for i := range tokens {
			var inv struct{ Token string }
			e.Do(t, "POST", "/v1/invitations", map[string]string{"email": u.Email, "role": "member"}, owner.As()...).
				Expect(t, http.StatusCreated).Decode(t, &inv)
			tokens[i] = inv.Token
		}
		accept := func(token string) func() *apitest.Resp {
			return func() *apitest.Resp {
				return e.Do(t, "POST", "/v1/invitations/accept", map[string]string{"token": token}, apitest.Session(u.Token))
			}
		}
		rs := concurrently(accept(tokens[0]), accept(tokens[1]))
		noServerErrors(t, round, rs...)
		if rs[0].Status == http.StatusOK {
			expectStatus(t, round, rs[1], http.StatusConflict, "already_member")
		} else {
			expectStatus(t, round, rs[0], http.StatusConflict, "already_member")
			expectStatus(t, round, rs[1], http.StatusOK, "")
		}
		if n := count(t, e, "members", "user_id = $1 AND organization_id = $2", u.ID, owner.OrgID); n != 1 {
			t.Fatalf("round %d: %d memberships, want 1", round, n)
		}
		// The refused acceptance changed nothing: its invitation is still unused.
		if n := count(t, e, "invitations", "email_normalized = $1 AND accepted_at IS NULL", u.Email); n != 1 {
			t.Fatalf("round %d: %d unused invitations, want 1", round, n)
		}
	}
}

// A member added to a team while being removed ends up out of the team: either the
// add commits first and the removal empties their teams, or the removal commits first
// and the add is 404 member_not_found.
func TestAddTeamMemberWhileRemoved(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	var team struct{ ID string }
	e.Do(t, "POST", "/v1/teams", map[string]string{"name": "Core"}, owner.As()...).Expect(t, http.StatusCreated).Decode(t, &team)
	for round := range 30 {
		m := e.AddMember(t, owner, fmt.Sprintf("m%d", round), "member")
		writeWhileRemoved(t, e, round, owner, m, func() *apitest.Resp {
			return e.Do(t, "POST", "/v1/teams/"+team.ID+"/members", map[string]string{"memberId": m.MemberID}, owner.As()...)
		}, http.StatusOK, "member_not_found")
		if n := count(t, e, "team_members tm JOIN members m ON m.id = tm.member_id", "m.removed_at IS NOT NULL"); n != 0 {
			t.Fatalf("round %d: %d team memberships of removed members", round, n)
		}
	}
}

// An API key created while its member is removed ends up revoked: either the creation
// commits first and the removal revokes it, or the removal commits first and the
// creation is refused as from a removed member (404 organization_not_found).
func TestCreateAPIKeyWhileRemoved(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	for round := range 30 {
		m := e.AddMember(t, owner, fmt.Sprintf("m%d", round), "member")
		writeWhileRemoved(t, e, round, owner, m, func() *apitest.Resp {
			return e.Do(t, "POST", "/v1/api-keys", map[string]string{"name": "laptop"}, m.As()...)
		}, http.StatusCreated, "organization_not_found")
		if n := count(t, e, "api_keys k JOIN members m ON m.id = k.member_id", "m.removed_at IS NOT NULL AND k.revoked_at IS NULL"); n != 0 {
			t.Fatalf("round %d: %d live API keys of removed members", round, n)
		}
	}
}

// A user who makes an organization their active one while being removed from it does
// not keep it active: either the switch commits first and the removal clears it, or the
// removal commits first and the switch is 404 organization_not_found.
func TestSetActiveOrganizationWhileRemoved(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	for round := range 30 {
		u := e.SignUp(t, fmt.Sprintf("m%d", round))
		e.CreateOrg(t, u, fmt.Sprintf("Home %d", round)) // their active organization
		m := e.Join(t, owner, u, "member")
		writeWhileRemoved(t, e, round, owner, m, func() *apitest.Resp {
			return e.Do(t, "PUT", "/v1/me/active-organization", map[string]string{"organizationId": owner.OrgID}, apitest.Session(u.Token))
		}, http.StatusOK, "organization_not_found")
		if n := count(t, e, "users u", `u.id = $1 AND u.active_organization_id IS NOT NULL AND NOT EXISTS (
			SELECT 1 FROM members m WHERE m.user_id = u.id AND m.organization_id = u.active_organization_id AND m.removed_at IS NULL)`, u.ID); n != 0 {
			t.Fatalf("round %d: the user's active organization is one they were removed from", round)
		}
	}
}

// Two owners demoting each other at the same moment leave one owner: the later
// demotion sees the earlier and is 409 last_owner (or 403 when its caller was already
// demoted when it signed in).
func TestDemoteTwoOwnersConcurrently(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	for round := range 10 {
		a := e.NewOrg(t, fmt.Sprintf("Acme %d", round))
		b := e.AddMember(t, a, "bob", "admin")
		e.Do(t, "PATCH", "/v1/members/"+b.MemberID, map[string]string{"role": "owner"}, a.As()...).Expect(t, http.StatusOK)
		demote := func(by, target apitest.Member) func() *apitest.Resp {
			return func() *apitest.Resp {
				return e.Do(t, "PATCH", "/v1/members/"+target.MemberID, map[string]string{"role": "admin"}, by.As()...)
			}
		}
		rs := concurrently(demote(a, b), demote(b, a))
		noServerErrors(t, round, rs...)
		loser := rs[1]
		if rs[0].Status != http.StatusOK {
			expectStatus(t, round, rs[1], http.StatusOK, "")
			loser = rs[0]
		}
		if loser.Status != http.StatusForbidden {
			expectStatus(t, round, loser, http.StatusConflict, "last_owner")
		}
		if n := count(t, e, "members", "organization_id = $1 AND role = 'owner' AND removed_at IS NULL", a.OrgID); n != 1 {
			t.Fatalf("round %d: %d owners, want 1", round, n)
		}
	}
}

// An extension request submitted while its member is removed does not stay pending:
// either the submit commits first and the removal's fence expires it, or the removal
// commits first and the submit is refused as from a removed member (404
// organization_not_found).
func TestSubmitResetRequestWhileRemoved(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	p := dayPolicy(t, e, owner, "Daily", "0.00001", nil)
	assign(t, e, owner, p.ID, map[string]any{"organization": true})
	for round := range 30 {
		m := e.AddMember(t, owner, fmt.Sprintf("m%d", round), "member")
		setUsed(t, e, m, window.Day, 10)
		writeWhileRemoved(t, e, round, owner, m, func() *apitest.Resp {
			return submit(t, e, m, bucketID(e, m, window.Day), "please")
		}, http.StatusOK, "organization_not_found")
		if n := count(t, e, "usage_reset_requests r JOIN members m ON m.id = r.member_id", "m.removed_at IS NOT NULL AND r.status = 'pending'"); n != 0 {
			t.Fatalf("round %d: %d pending extension requests of removed members", round, n)
		}
	}
}

// holdOrganization locks the organization's row (as member role changes and removals do)
// until the returned transaction ends; statements of the test run in it.
func holdOrganization(t *testing.T, e *apitest.Env, orgID string) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx := openTx(t, e)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM organizations WHERE id = $1 FOR NO KEY UPDATE`, orgID); err != nil {
		t.Fatal(err)
	}
	return tx
}

// A role change or removal acts with the authority its caller holds when it runs, not
// the one they held when their request was admitted: an owner demoted (or removed) while
// their request waits for the organization's lock can no longer make someone an owner,
// remove a member or change a role. Before, the role read at authentication was trusted,
// so a demoted owner's request in flight promoted an accomplice to owner, and a removed
// owner's removed a member.
func TestMemberChangesUseTheCallersRoleAtTheirTime(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	ctx := context.Background()
	cases := []struct {
		name      string
		demote    string // what happens to the caller meanwhile
		request   func(caller, target apitest.Member) *apitest.Resp
		status    int
		code      string
		unchanged string // a count(*) of members that must stay 1
	}{
		{"demoted owner promotes", `UPDATE members SET role = 'admin' WHERE id = $1`,
			func(caller, target apitest.Member) *apitest.Resp {
				return e.Do(t, "PATCH", "/v1/members/"+target.MemberID, map[string]string{"role": "owner"}, caller.As()...)
			}, http.StatusForbidden, "forbidden", "id = $1 AND role = 'member'"},
		{"demoted admin changes a role", `UPDATE members SET role = 'member' WHERE id = $1`,
			func(caller, target apitest.Member) *apitest.Resp {
				return e.Do(t, "PATCH", "/v1/members/"+target.MemberID, map[string]string{"role": "admin"}, caller.As()...)
			}, http.StatusForbidden, "forbidden", "id = $1 AND role = 'member'"},
		{"removed owner removes", `UPDATE members SET removed_at = now() WHERE id = $1`,
			func(caller, target apitest.Member) *apitest.Resp {
				return e.Do(t, "DELETE", "/v1/members/"+target.MemberID, nil, caller.As()...)
			}, http.StatusNotFound, "organization_not_found", "id = $1 AND removed_at IS NULL"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := e.NewOrg(t, "Acme")
			b := e.AddMember(t, a, "bob", "admin")
			e.Do(t, "PATCH", "/v1/members/"+b.MemberID, map[string]string{"role": "owner"}, a.As()...).Expect(t, http.StatusOK)
			target := e.AddMember(t, a, "cat", "member")

			hold := holdOrganization(t, e, a.OrgID)
			answered := make(chan *apitest.Resp, 1)
			go func() { answered <- tc.request(b, target) }()
			awaitLockWaits(t, e, 1)
			if _, err := hold.Exec(ctx, tc.demote, b.MemberID); err != nil {
				t.Fatal(err)
			}
			if err := hold.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			r := <-answered
			if r.Status != tc.status || r.JSON(t)["error"] != tc.code {
				t.Fatalf("answered %d %s, want %d %s", r.Status, r.Body, tc.status, tc.code)
			}
			if n := count(t, e, "members", tc.unchanged, target.MemberID); n != 1 {
				t.Fatal("the target was changed")
			}
		})
	}
}

// The writes that give lasting access, replacing a marketplace's grants and adding a
// member to a team (whose grants and usage-limit policies then reach them), act with
// the authority their caller holds when they run. An admin demoted to member, or
// removed, while the write waited for its marketplace's or team's lock is refused:
// before, the role read at authentication was trusted, and a demoted admin's request in
// flight gave an accomplice a marketplace's manager rank or a place in a team, which
// outlived the demotion.
func TestAccessWritesUseTheCallersRoleAtTheirTime(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	accomplice := e.AddMember(t, o, "acco", "member")
	mkt := newMarketplace(t, e, o, "Engineering")
	team := createTeam(t, e, o, "Research")
	changes := callerChanges
	writes := []struct {
		name    string
		lock    string // a lock the write waits for, after its caller was authenticated
		request func(admin apitest.Member) *apitest.Resp
		wrote   string // a count(*) of the rows it would have written
	}{
		{"marketplace access", `SELECT 1 FROM marketplaces WHERE id = '` + mkt + `' FOR UPDATE`, func(admin apitest.Member) *apitest.Resp {
			return e.Do(t, "PUT", "/v1/marketplaces/"+mkt+"/access",
				map[string]any{"grants": []map[string]any{memberGrant(accomplice, "manager")}}, admin.As()...)
		}, "marketplace_grants"},
		{"team member", `SELECT 1 FROM teams WHERE id = '` + team + `' FOR UPDATE`, func(admin apitest.Member) *apitest.Resp {
			return e.Do(t, "POST", "/v1/teams/"+team+"/members", map[string]string{"memberId": accomplice.MemberID}, admin.As()...)
		}, "team_members"},
	}
	for _, ch := range changes {
		for _, w := range writes {
			t.Run(ch.name+" "+w.name, func(t *testing.T) {
				admin := e.AddMember(t, o, "adam", "admin")
				refusedAfterCallerChange(t, e, ch, admin, false, func() *apitest.Resp { return w.request(admin) }, w.lock)
				if n := count(t, e, w.wrote, "member_id = $1", accomplice.MemberID); n != 0 {
					t.Fatalf("%d rows of %s written for the accomplice", n, w.wrote)
				}
			})
		}
	}
}

// callerChanges are what happens to an admin caller while their write waits, and what
// the write must then answer: demoted, 403; removed, 404.
type callerChange struct {
	name   string
	sql    string // what happens to the caller meanwhile
	status int
	code   string
}

var callerChanges = []callerChange{
	{"demoted", `UPDATE members SET role = 'member' WHERE id = $1`, http.StatusForbidden, "forbidden"},
	{"removed", `UPDATE members SET removed_at = now() WHERE id = $1`, http.StatusNotFound, "organization_not_found"},
}

// The changes of what a marketplace distributes (adding and removing its plugins) and
// of a plugin itself (editing, deleting it, which takes it out of every marketplace)
// act with the role their caller holds when they run, as the access writes above do.
// An admin's rank on every marketplace comes from their role alone; one demoted to
// member (with no grant) or removed while the write waited, for the marketplace's lock
// behind a change of its grants or for the plugin's row, is refused and changes
// nothing. Before, the role read at authentication was trusted: the demoted admin's
// request in flight still added, removed, edited or deleted the plugin.
func TestPluginWritesUseTheCallersRoleAtTheirTime(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	writes := []struct {
		name    string
		lock    string // a lock the write waits for, after its caller was authenticated ('%s': the fixture's row)
		onMkt   bool   // the lock is the marketplace's, else the plugin's
		request func(admin apitest.Member, mkt, plugin string) *apitest.Resp
		changed func(t *testing.T, mkt, plugin string) bool
	}{
		{"add plugin", `SELECT 1 FROM marketplaces WHERE id = $1 FOR UPDATE`, true, func(admin apitest.Member, mkt, plugin string) *apitest.Resp {
			return addPlugin(t, e, mkt, map[string]any{"pluginId": plugin}, admin.As()...)
		}, func(t *testing.T, mkt, plugin string) bool {
			return count(t, e, "marketplace_plugins", "marketplace_id = $1 AND plugin_id = $2", mkt, plugin) != 0
		}},
		{"remove plugin", `SELECT 1 FROM marketplaces WHERE id = $1 FOR UPDATE`, true, func(admin apitest.Member, mkt, plugin string) *apitest.Resp {
			return e.Do(t, "DELETE", "/v1/marketplaces/"+mkt+"/plugins/"+plugin, nil, admin.As()...)
		}, func(t *testing.T, mkt, plugin string) bool {
			return count(t, e, "marketplace_plugins", "marketplace_id = $1 AND plugin_id = $2 AND removed_at IS NULL", mkt, plugin) != 1
		}},
		{"update plugin", `SELECT 1 FROM plugins WHERE id = $1 FOR UPDATE`, false, func(admin apitest.Member, mkt, plugin string) *apitest.Resp {
			return e.Do(t, "PATCH", "/v1/plugins/"+plugin, map[string]any{"name": "Renamed"}, admin.As()...)
		}, func(t *testing.T, mkt, plugin string) bool {
			return count(t, e, "plugins", "id = $1 AND name = 'Renamed'", plugin) != 0
		}},
		{"delete plugin", `SELECT 1 FROM plugins WHERE id = $1 FOR UPDATE`, false, func(admin apitest.Member, mkt, plugin string) *apitest.Resp {
			return e.Do(t, "DELETE", "/v1/plugins/"+plugin, nil, admin.As()...)
		}, func(t *testing.T, mkt, plugin string) bool {
			return count(t, e, "plugins", "id = $1 AND status = 'deleted'", plugin) != 0
		}},
	}
	for _, ch := range callerChanges {
		for _, w := range writes {
			t.Run(ch.name+" "+w.name, func(t *testing.T) {
				mkt := newMarketplace(t, e, o, "Engineering "+ch.name+" "+w.name)
				plugin := newPlugin(t, e, o, "Lint "+ch.name+" "+w.name)
				if w.name != "add plugin" {
					addPlugin(t, e, mkt, map[string]any{"pluginId": plugin}, o.As()...).Expect(t, http.StatusCreated)
				}
				admin := e.AddMember(t, o, "adam", "admin")
				target := plugin
				if w.onMkt {
					target = mkt
				}
				refusedAfterCallerChange(t, e, ch, admin, false, func() *apitest.Resp { return w.request(admin, mkt, plugin) },
					w.lock, target)
				if w.changed(t, mkt, plugin) {
					t.Fatal("the write went through")
				}
			})
		}
	}
}

// Taking a member out of a team and deleting a team change who the team's grants and
// usage-limit policies reach (the entitlement fence runs for them): they too act with
// the role their caller holds when they run. An admin demoted or removed while the
// write waited for the team's lock is refused and the team stays as it was; before,
// the demoted admin's request in flight still took the member out or deleted the team.
func TestTeamWritesUseTheCallersRoleAtTheirTime(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	bob := e.AddMember(t, o, "bob", "member")
	writes := []struct {
		name    string
		request func(admin apitest.Member, team string) *apitest.Resp
		changed func(t *testing.T, team string) bool
	}{
		{"remove team member", func(admin apitest.Member, team string) *apitest.Resp {
			return e.Do(t, "DELETE", "/v1/teams/"+team+"/members/"+bob.MemberID, nil, admin.As()...)
		}, func(t *testing.T, team string) bool {
			return count(t, e, "team_members", "team_id = $1 AND member_id = $2", team, bob.MemberID) != 1
		}},
		{"delete team", func(admin apitest.Member, team string) *apitest.Resp {
			return e.Do(t, "DELETE", "/v1/teams/"+team, nil, admin.As()...)
		}, func(t *testing.T, team string) bool {
			return count(t, e, "teams", "id = $1 AND deleted_at IS NULL", team) != 1
		}},
	}
	for _, ch := range callerChanges {
		for _, w := range writes {
			t.Run(ch.name+" "+w.name, func(t *testing.T) {
				team := createTeam(t, e, o, "Research "+ch.name+" "+w.name, bob)
				admin := e.AddMember(t, o, "adam", "admin")
				refusedAfterCallerChange(t, e, ch, admin, false, func() *apitest.Resp { return w.request(admin, team) },
					`SELECT 1 FROM teams WHERE id = $1 FOR UPDATE`, team)
				if w.changed(t, team) {
					t.Fatal("the write went through")
				}
			})
		}
	}
}

// refusedAfterCallerChange races request, an owner's or admin's write, with ch happening
// to its caller admin: a transaction holds lock (with lockArgs), which the write waits
// for, and ch commits before the write goes on, either with the lock (changeFirst: the
// change and the lock in one transaction) or on its own while the write waits. The
// write must then answer ch's refusal.
func refusedAfterCallerChange(t *testing.T, e *apitest.Env, ch callerChange, admin apitest.Member, changeFirst bool,
	request func() *apitest.Resp, lock string, lockArgs ...any) {
	t.Helper()
	ctx := context.Background()
	hold := openTx(t, e)
	if changeFirst {
		if _, err := hold.Exec(ctx, ch.sql, admin.MemberID); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := hold.Exec(ctx, lock, lockArgs...); err != nil {
		t.Fatal(err)
	}
	answered := make(chan *apitest.Resp, 1)
	go func() { answered <- request() }()
	awaitLockWaits(t, e, 1)
	if !changeFirst {
		if _, err := e.Store.Pool.Exec(ctx, ch.sql, admin.MemberID); err != nil {
			t.Fatal(err)
		}
	}
	if err := hold.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if r := <-answered; r.Status != ch.status || r.JSON(t)["error"] != ch.code {
		t.Fatalf("answered %d %s, want %d %s", r.Status, r.Body, ch.status, ch.code)
	}
}
