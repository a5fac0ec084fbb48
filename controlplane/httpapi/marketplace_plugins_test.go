package httpapi_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/apitest"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
)

// Tests of the specification's operation 1, POST /v1/marketplaces/{marketplaceId}/plugins,
// and of removing and listing a marketplace's plugins.

func TestAddPluginCreatesMembership(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	plg := newPlugin(t, e, owner, "Search")
	mkt := newMarketplace(t, e, owner, "Engineering")

	r := addPlugin(t, e, mkt, map[string]any{"pluginId": plg}, owner.As()...).Expect(t, http.StatusCreated).JSON(t)
	if r["ok"] != true {
		t.Fatalf("ok: %v", r)
	}
	item := r["item"].(map[string]any)
	if err := typeid.Check(item["id"].(string), typeid.Membership); err != nil {
		t.Fatalf("id: %v", err)
	}
	want := map[string]any{"marketplaceId": mkt, "pluginId": plg, "membershipSource": "manual",
		"createdByOrgMembershipId": owner.MemberID, "createdAt": stamp(apitest.Start), "removedAt": nil}
	for k, v := range want {
		if item[k] != v {
			t.Errorf("%s = %v, want %v", k, item[k], v)
		}
	}
	if _, has := item["plugin"]; has {
		t.Errorf("the add answer carries no plugin: %v", item)
	}

	// A given source is stored.
	other := newPlugin(t, e, owner, "Other")
	r = addPlugin(t, e, mkt, map[string]any{"pluginId": other, "membershipSource": "connector"}, owner.As()...).
		Expect(t, http.StatusCreated).JSON(t)
	if got := r["item"].(map[string]any)["membershipSource"]; got != "connector" {
		t.Fatalf("membershipSource %v", got)
	}
	if n := count(t, e, "marketplace_plugins", "marketplace_id = $1 AND removed_at IS NULL", mkt); n != 2 {
		t.Fatalf("%d memberships, want 2", n)
	}
}

func TestAddPluginInvalidRequest(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	plg := newPlugin(t, e, owner, "Search")
	mkt := newMarketplace(t, e, owner, "Engineering")
	cases := []struct {
		name     string
		path     string // the marketplace id in the path
		body     any
		wantPath []any // the path of the first detail; nil to not check
	}{
		{"short marketplace id", "mkt_123", map[string]any{"pluginId": plg}, []any{"marketplaceId"}},
		{"plugin id as marketplace id", plg, map[string]any{"pluginId": plg}, []any{"marketplaceId"}},
		{"upper-case marketplace id", strings.ToUpper(mkt), map[string]any{"pluginId": plg}, []any{"marketplaceId"}},
		{"31-character marketplace id", mkt + "0", map[string]any{"pluginId": plg}, []any{"marketplaceId"}},
		{"no body", mkt, nil, nil},
		{"not JSON", mkt, `{"pluginId":`, nil},
		{"array body", mkt, `[]`, nil},
		{"trailing data", mkt, `{"pluginId":"` + plg + `"} {}`, nil},
		{"missing pluginId", mkt, map[string]any{}, []any{"pluginId"}},
		{"null pluginId", mkt, map[string]any{"pluginId": nil}, []any{"pluginId"}},
		{"numeric pluginId", mkt, map[string]any{"pluginId": 7}, []any{"pluginId"}},
		{"marketplace id as pluginId", mkt, map[string]any{"pluginId": mkt}, []any{"pluginId"}},
		{"29-character pluginId", mkt, map[string]any{"pluginId": plg[:29]}, []any{"pluginId"}},
		{"unknown membershipSource", mkt, map[string]any{"pluginId": plg, "membershipSource": "import"}, []any{"membershipSource"}},
		{"null membershipSource", mkt, map[string]any{"pluginId": plg, "membershipSource": nil}, []any{"membershipSource"}},
		{"unknown field", mkt, map[string]any{"pluginId": plg, "position": 1}, []any{"position"}},
	}
	before := digest(t, e)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body := addPlugin(t, e, tc.path, tc.body, owner.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
			details, _ := body["details"].([]any)
			if len(details) == 0 {
				t.Fatalf("no details: %v", body)
			}
			first := details[0].(map[string]any)
			if msg, _ := first["message"].(string); msg == "" {
				t.Fatalf("detail without message: %v", body)
			}
			if tc.wantPath != nil {
				if got, _ := first["path"].([]any); len(got) != len(tc.wantPath) || got[0] != tc.wantPath[0] {
					t.Fatalf("path %v, want %v", first["path"], tc.wantPath)
				}
			}
		})
	}
	// A bad path and a bad body are reported together.
	body := addPlugin(t, e, "mkt_x", map[string]any{"pluginId": "x", "membershipSource": "x"}, owner.As()...).
		ExpectError(t, http.StatusBadRequest, "invalid_request")
	if n := len(body["details"].([]any)); n != 3 {
		t.Fatalf("%d details, want 3: %v", n, body)
	}
	expectNoWrites(t, e, before)
}

