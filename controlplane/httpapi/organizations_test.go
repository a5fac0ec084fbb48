package httpapi_test

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/apitest"
)

func TestCreateOrganization(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	u := e.SignUp(t, "ann")
	var out struct {
		Organization struct{ ID, Slug string }
		Member       struct{ Role string }
	}
	e.Do(t, "POST", "/v1/organizations", map[string]string{"name": "  Acme Rockets!  "}, apitest.Session(u.Token)).
		Expect(t, http.StatusCreated).Decode(t, &out)
	if out.Organization.Slug != "acme-rockets" || out.Member.Role != "owner" {
		t.Fatalf("created %+v", out)
	}
	// A derived slug that collides is made unique; an explicit one is refused.
	e.Do(t, "POST", "/v1/organizations", map[string]string{"name": "Acme Rockets"}, apitest.Session(u.Token)).Expect(t, http.StatusCreated)
	e.Do(t, "POST", "/v1/organizations", map[string]string{"name": "X", "slug": "acme-rockets"}, apitest.Session(u.Token)).
		ExpectError(t, http.StatusConflict, "slug_taken")
	for _, bad := range []map[string]any{{"name": ""}, {"name": "X", "slug": "Bad Slug"}, {"name": "X", "slug": "-x"}, {"name": 5}, {}} {
		e.Do(t, "POST", "/v1/organizations", bad, apitest.Session(u.Token)).ExpectError(t, http.StatusBadRequest, "invalid_request")
	}
	if n := count(t, e, "organizations", "true"); n != 2 {
		t.Fatalf("%d organizations, want 2", n)
	}
	o := apitest.Member{User: u, OrgID: out.Organization.ID}
	key := e.APIKey(t, o)
	e.Do(t, "POST", "/v1/organizations", map[string]string{"name": "Via key"}, apitest.Key(key)).ExpectError(t, http.StatusForbidden, "forbidden")
	e.Do(t, "POST", "/v1/organizations", map[string]string{"name": "Anon"}).ExpectError(t, http.StatusUnauthorized, "unauthorized")

	var list struct{ Organizations []struct{ ID string } }
	e.Do(t, "GET", "/v1/organizations", nil, apitest.Session(u.Token)).Expect(t, 200).Decode(t, &list)
	if len(list.Organizations) != 2 {
		t.Fatalf("session lists %d organizations", len(list.Organizations))
	}
	e.Do(t, "GET", "/v1/organizations", nil, apitest.Key(key)).Expect(t, 200).Decode(t, &list)
	if len(list.Organizations) != 1 || list.Organizations[0].ID != o.OrgID {
		t.Fatalf("key lists %+v", list)
	}
}

// TestOrganizationsOfOneNameEachGetASlug: many organizations of one name each get a
// slug of it, the first the name's own, the others the name and a random suffix, all
// distinct and valid: the derived slug's collisions are never the creator's problem. (A
// single suffix of 4 hex digits was tried before: a few hundred organizations of one
// name then met a collision of suffixes, answered 409 slug_taken.)
func TestOrganizationsOfOneNameEachGetASlug(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	u := e.SignUp(t, "ann")
	const n = 300
	seen := map[string]bool{}
	suffixed := regexp.MustCompile(`^acme-[0-9a-f]{6}$`)
	for i := range n {
		var out struct{ Organization struct{ Slug string } }
		e.Do(t, "POST", "/v1/organizations", map[string]string{"name": "Acme"}, apitest.Session(u.Token)).
			Expect(t, http.StatusCreated).Decode(t, &out)
		slug := out.Organization.Slug
		if seen[slug] || (i == 0) != (slug == "acme") || i > 0 && !suffixed.MatchString(slug) {
			t.Fatalf("organization %d of the name: slug %q (seen before: %v)", i+1, slug, seen[slug])
		}
		seen[slug] = true
	}
}

func TestInvitations(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	member := e.AddMember(t, o, "bob", "member")
	admin := e.AddMember(t, o, "cat", "admin")
	if member.Role != "member" || admin.Role != "admin" {
		t.Fatalf("roles %q %q", member.Role, admin.Role)
	}

	// Only owners and admins invite; the role check comes before body validation.
	e.Do(t, "POST", "/v1/invitations", map[string]string{"bogus": "x"}, member.As()...).ExpectError(t, http.StatusForbidden, "forbidden")
	e.Do(t, "POST", "/v1/invitations", map[string]string{"email": "x@example.test", "role": "owner"}, admin.As()...).
		ExpectError(t, http.StatusBadRequest, "invalid_request")
	e.Do(t, "POST", "/v1/invitations", map[string]string{"email": member.Email, "role": "member"}, admin.As()...).
		ExpectError(t, http.StatusConflict, "already_member")

	dan := e.SignUp(t, "dan")
	eve := e.SignUp(t, "eve")
	var inv struct{ Token string }
	e.Do(t, "POST", "/v1/invitations", map[string]string{"email": dan.Email, "role": "member"}, admin.As()...).
		Expect(t, http.StatusCreated).Decode(t, &inv)
	e.Do(t, "POST", "/v1/invitations/accept", map[string]string{"token": inv.Token}, apitest.Session(eve.Token)).
		ExpectError(t, http.StatusForbidden, "forbidden")
	e.Do(t, "POST", "/v1/invitations/accept", map[string]string{"token": "tgi_unknown"}, apitest.Session(dan.Token)).
		ExpectError(t, http.StatusNotFound, "invitation_not_found")
	e.Do(t, "POST", "/v1/invitations/accept", map[string]string{"token": inv.Token}, apitest.Session(dan.Token)).Expect(t, http.StatusOK)
	e.Do(t, "POST", "/v1/invitations/accept", map[string]string{"token": inv.Token}, apitest.Session(dan.Token)).
		ExpectError(t, http.StatusConflict, "invitation_used")

	e.Do(t, "POST", "/v1/invitations", map[string]string{"email": eve.Email, "role": "member"}, admin.As()...).
		Expect(t, http.StatusCreated).Decode(t, &inv)
	e.Clock.Advance(7 * 24 * time.Hour)
	eve = e.SignIn(t, eve) // her first session expired too
	e.Do(t, "POST", "/v1/invitations/accept", map[string]string{"token": inv.Token}, apitest.Session(eve.Token)).
		ExpectError(t, http.StatusConflict, "invitation_expired")
	if n := count(t, e, "members", "true"); n != 4 {
		t.Fatalf("%d members, want 4 (owner, bob, cat, dan)", n)
	}
}

// TestInvitationEndsWithItsInvitersAuthority: an invitation carries the authority of the
// owner or admin who issued it. Once they are removed, or demoted to a role that may not
// invite (member), accepting it answers what an expired invitation answers (409
// invitation_expired) and writes nothing: a removed admin could otherwise come back, as
// an admin, through an invitation they had sent to an address of their own. It is
// checked at acceptance: an inviter promoted back may again, and a member promoted to
// owner still may.
func TestInvitationEndsWithItsInvitersAuthority(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	mallory := e.AddMember(t, owner, "mallory", "admin")
	ada := e.AddMember(t, owner, "ada", "admin")
	cat := e.AddMember(t, owner, "cat", "admin")
	invite := func(by apitest.Member, role string) (apitest.User, string) {
		u := e.SignUp(t, "guest")
		var inv struct{ Token string }
		e.Do(t, "POST", "/v1/invitations", map[string]string{"email": u.Email, "role": role}, by.As()...).
			Expect(t, http.StatusCreated).Decode(t, &inv)
		return u, inv.Token
	}
	accept := func(u apitest.User, token string) *apitest.Resp {
		return e.Do(t, "POST", "/v1/invitations/accept", map[string]string{"token": token}, apitest.Session(u.Token))
	}
	expired := func(u apitest.User, token string) {
		t.Helper()
		body := accept(u, token).ExpectError(t, http.StatusConflict, "invitation_expired")
		if body["message"] != "This invitation has expired; ask for a new one." {
			t.Fatalf("message %q, want the expired invitation's", body["message"])
		}
	}

	malloryAlt, asAdmin := invite(mallory, "admin")
	guest, asMember := invite(mallory, "member")
	dan, ofAda := invite(ada, "member")
	eve, ofCat := invite(cat, "admin")
	members := count(t, e, "members", "removed_at IS NULL")
	accepted := count(t, e, "invitations", "accepted_at IS NOT NULL")

	// Removed: neither of their invitations admits anyone.
	e.Do(t, "DELETE", "/v1/members/"+mallory.MemberID, nil, owner.As()...).Expect(t, http.StatusNoContent)
	members--
	expired(malloryAlt, asAdmin)
	expired(guest, asMember)
	// Demoted to member: theirs neither.
	e.Do(t, "PATCH", "/v1/members/"+ada.MemberID, map[string]string{"role": "member"}, owner.As()...).Expect(t, http.StatusOK)
	expired(dan, ofAda)
	if n := count(t, e, "members", "removed_at IS NULL"); n != members {
		t.Fatalf("%d active members, want %d: a refused acceptance wrote", n, members)
	}
	if n := count(t, e, "invitations", "accepted_at IS NOT NULL"); n != accepted {
		t.Fatalf("%d invitations accepted, want %d", n, accepted)
	}

	// Promoted back, the inviter's invitation admits again; an admin made owner keeps theirs.
	e.Do(t, "PATCH", "/v1/members/"+ada.MemberID, map[string]string{"role": "admin"}, owner.As()...).Expect(t, http.StatusOK)
	accept(dan, ofAda).Expect(t, http.StatusOK)
	e.Do(t, "PATCH", "/v1/members/"+cat.MemberID, map[string]string{"role": "owner"}, owner.As()...).Expect(t, http.StatusOK)
	accept(eve, ofCat).Expect(t, http.StatusOK)
}