func TestAddPluginUnauthorized(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	plg := newPlugin(t, e, owner, "Search")
	mkt := newMarketplace(t, e, owner, "Engineering")
	key := e.APIKey(t, owner)
	before := digest(t, e)
	for name, opts := range map[string][]apitest.Opt{
		"no credential":            nil,
		"unknown session":          {apitest.Session("nope")},
		"unknown API key":          {apitest.Key("tg_nope")},
		"API key sent with Bearer": {apitest.Header("x-api-key", "Bearer "+key)},
	} {
		t.Run(name, func(t *testing.T) {
			body := addPlugin(t, e, mkt, map[string]any{"pluginId": plg}, opts...).ExpectError(t, http.StatusUnauthorized, "unauthorized")
			if len(body) != 1 {
				t.Fatalf("the unauthorized body is {error} only: %v", body)
			}
		})
	}
	// 401 comes before any validation.
	addPlugin(t, e, "bad", `{`).ExpectError(t, http.StatusUnauthorized, "unauthorized")
	expectNoWrites(t, e, before)
}

func TestAddPluginNotFound(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	plg := newPlugin(t, e, owner, "Search")
	mkt := newMarketplace(t, e, owner, "Engineering")
	bob := e.AddMember(t, owner, "bob", "member")

	rival := e.NewOrg(t, "Rival")
	rivalPlugin := newPlugin(t, e, rival, "Theirs")
	rivalMarketplace := newMarketplace(t, e, rival, "Theirs")

	deleted := newPlugin(t, e, owner, "Gone")
	e.Do(t, "DELETE", "/v1/plugins/"+deleted, nil, owner.As()...).Expect(t, http.StatusOK)

	cases := []struct {
		name        string
		marketplace string
		plugin      string
		as          apitest.Member
		want        string
	}{
		{"missing plugin", mkt, missing(typeid.Plugin), owner, "plugin_not_found"},
		{"missing marketplace", missing(typeid.Marketplace), plg, owner, "marketplace_not_found"},
		{"both missing: the plugin is looked up first", missing(typeid.Marketplace), missing(typeid.Plugin), owner, "plugin_not_found"},
		{"plugin of another organization", mkt, rivalPlugin, owner, "plugin_not_found"},
		{"marketplace of another organization", rivalMarketplace, plg, owner, "marketplace_not_found"},
		{"both of another organization", rivalMarketplace, rivalPlugin, owner, "plugin_not_found"},
		{"deleted plugin", mkt, deleted, owner, "plugin_not_found"},
		{"missing marketplace, as a member without grants", missing(typeid.Marketplace), plg, bob, "marketplace_not_found"},
		{"marketplace of another organization, as a member without grants", rivalMarketplace, plg, bob, "marketplace_not_found"},
		{"missing plugin, as a member without grants", mkt, missing(typeid.Plugin), bob, "plugin_not_found"},
	}
	before := digest(t, e)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body := addPlugin(t, e, tc.marketplace, map[string]any{"pluginId": tc.plugin}, tc.as.As()...).
				ExpectError(t, http.StatusNotFound, tc.want)
			if msg, _ := body["message"].(string); msg == "" {
				t.Fatalf("no message: %v", body)
			}
		})
	}
	expectNoWrites(t, e, before)
}

func TestAddPluginForbidden(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	plg := newPlugin(t, e, owner, "Search")
	mkt := newMarketplace(t, e, owner, "Engineering")
	viewer := e.AddMember(t, owner, "vera", "member")
	manager := e.AddMember(t, owner, "max", "member")
	setGrants(t, e, owner, mkt, memberGrant(viewer, "viewer"), memberGrant(manager, "manager"))
	viewerKey := e.APIKey(t, viewer)

	before := digest(t, e)
	body := addPlugin(t, e, mkt, map[string]any{"pluginId": plg}, viewer.As()...).ExpectError(t, http.StatusForbidden, "forbidden")
	if msg, _ := body["message"].(string); msg == "" || body["reason"] != nil {
		t.Fatalf("forbidden body: %v", body)
	}
	// With the viewer's API key too.
	addPlugin(t, e, mkt, map[string]any{"pluginId": plg}, apitest.Key(viewerKey)).ExpectError(t, http.StatusForbidden, "forbidden")
	expectNoWrites(t, e, before)

	// A manager grant includes editing; an admin needs no grant.
	addPlugin(t, e, mkt, map[string]any{"pluginId": plg}, manager.As()...).Expect(t, http.StatusCreated)
	admin := e.AddMember(t, owner, "ada", "admin")
	addPlugin(t, e, mkt, map[string]any{"pluginId": newPlugin(t, e, owner, "Two")}, admin.As()...).Expect(t, http.StatusCreated)
}

// TestAddPluginForbiddenWithoutGrant is issue 22's first item: a member of the
// organization who holds no grant at all on an existing marketplace lacks the permission
// to edit it, so the answer is the specification's 403, not 404; and the refusal writes
// nothing: no membership row, no audit event. The same holds for removing a plugin.
func TestAddPluginForbiddenWithoutGrant(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	plg := newPlugin(t, e, owner, "Search")
	inMarketplace := newPlugin(t, e, owner, "Already in")
	mkt := newMarketplace(t, e, owner, "Engineering")
	addPlugin(t, e, mkt, map[string]any{"pluginId": inMarketplace}, owner.As()...).Expect(t, http.StatusCreated)
	bob := e.AddMember(t, owner, "bob", "member") // no grant of any kind
	bobKey := e.APIKey(t, bob)
	// The grants of others (a viewer, a team bob is not in) do not reach him.
	vera := e.AddMember(t, owner, "vera", "member")
	setGrants(t, e, owner, mkt, memberGrant(vera, "editor"), teamGrant(newTeam(t, e, owner, "Others", vera), "manager"))

	auditsBefore := count(t, e, "audit_events", "organization_id = $1", owner.OrgID)
	before := digest(t, e)
	for name, opts := range map[string][]apitest.Opt{"session": bob.As(), "API key": {apitest.Key(bobKey)}} {
		t.Run(name, func(t *testing.T) {
			body := addPlugin(t, e, mkt, map[string]any{"pluginId": plg, "membershipSource": "api"}, opts...).
				ExpectError(t, http.StatusForbidden, "forbidden")
			if msg, _ := body["message"].(string); !strings.Contains(msg, "editor") || body["reason"] != nil || len(body) != 2 {
				t.Fatalf("forbidden body: %v", body)
			}
			e.Do(t, "DELETE", "/v1/marketplaces/"+mkt+"/plugins/"+inMarketplace, nil, opts...).
				ExpectError(t, http.StatusForbidden, "forbidden")
			// A plugin that is not in the marketplace: still 403, the rank is checked first.
			e.Do(t, "DELETE", "/v1/marketplaces/"+mkt+"/plugins/"+plg, nil, opts...).
				ExpectError(t, http.StatusForbidden, "forbidden")
		})
	}
	if n := count(t, e, "marketplace_plugins", "plugin_id = $1", plg); n != 0 {
		t.Fatalf("%d membership rows for the refused plugin", n)
	}
	if n := count(t, e, "marketplace_plugins", "plugin_id = $1 AND removed_at IS NULL", inMarketplace); n != 1 {
		t.Fatalf("the refused removal ended the membership (%d active)", n)
	}
	if n := count(t, e, "audit_events", "organization_id = $1", owner.OrgID); n != auditsBefore {
		t.Fatalf("%d audit events after the refusals, %d before", n, auditsBefore)
	}
	expectNoWrites(t, e, before)

	// Reads still hide the marketplace from him.
	e.Do(t, "GET", "/v1/marketplaces/"+mkt, nil, bob.As()...).ExpectError(t, http.StatusNotFound, "marketplace_not_found")
	// Once granted editor, the same request succeeds and is audited once.
	setGrants(t, e, owner, mkt, memberGrant(bob, "editor"))
	addPlugin(t, e, mkt, map[string]any{"pluginId": plg}, bob.As()...).Expect(t, http.StatusCreated)
	if n := count(t, e, "audit_events", "action = 'marketplace.plugin.add' AND actor_member_id = $1", bob.MemberID); n != 1 {
		t.Fatalf("%d add events by bob, want 1", n)
	}
}