// TestRemovalEndsEarlierInvitations: removing a member ends every invitation to them that
// was issued before the removal. An admin who sent an invitation twice (a resend), or
// two admins who each invited the same person, left one unused after the person joined;
// once an owner removed them, that leftover token brought them straight back, as
// whatever role it named, with nobody inviting them again. It now answers what an
// expired invitation answers and writes nothing; an invitation issued after the removal
// still admits them.
func TestRemovalEndsEarlierInvitations(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	admin := e.AddMember(t, owner, "cat", "admin")
	bob := e.SignUp(t, "bob")
	invite := func(role string) string {
		var inv struct{ Token string }
		e.Do(t, "POST", "/v1/invitations", map[string]string{"email": bob.Email, "role": role}, admin.As()...).
			Expect(t, http.StatusCreated).Decode(t, &inv)
		return inv.Token
	}
	accept := func(token string) *apitest.Resp {
		return e.Do(t, "POST", "/v1/invitations/accept", map[string]string{"token": token}, apitest.Session(bob.Token))
	}
	first, leftover := invite("member"), invite("admin")
	e.Clock.Advance(time.Minute)
	var joined struct{ Member struct{ ID string } }
	accept(first).Expect(t, http.StatusOK).Decode(t, &joined)
	e.Clock.Advance(time.Minute)
	e.Do(t, "DELETE", "/v1/members/"+joined.Member.ID, nil, owner.As()...).Expect(t, http.StatusNoContent)
	e.Clock.Advance(time.Minute)

	members := count(t, e, "members", "organization_id = $1 AND removed_at IS NULL", owner.OrgID)
	body := accept(leftover).ExpectError(t, http.StatusConflict, "invitation_expired")
	if body["message"] != "This invitation has expired; ask for a new one." {
		t.Fatalf("message %q, want the expired invitation's", body["message"])
	}
	if n := count(t, e, "members", "organization_id = $1 AND removed_at IS NULL", owner.OrgID); n != members {
		t.Fatalf("%d active members, want %d: the removed member came back", n, members)
	}
	if n := count(t, e, "invitations", "accepted_at IS NOT NULL AND email_normalized = $1", strings.ToLower(bob.Email)); n != 1 {
		t.Fatalf("%d of their invitations accepted, want 1", n)
	}

	// Invited again after the removal: they may join.
	e.Clock.Advance(time.Minute)
	accept(invite("member")).Expect(t, http.StatusOK)
}