// TestAddPluginCheckOrder pins which answer wins when a request has several faults.
func TestAddPluginCheckOrder(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	plg := newPlugin(t, e, owner, "Search")
	mkt := newMarketplace(t, e, owner, "Engineering")
	viewer := e.AddMember(t, owner, "vera", "member")
	setGrants(t, e, owner, mkt, memberGrant(viewer, "viewer"))
	staleAdmin := e.AddMember(t, owner, "ada", "admin")
	stranger := e.AddMember(t, owner, "sam", "member")
	e.Clock.Advance(time.Hour) // every session above is now stale
	fresh := func(m apitest.Member) []apitest.Opt {
		return []apitest.Opt{apitest.Session(signIn(t, e, m.User)), apitest.Org(m.OrgID)}
	}
	noPlugin, noMarketplace := missing(typeid.Plugin), missing(typeid.Marketplace)

	cases := []struct {
		name        string
		marketplace string
		body        any
		opts        []apitest.Opt
		status      int
		code        string
	}{
		{"401 before 400", "bad", `{`, nil, 401, "unauthorized"},
		{"400 before 404", noMarketplace, map[string]any{"pluginId": noPlugin, "membershipSource": "bad"}, fresh(owner), 400, "invalid_request"},
		{"400 before 403", mkt, map[string]any{}, fresh(viewer), 400, "invalid_request"},
		{"plugin 404 before marketplace 404", noMarketplace, map[string]any{"pluginId": noPlugin}, fresh(owner), 404, "plugin_not_found"},
		{"plugin 404 before 403", mkt, map[string]any{"pluginId": noPlugin}, fresh(viewer), 404, "plugin_not_found"},
		{"plugin 404 before reauth", mkt, map[string]any{"pluginId": noPlugin}, staleAdmin.As(), 404, "plugin_not_found"},
		{"marketplace 404 before reauth", noMarketplace, map[string]any{"pluginId": plg}, staleAdmin.As(), 404, "marketplace_not_found"},
		{"403 for a viewer", mkt, map[string]any{"pluginId": plg}, viewer.As(), 403, "forbidden"},
		{"403 for a member without grants", mkt, map[string]any{"pluginId": plg}, fresh(stranger), 403, "forbidden"},
		{"marketplace 404 before 403", noMarketplace, map[string]any{"pluginId": plg}, fresh(stranger), 404, "marketplace_not_found"},
		{"reauth for a stale admin", mkt, map[string]any{"pluginId": plg}, staleAdmin.As(), 403, "reauth"},
	}
	before := digest(t, e)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			addPlugin(t, e, tc.marketplace, tc.body, tc.opts...).ExpectError(t, tc.status, tc.code)
		})
	}
	expectNoWrites(t, e, before)
}

func TestAddPluginReaddAfterRemoval(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	plg := newPlugin(t, e, owner, "Search")
	mkt := newMarketplace(t, e, owner, "Engineering")
	editor := e.AddMember(t, owner, "eve", "member")
	setGrants(t, e, owner, mkt, memberGrant(editor, "editor"))

	first := addPlugin(t, e, mkt, map[string]any{"pluginId": plg, "membershipSource": "connector"}, owner.As()...).
		Expect(t, http.StatusCreated).JSON(t)["item"].(map[string]any)

	// Adding again while it is a member changes nothing and still answers 201.
	e.Clock.Advance(time.Minute)
	again := addPlugin(t, e, mkt, map[string]any{"pluginId": plg}, editor.As()...).Expect(t, http.StatusCreated).JSON(t)["item"].(map[string]any)
	for _, k := range []string{"id", "createdAt", "createdByOrgMembershipId", "membershipSource"} {
		if again[k] != first[k] {
			t.Fatalf("re-add changed %s: %v -> %v", k, first[k], again[k])
		}
	}

	e.Clock.Advance(time.Minute)
	e.Do(t, "DELETE", "/v1/marketplaces/"+mkt+"/plugins/"+plg, nil, editor.As()...).Expect(t, http.StatusNoContent)
	if n := count(t, e, "marketplace_plugins", "id = $1 AND removed_at = $2", first["id"], apitest.Start.Add(2*time.Minute)); n != 1 {
		t.Fatalf("removal did not set removed_at")
	}
	list := e.Do(t, "GET", "/v1/marketplaces/"+mkt+"/plugins", nil, owner.As()...).Expect(t, http.StatusOK).JSON(t)
	if n := len(list["items"].([]any)); n != 0 {
		t.Fatalf("a removed plugin is listed: %v", list)
	}

	// Re-adding after removal reuses the membership; without a source it is manual
	// (API.md: membershipSource defaults to manual), not the removed membership's.
	e.Clock.Advance(time.Minute)
	back := addPlugin(t, e, mkt, map[string]any{"pluginId": plg}, editor.As()...).Expect(t, http.StatusCreated).JSON(t)["item"].(map[string]any)
	want := map[string]any{"id": first["id"], "createdAt": first["createdAt"], "removedAt": nil,
		"membershipSource": "manual", "createdByOrgMembershipId": owner.MemberID}
	for k, v := range want {
		if back[k] != v {
			t.Errorf("after re-add %s = %v, want %v", k, back[k], v)
		}
	}
	replaced := addPlugin(t, e, mkt, map[string]any{"pluginId": plg, "membershipSource": "api"}, owner.As()...).
		Expect(t, http.StatusCreated).JSON(t)["item"].(map[string]any)
	if replaced["membershipSource"] != "api" || replaced["id"] != first["id"] {
		t.Fatalf("a given source replaces the old one on the same membership: %v", replaced)
	}
	// A membership still present keeps its source when none is given.
	kept := addPlugin(t, e, mkt, map[string]any{"pluginId": plg}, editor.As()...).Expect(t, http.StatusCreated).JSON(t)["item"].(map[string]any)
	if kept["membershipSource"] != "api" {
		t.Fatalf("a re-add of a present membership without a source changed it: %v", kept)
	}
	// A removed one added again with a source takes it.
	e.Do(t, "DELETE", "/v1/marketplaces/"+mkt+"/plugins/"+plg, nil, editor.As()...).Expect(t, http.StatusNoContent)
	given := addPlugin(t, e, mkt, map[string]any{"pluginId": plg, "membershipSource": "system"}, editor.As()...).
		Expect(t, http.StatusCreated).JSON(t)["item"].(map[string]any)
	if given["membershipSource"] != "system" || given["removedAt"] != nil || given["id"] != first["id"] {
		t.Fatalf("re-added with a source: %v", given)
	}
	if n := count(t, e, "marketplace_plugins", "marketplace_id = $1 AND plugin_id = $2", mkt, plg); n != 1 {
		t.Fatalf("%d rows for one pair, want 1", n)
	}
}

func TestAddPluginThroughTeamGrant(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	plg := newPlugin(t, e, owner, "Search")
	mkt := newMarketplace(t, e, owner, "Engineering")
	bob := e.AddMember(t, owner, "bob", "member")
	carol := e.AddMember(t, owner, "carol", "member")
	editors := newTeam(t, e, owner, "Editors", bob)
	readers := newTeam(t, e, owner, "Readers", carol)
	setGrants(t, e, owner, mkt, teamGrant(editors, "editor"), teamGrant(readers, "viewer"))

	r := addPlugin(t, e, mkt, map[string]any{"pluginId": plg}, bob.As()...).Expect(t, http.StatusCreated).JSON(t)
	if got := r["item"].(map[string]any)["createdByOrgMembershipId"]; got != bob.MemberID {
		t.Fatalf("createdBy %v, want bob", got)
	}
	before := digest(t, e)
	addPlugin(t, e, mkt, map[string]any{"pluginId": plg}, carol.As()...).ExpectError(t, http.StatusForbidden, "forbidden")
	expectNoWrites(t, e, before)

	// Leaving the team ends the grant: bob may no longer edit (and no longer sees it).
	e.Do(t, "DELETE", "/v1/teams/"+editors+"/members/"+bob.MemberID, nil, owner.As()...).Expect(t, http.StatusNoContent)
	addPlugin(t, e, mkt, map[string]any{"pluginId": plg}, bob.As()...).ExpectError(t, http.StatusForbidden, "forbidden")
	e.Do(t, "GET", "/v1/marketplaces/"+mkt, nil, bob.As()...).ExpectError(t, http.StatusNotFound, "marketplace_not_found")
	// Joining the editors team gives carol editing on top of her viewer grant.
	e.Do(t, "POST", "/v1/teams/"+editors+"/members", map[string]any{"memberId": carol.MemberID}, owner.As()...).Expect(t, http.StatusOK)
	addPlugin(t, e, mkt, map[string]any{"pluginId": plg}, carol.As()...).Expect(t, http.StatusCreated)
	// A deleted team grants nothing.
	e.Do(t, "DELETE", "/v1/teams/"+editors, nil, owner.As()...).Expect(t, http.StatusNoContent)
	addPlugin(t, e, mkt, map[string]any{"pluginId": plg}, carol.As()...).ExpectError(t, http.StatusForbidden, "forbidden")
}

func TestAddPluginThroughOrganizationGrant(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	plg := newPlugin(t, e, owner, "Search")
	mkt := newMarketplace(t, e, owner, "Engineering")
	early := e.AddMember(t, owner, "early", "member")
	setGrants(t, e, owner, mkt, orgGrant("editor"))
	late := e.AddMember(t, owner, "late", "member") // joined after the grant

	addPlugin(t, e, mkt, map[string]any{"pluginId": plg}, early.As()...).Expect(t, http.StatusCreated)
	addPlugin(t, e, mkt, map[string]any{"pluginId": newPlugin(t, e, owner, "Two")}, late.As()...).Expect(t, http.StatusCreated)

	// An organization-wide viewer grant does not lower a member's direct editor grant,
	// and does not let others edit.
	setGrants(t, e, owner, mkt, orgGrant("viewer"), memberGrant(early, "editor"))
	addPlugin(t, e, mkt, map[string]any{"pluginId": plg}, early.As()...).Expect(t, http.StatusCreated)
	before := digest(t, e)
	addPlugin(t, e, mkt, map[string]any{"pluginId": plg}, late.As()...).ExpectError(t, http.StatusForbidden, "forbidden")
	expectNoWrites(t, e, before)
	// Another organization's members are not reached by it.
	rival := e.NewOrg(t, "Rival")
	addPlugin(t, e, mkt, map[string]any{"pluginId": plg}, rival.As()...).ExpectError(t, http.StatusNotFound, "plugin_not_found")
}