func TestMembers(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	admin := e.AddMember(t, o, "cat", "admin")
	bob := e.AddMember(t, o, "bob", "member")
	other := e.NewOrg(t, "Other")

	var list struct {
		Members []struct{ ID, Role, Email string }
	}
	e.Do(t, "GET", "/v1/members", nil, bob.As()...).Expect(t, 200).Decode(t, &list)
	if len(list.Members) != 3 {
		t.Fatalf("%d members", len(list.Members))
	}

	path := "/v1/members/" + bob.MemberID
	e.Do(t, "PATCH", path, map[string]string{"role": "admin"}, bob.As()...).ExpectError(t, http.StatusForbidden, "forbidden")
	e.Do(t, "PATCH", path, map[string]string{"role": "boss"}, admin.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
	e.Do(t, "PATCH", path, map[string]string{"role": "owner"}, admin.As()...).ExpectError(t, http.StatusForbidden, "forbidden")
	e.Do(t, "PATCH", "/v1/members/"+o.MemberID, map[string]string{"role": "member"}, admin.As()...).ExpectError(t, http.StatusForbidden, "forbidden")
	e.Do(t, "PATCH", "/v1/members/"+o.MemberID, map[string]string{"role": "member"}, o.As()...).ExpectError(t, http.StatusConflict, "last_owner")
	e.Do(t, "PATCH", "/v1/members/"+other.MemberID, map[string]string{"role": "member"}, o.As()...).ExpectError(t, http.StatusNotFound, "member_not_found")
	e.Do(t, "PATCH", "/v1/members/not-an-id", map[string]string{"role": "member"}, o.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
	var m struct{ Role string }
	e.Do(t, "PATCH", path, map[string]string{"role": "admin"}, admin.As()...).Expect(t, 200).Decode(t, &m)
	if m.Role != "admin" {
		t.Fatalf("role %q", m.Role)
	}
	e.Do(t, "PATCH", path, map[string]string{"role": "member"}, admin.As()...).Expect(t, 200)

	// Removal ends the membership and disables the member's keys.
	key := e.APIKey(t, bob)
	e.Do(t, "GET", "/v1/me", nil, apitest.Key(key)).Expect(t, 200)
	e.Do(t, "DELETE", "/v1/members/"+o.MemberID, nil, admin.As()...).ExpectError(t, http.StatusForbidden, "forbidden")
	e.Do(t, "DELETE", "/v1/members/"+o.MemberID, nil, o.As()...).ExpectError(t, http.StatusConflict, "last_owner")
	e.Do(t, "DELETE", path, nil, admin.As()...).Expect(t, http.StatusNoContent)
	e.Do(t, "GET", "/v1/me", nil, apitest.Key(key)).ExpectError(t, http.StatusUnauthorized, "unauthorized")
	e.Do(t, "GET", "/v1/members", nil, bob.As()...).ExpectError(t, http.StatusNotFound, "organization_not_found")
	e.Do(t, "DELETE", path, nil, admin.As()...).ExpectError(t, http.StatusNotFound, "member_not_found")
	// The removed user keeps their account; their active organization is cleared.
	var me struct{ ActiveOrganizationID *string }
	e.Do(t, "GET", "/v1/me", nil, apitest.Session(bob.Token)).Expect(t, 200).Decode(t, &me)
	if me.ActiveOrganizationID != nil {
		t.Fatalf("active organization still %v", *me.ActiveOrganizationID)
	}
	// A second owner can be removed by an owner.
	e.Do(t, "PATCH", "/v1/members/"+admin.MemberID, map[string]string{"role": "owner"}, o.As()...).Expect(t, 200)
	e.Do(t, "DELETE", "/v1/members/"+admin.MemberID, nil, o.As()...).Expect(t, http.StatusNoContent)
}

// TestOnlyOwnersTouchAnOwnerEvenWithoutAChange: a PATCH naming an owner's own role
// ("owner") changes nothing, but it is still a write of the owner role, which only owners
// make (API.md, the OpenAPI summary): an admin, by session or API key, is refused 403 as
// for any other role, where before the unchanged role was answered 200 before the rule
// was asked. An owner still gets 200, and a plain role left unchanged still answers 200.
func TestOnlyOwnersTouchAnOwnerEvenWithoutAChange(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	second := e.AddMember(t, o, "dee", "admin")
	e.Do(t, "PATCH", "/v1/members/"+second.MemberID, map[string]string{"role": "owner"}, o.As()...).Expect(t, http.StatusOK)
	admin := e.AddMember(t, o, "cat", "admin")
	bob := e.AddMember(t, o, "bob", "member")

	for _, as := range [][]apitest.Opt{admin.As(), {apitest.Key(e.APIKey(t, admin))}} {
		for _, owner := range []apitest.Member{o, second} {
			e.Do(t, "PATCH", "/v1/members/"+owner.MemberID, map[string]string{"role": "owner"}, as...).
				ExpectError(t, http.StatusForbidden, "forbidden")
		}
	}
	if n := count(t, e, "members", "organization_id = $1 AND role = 'owner' AND removed_at IS NULL", o.OrgID); n != 2 {
		t.Fatalf("%d owners, want 2", n)
	}
	e.Do(t, "PATCH", "/v1/members/"+second.MemberID, map[string]string{"role": "owner"}, o.As()...).Expect(t, http.StatusOK)
	e.Do(t, "PATCH", "/v1/members/"+bob.MemberID, map[string]string{"role": "member"}, admin.As()...).Expect(t, http.StatusOK)
}

func TestTeams(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	bob := e.AddMember(t, o, "bob", "member")
	other := e.NewOrg(t, "Other")

	e.Do(t, "POST", "/v1/teams", map[string]string{"name": "Research"}, bob.As()...).ExpectError(t, http.StatusForbidden, "forbidden")
	e.Do(t, "POST", "/v1/teams", map[string]string{"name": ""}, o.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
	var team struct {
		ID        string
		MemberIDs []string
	}
	e.Do(t, "POST", "/v1/teams", map[string]string{"name": "Research"}, o.As()...).Expect(t, http.StatusCreated).Decode(t, &team)
	e.Do(t, "POST", "/v1/teams", map[string]string{"name": "research"}, o.As()...).ExpectError(t, http.StatusConflict, "team_name_taken")

	members := "/v1/teams/" + team.ID + "/members"
	e.Do(t, "POST", members, map[string]string{"memberId": other.MemberID}, o.As()...).ExpectError(t, http.StatusNotFound, "member_not_found")
	e.Do(t, "POST", members, map[string]string{"memberId": "om_bad"}, o.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
	e.Do(t, "POST", members, map[string]string{"memberId": bob.MemberID}, o.As()...).Expect(t, 200).Decode(t, &team)
	e.Do(t, "POST", members, map[string]string{"memberId": bob.MemberID}, o.As()...).Expect(t, 200).Decode(t, &team)
	if len(team.MemberIDs) != 1 || team.MemberIDs[0] != bob.MemberID {
		t.Fatalf("team members %v", team.MemberIDs)
	}
	// Another organization cannot see or change the team.
	e.Do(t, "POST", members, map[string]string{"memberId": other.MemberID}, other.As()...).ExpectError(t, http.StatusNotFound, "team_not_found")
	e.Do(t, "DELETE", "/v1/teams/"+team.ID, nil, other.As()...).ExpectError(t, http.StatusNotFound, "team_not_found")

	var list struct {
		Teams []struct{ MemberIDs []string }
	}
	e.Do(t, "GET", "/v1/teams", nil, bob.As()...).Expect(t, 200).Decode(t, &list)
	if len(list.Teams) != 1 || len(list.Teams[0].MemberIDs) != 1 {
		t.Fatalf("teams %+v", list)
	}
	e.Do(t, "DELETE", members+"/"+bob.MemberID, nil, o.As()...).Expect(t, http.StatusNoContent)
	e.Do(t, "DELETE", members+"/"+bob.MemberID, nil, o.As()...).ExpectError(t, http.StatusNotFound, "team_member_not_found")
	e.Do(t, "DELETE", "/v1/teams/"+team.ID, nil, o.As()...).Expect(t, http.StatusNoContent)
	e.Do(t, "GET", "/v1/teams", nil, bob.As()...).Expect(t, 200).Decode(t, &list)
	if len(list.Teams) != 0 {
		t.Fatalf("deleted team still listed")
	}
	// The name is free again.
	e.Do(t, "POST", "/v1/teams", map[string]string{"name": "Research"}, o.As()...).Expect(t, http.StatusCreated)
}

func TestAPIKeys(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	bob := e.AddMember(t, o, "bob", "member")
	cat := e.AddMember(t, o, "cat", "member")
	ownerKey := e.APIKey(t, o)
	bobKey := e.APIKey(t, bob)
	e.APIKey(t, cat)

	e.Do(t, "POST", "/v1/api-keys", map[string]string{"name": "via key"}, apitest.Key(bobKey)).ExpectError(t, http.StatusForbidden, "forbidden")
	e.Do(t, "POST", "/v1/api-keys", map[string]any{"name": "x", "expiresInDays": 0}, bob.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")

	var list struct {
		APIKeys []struct{ ID, MemberID, Start string }
	}
	e.Do(t, "GET", "/v1/api-keys", nil, apitest.Key(bobKey)).Expect(t, 200).Decode(t, &list)
	if len(list.APIKeys) != 1 || list.APIKeys[0].MemberID != bob.MemberID || list.APIKeys[0].Start != bobKey[:8] {
		t.Fatalf("bob sees %+v", list.APIKeys)
	}
	bobKeyID := list.APIKeys[0].ID
	e.Do(t, "GET", "/v1/api-keys", nil, apitest.Key(ownerKey)).Expect(t, 200).Decode(t, &list)
	if len(list.APIKeys) != 3 {
		t.Fatalf("owner sees %d keys", len(list.APIKeys))
	}
	var catKeyID string
	for _, k := range list.APIKeys {
		if k.MemberID == cat.MemberID {
			catKeyID = k.ID
		}
	}
	// A member cannot revoke another member's key, and cannot learn it exists.
	e.Do(t, "DELETE", "/v1/api-keys/"+catKeyID, nil, bob.As()...).ExpectError(t, http.StatusNotFound, "api_key_not_found")
	e.Do(t, "DELETE", "/v1/api-keys/"+bobKeyID, nil, apitest.Key(bobKey)).Expect(t, http.StatusNoContent)
	e.Do(t, "GET", "/v1/me", nil, apitest.Key(bobKey)).ExpectError(t, http.StatusUnauthorized, "unauthorized")
	e.Do(t, "DELETE", "/v1/api-keys/"+catKeyID, nil, o.As()...).Expect(t, http.StatusNoContent)

	// Keys with an expiry stop working at it.
	var created struct{ Key string }
	e.Do(t, "POST", "/v1/api-keys", map[string]any{"name": "short", "expiresInDays": 1}, bob.As()...).Expect(t, http.StatusCreated).Decode(t, &created)
	e.Do(t, "GET", "/v1/me", nil, apitest.Key(created.Key)).Expect(t, 200)
	e.Clock.Advance(24 * time.Hour)
	e.Do(t, "GET", "/v1/me", nil, apitest.Key(created.Key)).ExpectError(t, http.StatusUnauthorized, "unauthorized")
}

// TestCreateAPIKeyNeedsFreshSignIn: an API key is never asked for a fresh sign-in and
// outlives the session that minted it, so minting one from a stale session (a stolen
// one, say) got around the rule that guards marketplace writes and plugin deletions, and
// kept access after the session was signed out or expired. Every session, whatever its
// role, must have signed in within the last 15 minutes (exactly 15 is still fresh) to
// create a key; otherwise 403 reauth, fresh_auth_required, and nothing is written. A new
// sign-in is fresh.
func TestCreateAPIKeyNeedsFreshSignIn(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	admin := e.AddMember(t, owner, "ada", "admin")
	member := e.AddMember(t, owner, "bob", "member")
	mkt := newMarketplace(t, e, owner, "Official")
	plg := newPlugin(t, e, owner, "Search")
	create := func(m apitest.Member) *apitest.Resp {
		return e.Do(t, "POST", "/v1/api-keys", map[string]string{"name": "laptop"}, m.As()...)
	}

	// Sessions were signed in at Start. Exactly 15 minutes later is still fresh.
	e.Clock.Advance(15 * time.Minute)
	for _, m := range []apitest.Member{owner, admin, member} {
		create(m).Expect(t, http.StatusCreated)
	}
	keys := count(t, e, "api_keys", "true")

	// One second more: the owner's stale session may not add a plugin, nor mint a key
	// that would; neither may any other stale session.
	e.Clock.Advance(time.Second)
	addPlugin(t, e, mkt, map[string]any{"pluginId": plg}, owner.As()...).ExpectError(t, http.StatusForbidden, "reauth")
	for _, m := range []apitest.Member{owner, admin, member} {
		body := create(m).ExpectError(t, http.StatusForbidden, "reauth")
		if body["reason"] != "fresh_auth_required" || body["message"] == "" {
			t.Fatalf("%s: reauth body %v", m.Role, body)
		}
	}
	if n := count(t, e, "api_keys", "true"); n != keys {
		t.Fatalf("refused creations wrote keys: %d, want %d", n, keys)
	}

	// Signing in again gives a fresh session, which may.
	fresh := owner
	fresh.User = e.SignIn(t, owner.User)
	var out struct{ Key string }
	create(fresh).Expect(t, http.StatusCreated).Decode(t, &out)
	addPlugin(t, e, mkt, map[string]any{"pluginId": plg}, apitest.Key(out.Key)).Expect(t, http.StatusCreated)
}

// TestAPIKeysPerMemberAreCapped: a member holds at most store.MaxLiveAPIKeysPerMember
// live keys. Before, a script could mint keys without end: every one a credential the
// enforcers resolve and cache, and a row nothing removes. The next one is 409
// api_key_limit and writes nothing; a revoked or expired key frees its place; concurrent
// creations cannot both take the last place; other members are unaffected.
func TestAPIKeysPerMemberAreCapped(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	bob := e.AddMember(t, o, "bob", "member")
	limit := store.MaxLiveAPIKeysPerMember

	create := func(m apitest.Member, name string, body map[string]any) *apitest.Resp {
		if body == nil {
			body = map[string]any{}
		}
		body["name"] = name
		return e.Do(t, "POST", "/v1/api-keys", body, m.As()...)
	}
	// The list shows expired keys too (with their expiresAt); only bob's first key has one.
	type listed struct {
		ID        string
		ExpiresAt *string
	}
	unexpired := func(m apitest.Member) []listed {
		var list struct{ APIKeys []listed }
		e.Do(t, "GET", "/v1/api-keys", nil, m.As()...).Expect(t, 200).Decode(t, &list)
		var out []listed
		for _, k := range list.APIKeys {
			if k.ExpiresAt == nil {
				out = append(out, k)
			}
		}
		return out
	}
	liveKeys := func(m apitest.Member) int { return len(unexpired(m)) }
	// One of bob's keys expires in a day; the rest do not.
	create(bob, "short-lived", map[string]any{"expiresInDays": 1}).Expect(t, http.StatusCreated)
	var firstID string
	for i := 1; i < limit; i++ {
		var out struct{ APIKey struct{ ID string } }
		create(bob, fmt.Sprintf("key %d", i), nil).Expect(t, http.StatusCreated).Decode(t, &out)
		if i == 1 {
			firstID = out.APIKey.ID
		}
	}
	body := create(bob, "one too many", nil).ExpectError(t, http.StatusConflict, "api_key_limit")
	if msg, _ := body["message"].(string); !strings.Contains(msg, "revoke") {
		t.Errorf("the refusal does not say what to do: %q", msg)
	}
	if n := liveKeys(bob); n != limit-1 {
		t.Fatalf("bob holds %d keys without an expiry after the refusal, want %d", n, limit-1)
	}
	// The owner, another member, is not affected by bob's keys.
	create(o, "owner's", nil).Expect(t, http.StatusCreated)

	// A revoked key frees its place, for one key.
	e.Do(t, "DELETE", "/v1/api-keys/"+firstID, nil, bob.As()...).Expect(t, http.StatusNoContent)
	create(bob, "in the freed place", nil).Expect(t, http.StatusCreated)
	create(bob, "over again", nil).ExpectError(t, http.StatusConflict, "api_key_limit")

	// An expired key frees its place (a fresh sign-in: creating a key needs one).
	e.Clock.Advance(24 * time.Hour)
	bob.User = e.SignIn(t, bob.User)
	create(bob, "after the expiry", nil).Expect(t, http.StatusCreated)
	create(bob, "over once more", nil).ExpectError(t, http.StatusConflict, "api_key_limit")

	// Five places left and ten creations at once: exactly five are created.
	for _, k := range unexpired(bob)[:5] {
		e.Do(t, "DELETE", "/v1/api-keys/"+k.ID, nil, bob.As()...).Expect(t, http.StatusNoContent)
	}
	var wg sync.WaitGroup
	var created, refused atomic.Int32
	for i := range 10 {
		wg.Go(func() {
			r := e.Do(t, "POST", "/v1/api-keys", map[string]any{"name": fmt.Sprintf("race %d", i)}, bob.As()...)
			switch r.Status {
			case http.StatusCreated:
				created.Add(1)
			case http.StatusConflict:
				refused.Add(1)
			default:
				t.Errorf("concurrent creation answered %d: %s", r.Status, r.Body)
			}
		})
	}
	wg.Wait()
	if created.Load() != 5 || refused.Load() != 5 {
		t.Errorf("ten creations at once with five places: %d created, %d refused; want 5 and 5", created.Load(), refused.Load())
	}
	if n := liveKeys(bob); n != limit {
		t.Errorf("bob holds %d live keys, want %d", n, limit)
	}
}

// Names are stored composed (NFC): a team name sent with a combining accent is the same
// name as the one sent precomposed, so it is taken (409 team_name_taken) as its
// upper-case form is, and it is answered composed. Before, "Café" and "Cafe\u0301",
// which look alike everywhere, were two teams of one organization. Names of users,
// organizations, teams and API keys holding control characters or bidirectional
// overrides are 400 invalid_request at name, and nothing is written: before, a team
// could be called "a\nb" or "\u202egnp.exe".
func TestNamesAreComposedAndPrintable(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")

	var team struct{ Name string }
	e.Do(t, "POST", "/v1/teams", map[string]string{"name": "Cafe\u0301 crew"}, o.As()...).Expect(t, http.StatusCreated).Decode(t, &team)
	if team.Name != "Caf\u00e9 crew" {
		t.Fatalf("team name %q, want it composed", team.Name)
	}
	for _, name := range []string{"Caf\u00e9 crew", "Cafe\u0301 crew", "CAFE\u0301 CREW", " Caf\u00e9 crew "} {
		e.Do(t, "POST", "/v1/teams", map[string]string{"name": name}, o.As()...).ExpectError(t, http.StatusConflict, "team_name_taken")
	}

	writes := []struct {
		route string
		do    func(name string) *apitest.Resp
	}{
		{"sign-up", func(name string) *apitest.Resp {
			return e.Do(t, "POST", "/v1/auth/sign-up", map[string]string{"email": "new@example.test", "password": apitest.Password, "name": name})
		}},
		{"organization", func(name string) *apitest.Resp {
			return e.Do(t, "POST", "/v1/organizations", map[string]string{"name": name}, apitest.Session(o.Token))
		}},
		{"team", func(name string) *apitest.Resp {
			return e.Do(t, "POST", "/v1/teams", map[string]string{"name": name}, o.As()...)
		}},
		{"api key", func(name string) *apitest.Resp {
			return e.Do(t, "POST", "/v1/api-keys", map[string]string{"name": name}, o.As()...)
		}},
	}
	rows := func() int {
		return count(t, e, "users", "true") + count(t, e, "organizations", "true") + count(t, e, "teams", "true") + count(t, e, "api_keys", "true")
	}
	before := rows()
	for _, w := range writes {
		for _, name := range []string{"a\nb", "tab\there", "bell\x07", "esc\x1b[31m", "x\u0085y", "\u202egnp.exe", "a\u2066b\u2069", "\u202ax"} {
			body := w.do(name).ExpectError(t, http.StatusBadRequest, "invalid_request")
			details, _ := body["details"].([]any)
			if len(details) != 1 || fmt.Sprint(details[0].(map[string]any)["path"]) != "[name]" {
				t.Errorf("%s %q: details %v, want one at name", w.route, name, body["details"])
			}
		}
	}
	if after := rows(); after != before {
		t.Fatalf("refused names wrote %d rows", after-before)
	}
	// What stays accepted: letters of any script, emoji joined by U+200D, inner spaces.
	for _, w := range writes[1:] {
		w.do("Équipe 東京 \U0001F468\u200d\U0001F469\u200d\U0001F467 "+w.route).Expect(t, http.StatusCreated)
	}
}