func TestAddPluginFreshAuthentication(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	admin := e.AddMember(t, owner, "ada", "admin")
	editor := e.AddMember(t, owner, "eve", "member")
	mkt := newMarketplace(t, e, owner, "Engineering")
	setGrants(t, e, owner, mkt, memberGrant(editor, "editor"))
	ownerKey := e.APIKey(t, owner)
	editorKey := e.APIKey(t, editor)
	plugins := make([]string, 8)
	for i := range plugins {
		plugins[i] = newPlugin(t, e, owner, "P"+string(rune('a'+i)))
	}
	add := func(i int, opts ...apitest.Opt) *apitest.Resp {
		return addPlugin(t, e, mkt, map[string]any{"pluginId": plugins[i]}, opts...)
	}

	// Sessions were signed in at Start. Exactly 15 minutes later is still fresh.
	e.Clock.Advance(15 * time.Minute)
	add(0, owner.As()...).Expect(t, http.StatusCreated)

	// One second more and owners and admins must sign in again; nothing is written.
	e.Clock.Advance(time.Second)
	before := digest(t, e)
	for _, m := range []apitest.Member{owner, admin} {
		body := add(1, m.As()...).ExpectError(t, http.StatusForbidden, "reauth")
		if body["reason"] != "fresh_auth_required" || body["message"] == "" {
			t.Fatalf("reauth body: %v", body)
		}
	}
	// The same rule guards removal and the access list.
	e.Do(t, "DELETE", "/v1/marketplaces/"+mkt+"/plugins/"+plugins[0], nil, owner.As()...).ExpectError(t, http.StatusForbidden, "reauth")
	e.Do(t, "PUT", "/v1/marketplaces/"+mkt+"/access", map[string]any{"grants": []any{}}, admin.As()...).ExpectError(t, http.StatusForbidden, "reauth")
	expectNoWrites(t, e, before)

	// Members acting through a grant are not asked, nor are API keys, however old.
	add(1, editor.As()...).Expect(t, http.StatusCreated)
	e.Clock.Advance(24 * time.Hour)
	add(2, apitest.Key(ownerKey)).Expect(t, http.StatusCreated)
	add(3, apitest.Key(editorKey)).Expect(t, http.StatusCreated)

	// Signing in again makes the owner's new session fresh (for 15 minutes).
	fresh := []apitest.Opt{apitest.Session(signIn(t, e, owner.User)), apitest.Org(owner.OrgID)}
	add(4, fresh...).Expect(t, http.StatusCreated)
	add(5, owner.As()...).ExpectError(t, http.StatusForbidden, "reauth") // the old session stays stale
	e.Clock.Advance(16 * time.Minute)
	add(6, fresh...).ExpectError(t, http.StatusForbidden, "reauth")
}

func TestAddPluginConcurrently(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	plg := newPlugin(t, e, owner, "Search")
	mkt := newMarketplace(t, e, owner, "Engineering")
	// Half through an owner's session, half through an editor's API key.
	editor := e.AddMember(t, owner, "eve", "member")
	setGrants(t, e, owner, mkt, memberGrant(editor, "editor"))
	key := e.APIKey(t, editor)

	const n = 50
	statuses := make([]int, n)
	ids := make([]string, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			opts := owner.As()
			if i%2 == 1 {
				opts = []apitest.Opt{apitest.Key(key)}
			}
			<-start
			r := addPlugin(t, e, mkt, map[string]any{"pluginId": plg}, opts...)
			statuses[i] = r.Status
			if r.Status == http.StatusCreated {
				var out struct{ Item struct{ ID string } }
				r.Decode(t, &out)
				ids[i] = out.Item.ID
			}
		}()
	}
	close(start)
	wg.Wait()
	for i, s := range statuses {
		if s != http.StatusCreated {
			t.Fatalf("request %d answered %d", i, s)
		}
		if ids[i] != ids[0] {
			t.Fatalf("request %d answered membership %s, request 0 %s", i, ids[i], ids[0])
		}
	}
	if c := count(t, e, "marketplace_plugins", "marketplace_id = $1 AND plugin_id = $2", mkt, plg); c != 1 {
		t.Fatalf("%d memberships, want exactly 1", c)
	}
}

// TestPluginWritesWaitForAccessChange: an add or a removal of a plugin reads the caller's
// rank under the marketplace's lock, so one sent while a replacement of the access list
// that revokes the caller's grant is under way waits for it and is refused; it was
// answered from the grant being revoked. The test holds the replacement open itself.
func TestPluginWritesWaitForAccessChange(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	editor := e.AddMember(t, owner, "eve", "member")
	mkt := newMarketplace(t, e, owner, "Engineering")
	setGrants(t, e, owner, mkt, memberGrant(editor, "editor"))
	plg := newPlugin(t, e, owner, "Search")
	inside := newPlugin(t, e, owner, "Already in")
	addPlugin(t, e, mkt, map[string]any{"pluginId": inside}, editor.As()...).Expect(t, http.StatusCreated)

	ctx := context.Background()
	tx := revokingGrants(t, e, owner, mkt)
	answers := make(chan *apitest.Resp, 2)
	go func() { answers <- addPlugin(t, e, mkt, map[string]any{"pluginId": plg}, editor.As()...) }()
	go func() {
		answers <- e.Do(t, "DELETE", "/v1/marketplaces/"+mkt+"/plugins/"+inside, nil, editor.As()...)
	}()
	select {
	case r := <-answers:
		t.Fatalf("a plugin write was answered while the revocation was under way: %d %s", r.Status, r.Body)
	case <-time.After(300 * time.Millisecond):
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		(<-answers).ExpectError(t, http.StatusForbidden, "forbidden")
	}
	if n := count(t, e, "marketplace_plugins", "marketplace_id = $1 AND removed_at IS NULL", mkt); n != 1 {
		t.Fatalf("%d plugins in the marketplace, want the one it had", n)
	}
}

func TestRemoveMarketplacePlugin(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	plg := newPlugin(t, e, owner, "Search")
	never := newPlugin(t, e, owner, "Never added")
	mkt := newMarketplace(t, e, owner, "Engineering")
	viewer := e.AddMember(t, owner, "vera", "member")
	setGrants(t, e, owner, mkt, memberGrant(viewer, "viewer"))
	stranger := e.AddMember(t, owner, "sam", "member")
	rival := e.NewOrg(t, "Rival")
	addPlugin(t, e, mkt, map[string]any{"pluginId": plg}, owner.As()...).Expect(t, http.StatusCreated)
	path := "/v1/marketplaces/" + mkt + "/plugins/"

	before := digest(t, e)
	e.Do(t, "DELETE", "/v1/marketplaces/mkt_1/plugins/"+plg, nil, owner.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
	e.Do(t, "DELETE", path+"plg_1", nil, owner.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
	e.Do(t, "DELETE", path+plg, nil).ExpectError(t, http.StatusUnauthorized, "unauthorized")
	e.Do(t, "DELETE", path+plg, nil, viewer.As()...).ExpectError(t, http.StatusForbidden, "forbidden")
	e.Do(t, "DELETE", path+plg, nil, stranger.As()...).ExpectError(t, http.StatusForbidden, "forbidden")
	e.Do(t, "DELETE", "/v1/marketplaces/"+missing(typeid.Marketplace)+"/plugins/"+plg, nil, owner.As()...).
		ExpectError(t, http.StatusNotFound, "marketplace_not_found")
	// Another organization's owner: 404, never 403, so the id is not confirmed to exist.
	e.Do(t, "DELETE", path+plg, nil, rival.As()...).ExpectError(t, http.StatusNotFound, "marketplace_not_found")
	e.Do(t, "DELETE", path+never, nil, owner.As()...).ExpectError(t, http.StatusNotFound, "marketplace_membership_not_found")
	expectNoWrites(t, e, before)

	e.Do(t, "DELETE", path+plg, nil, owner.As()...).Expect(t, http.StatusNoContent)
	e.Do(t, "DELETE", path+plg, nil, owner.As()...).ExpectError(t, http.StatusNotFound, "marketplace_membership_not_found")
}

func TestListMarketplacePlugins(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	b := newPlugin(t, e, owner, "beta")
	a := newPlugin(t, e, owner, "Alpha")
	mkt := newMarketplace(t, e, owner, "Engineering")
	viewer := e.AddMember(t, owner, "vera", "member")
	stranger := e.AddMember(t, owner, "sam", "member")
	setGrants(t, e, owner, mkt, memberGrant(viewer, "viewer"))
	for _, id := range []string{b, a} {
		addPlugin(t, e, mkt, map[string]any{"pluginId": id}, owner.As()...).Expect(t, http.StatusCreated)
	}

	r := e.Do(t, "GET", "/v1/marketplaces/"+mkt+"/plugins", nil, viewer.As()...).Expect(t, http.StatusOK).JSON(t)
	items := r["items"].([]any)
	if len(items) != 2 {
		t.Fatalf("items: %v", items)
	}
	for i, want := range []string{a, b} { // by name, case-insensitively
		item := items[i].(map[string]any)
		p := item["plugin"].(map[string]any)
		if item["pluginId"] != want || p["id"] != want || p["memberCount"] != float64(1) {
			t.Fatalf("item %d: %v", i, item)
		}
	}
	e.Do(t, "GET", "/v1/marketplaces/"+mkt+"/plugins", nil, stranger.As()...).ExpectError(t, http.StatusNotFound, "marketplace_not_found")
	e.Do(t, "GET", "/v1/marketplaces/nope/plugins", nil, owner.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
}

// TestPluginChangesWaitForAccessChange: a member who may change or delete a plugin only
// through their grants reads their rank under the shared locks of the marketplaces the
// plugin is in, as adds and removals do (TestPluginWritesWaitForAccessChange). A change
// or deletion sent while a replacement of the access list that revokes their grant is
// under way waits for it and is refused; before, it was answered from the grant being
// revoked, and could commit after the revocation.
func TestPluginChangesWaitForAccessChange(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	curator := e.AddMember(t, owner, "cora", "member")
	mkt := newMarketplace(t, e, owner, "Engineering")
	setGrants(t, e, owner, mkt, memberGrant(curator, "manager"))
	changed, deleted := newPlugin(t, e, owner, "Search"), newPlugin(t, e, owner, "Lint")
	for _, plg := range []string{changed, deleted} {
		addPlugin(t, e, mkt, map[string]any{"pluginId": plg}, curator.As()...).Expect(t, http.StatusCreated)
	}

	ctx := context.Background()
	tx := revokingGrants(t, e, owner, mkt)
	answers := make(chan *apitest.Resp, 2)
	go func() {
		answers <- e.Do(t, "PATCH", "/v1/plugins/"+changed, map[string]any{"name": "Renamed"}, curator.As()...)
	}()
	go func() { answers <- e.Do(t, "DELETE", "/v1/plugins/"+deleted, nil, curator.As()...) }()
	awaitLockWaits(t, e, 2)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		(<-answers).ExpectError(t, http.StatusForbidden, "forbidden")
	}
	if n := count(t, e, "plugins", "id = ANY($1) AND name IN ('Search', 'Lint') AND status = 'active'", []string{changed, deleted}); n != 2 {
		t.Fatalf("%d plugins unchanged, want both", n)
	}
}

// revokingGrants begins what marketplace.ReplaceAccess does to revoke every grant of mkt
// (its lock, then the new list, empty) and leaves it uncommitted, for a test to commit
// once the writes it races are seen waiting; rolled back at the test's end otherwise.
func revokingGrants(t *testing.T, e *apitest.Env, owner apitest.Member, mkt string) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx := openTx(t, e)
	if err := store.LockMarketplace(ctx, tx, owner.OrgID, mkt); err != nil {
		t.Fatal(err)
	}
	if err := store.ReplaceGrants(ctx, tx, mkt, nil); err != nil {
		t.Fatal(err)
	}
	return tx
}

// TestPluginWritesWaitForTeamRemoval: a member whose rank comes from a team's grant is
// being taken out of the team (the test holds the removal open). An add of a plugin, a
// change of a plugin and a replacement of a marketplace's grants they send meanwhile
// wait for the removal and are refused; they were answered, and committed after the
// removal, from the grant of the team they were leaving.
func TestPluginWritesWaitForTeamRemoval(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	bob := e.AddMember(t, owner, "bob", "member")
	curators := newTeam(t, e, owner, "Curators", bob)
	mkt := newMarketplace(t, e, owner, "Engineering")
	other := newMarketplace(t, e, owner, "Design")
	setGrants(t, e, owner, mkt, teamGrant(curators, "manager"))
	setGrants(t, e, owner, other, teamGrant(curators, "manager"))
	inside := newPlugin(t, e, owner, "Search")
	addPlugin(t, e, mkt, map[string]any{"pluginId": inside}, bob.As()...).Expect(t, http.StatusCreated)
	outside := newPlugin(t, e, owner, "Lint")

	ctx := context.Background()
	tx := openTx(t, e)
	if removed, err := store.RemoveTeamMember(ctx, tx, curators, bob.MemberID); err != nil || !removed {
		t.Fatalf("removing bob from the team: %v %v", removed, err)
	}
	answers := make(chan *apitest.Resp, 3)
	go func() { answers <- addPlugin(t, e, mkt, map[string]any{"pluginId": outside}, bob.As()...) }()
	go func() {
		answers <- e.Do(t, "PATCH", "/v1/plugins/"+inside, map[string]any{"name": "Renamed"}, bob.As()...)
	}()
	go func() {
		answers <- e.Do(t, "PUT", "/v1/marketplaces/"+other+"/access",
			map[string]any{"grants": []any{memberGrant(bob, "manager")}}, bob.As()...)
	}()
	awaitLockWaits(t, e, 3)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		(<-answers).ExpectError(t, http.StatusForbidden, "forbidden")
	}
	if n := count(t, e, "marketplace_plugins", "marketplace_id = $1 AND removed_at IS NULL", mkt); n != 1 {
		t.Fatalf("%d plugins in the marketplace, want the one it had", n)
	}
	if n := count(t, e, "plugins", "id = $1 AND name = 'Search'", inside); n != 1 {
		t.Fatal("the plugin was renamed")
	}
	if n := count(t, e, "marketplace_grants", "marketplace_id = $1 AND member_id = $2", other, bob.MemberID); n != 0 {
		t.Fatal("bob granted himself the marketplace")
	}
}
