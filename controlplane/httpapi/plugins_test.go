package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/apitest"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
)

// manifest is a valid extension manifest with properties the rules do not name.
const manifest = `{
	"schemaVersion": 1,
	"id": "acme.search",
	"name": "Acme search",
	"description": "Searches the wiki.",
	"source": {"format": "service-extension-manifest", "trusted": true, "origin": "workspace", "vendorHint": "x"},
	"resources": [{"kind": "tool", "name": "search", "limits": {"rpm": 60}}],
	"x-unknown": {"big": 12345678901234567890, "list": [1.5, null, "two"]}
}`

func TestPluginLifecycle(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	created := newPluginWith(t, e, owner, map[string]any{
		"name": "Search", "description": "Finds things.", "sourceRepositoryUrl": "https://git.example/acme/search",
		"sourceFormat": "agent-plugin", "sourceSchemaVersion": "2024-06", "status": "inactive",
	})
	id := created["id"].(string)
	if err := typeid.Check(id, typeid.Plugin); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"organizationId": owner.OrgID, "name": "Search", "description": "Finds things.",
		"sourceRepositoryUrl": "https://git.example/acme/search", "sourceFormat": "agent-plugin",
		"sourceSchemaVersion": "2024-06", "status": "inactive", "createdByOrgMembershipId": owner.MemberID,
		"createdAt": stamp(apitest.Start), "updatedAt": stamp(apitest.Start), "deletedAt": nil,
		"memberCount": float64(0), "marketplaces": []any{}, "extension": nil}
	for k, v := range want {
		if !reflect.DeepEqual(created[k], v) {
			t.Errorf("%s = %#v, want %#v", k, created[k], v)
		}
	}
	// Defaults: status active, every optional field null.
	minimal := newPluginWith(t, e, owner, map[string]any{"name": "Bare"})
	for _, k := range []string{"description", "sourceRepositoryUrl", "sourceFormat", "sourceSchemaVersion", "deletedAt", "extension"} {
		if minimal[k] != nil {
			t.Errorf("%s = %v, want null", k, minimal[k])
		}
	}
	if minimal["status"] != "active" {
		t.Errorf("status %v", minimal["status"])
	}

	got := e.Do(t, "GET", "/v1/plugins/"+id, nil, owner.As()...).Expect(t, http.StatusOK).JSON(t)["item"]
	if !reflect.DeepEqual(got, created) {
		t.Fatalf("read %v\nwant %v", got, created)
	}

	// PATCH: absent fields stay, null clears, updatedAt moves.
	e.Clock.Advance(time.Minute)
	patched := e.Do(t, "PATCH", "/v1/plugins/"+id, map[string]any{"name": "Search 2", "description": nil, "status": "archived"},
		owner.As()...).Expect(t, http.StatusOK).JSON(t)["item"].(map[string]any)
	if patched["name"] != "Search 2" || patched["description"] != nil || patched["status"] != "archived" ||
		patched["sourceFormat"] != "agent-plugin" || patched["updatedAt"] != stamp(apitest.Start.Add(time.Minute)) ||
		patched["createdAt"] != created["createdAt"] {
		t.Fatalf("patched: %v", patched)
	}
	// An empty PATCH changes nothing, not even updatedAt.
	e.Clock.Advance(time.Minute)
	same := e.Do(t, "PATCH", "/v1/plugins/"+id, map[string]any{}, owner.As()...).Expect(t, http.StatusOK).JSON(t)["item"]
	if !reflect.DeepEqual(same, patched) {
		t.Fatalf("empty patch changed the plugin: %v", same)
	}

	// The list holds both, oldest first.
	list := e.Do(t, "GET", "/v1/plugins", nil, owner.As()...).Expect(t, http.StatusOK).JSON(t)["items"].([]any)
	if len(list) != 2 || list[0].(map[string]any)["id"] != id {
		t.Fatalf("list: %v", list)
	}

	// DELETE keeps the row, marks it, takes it out of every marketplace and the list.
	mkt := newMarketplace(t, e, owner, "Engineering")
	addPlugin(t, e, mkt, map[string]any{"pluginId": id}, owner.As()...).Expect(t, http.StatusCreated)
	deleted := e.Do(t, "DELETE", "/v1/plugins/"+id, nil, owner.As()...).Expect(t, http.StatusOK).JSON(t)["item"].(map[string]any)
	deletedAt := stamp(apitest.Start.Add(2 * time.Minute))
	if deleted["status"] != "deleted" || deleted["deletedAt"] != deletedAt || deleted["memberCount"] != float64(0) {
		t.Fatalf("deleted: %v", deleted)
	}
	if n := count(t, e, "marketplace_plugins", "plugin_id = $1 AND removed_at IS NOT NULL", id); n != 1 {
		t.Fatalf("deletion left the plugin in its marketplace")
	}
	list = e.Do(t, "GET", "/v1/plugins", nil, owner.As()...).Expect(t, http.StatusOK).JSON(t)["items"].([]any)
	if len(list) != 1 {
		t.Fatalf("a deleted plugin is listed: %v", list)
	}
	e.Do(t, "GET", "/v1/plugins/"+id, nil, owner.As()...).Expect(t, http.StatusOK)

	// Deleted is final: no change, no second deletion time.
	before := digest(t, e)
	e.Do(t, "PATCH", "/v1/plugins/"+id, map[string]any{"status": "active"}, owner.As()...).ExpectError(t, http.StatusConflict, "plugin_deleted")
	e.Clock.Advance(time.Minute)
	again := e.Do(t, "DELETE", "/v1/plugins/"+id, nil, owner.As()...).Expect(t, http.StatusOK).JSON(t)["item"].(map[string]any)
	if again["deletedAt"] != deletedAt {
		t.Fatalf("second delete moved deletedAt: %v", again)
	}
	addPlugin(t, e, mkt, map[string]any{"pluginId": id}, owner.As()...).ExpectError(t, http.StatusNotFound, "plugin_not_found")
	expectNoWrites(t, e, before)
}

func TestPluginInvalidRequest(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	id := newPlugin(t, e, owner, "Search")
	long := func(n int) string { return strings.Repeat("x", n) }
	cases := []struct {
		name string
		body any
		path []any
	}{
		{"missing name", map[string]any{}, []any{"name"}},
		{"null name", map[string]any{"name": nil}, []any{"name"}},
		{"empty name", map[string]any{"name": ""}, []any{"name"}},
		{"blank name", map[string]any{"name": "   "}, []any{"name"}},
		{"256-character name", map[string]any{"name": long(256)}, []any{"name"}},
		{"NUL in name", map[string]any{"name": "a\x00b"}, []any{"name"}},
		{"empty description", map[string]any{"name": "n", "description": ""}, []any{"description"}},
		{"1025-character URL", map[string]any{"name": "n", "sourceRepositoryUrl": long(1025)}, []any{"sourceRepositoryUrl"}},
		{"empty URL", map[string]any{"name": "n", "sourceRepositoryUrl": ""}, []any{"sourceRepositoryUrl"}},
		{"unknown format", map[string]any{"name": "n", "sourceFormat": "zip"}, []any{"sourceFormat"}},
		{"101-character schema version", map[string]any{"name": "n", "sourceSchemaVersion": long(101)}, []any{"sourceSchemaVersion"}},
		{"status deleted", map[string]any{"name": "n", "status": "deleted"}, []any{"status"}},
		{"status null", map[string]any{"name": "n", "status": nil}, []any{"status"}},
		{"unknown status", map[string]any{"name": "n", "status": "paused"}, []any{"status"}},
		{"unknown field", map[string]any{"name": "n", "owner": "me"}, []any{"owner"}},
		{"manifest not an object", map[string]any{"name": "n", "manifest": []any{}}, []any{"manifest"}},
		{"manifest with a bad format", map[string]any{"name": "n", "manifest": json.RawMessage(strings.Replace(manifest, `"service-extension-manifest"`, `"zip"`, 1))},
			[]any{"manifest", "source", "format"}},
		{"manifest with schemaVersion 2", map[string]any{"name": "n", "manifest": json.RawMessage(strings.Replace(manifest, `"schemaVersion": 1`, `"schemaVersion": 2`, 1))},
			[]any{"manifest", "schemaVersion"}},
		// The decoder refuses a NUL anywhere in a body, with the exact path (jsonx).
		{"manifest that jsonb cannot hold", map[string]any{"name": "n", "manifest": json.RawMessage(strings.Replace(manifest, `"x"`, `"\u0000"`, 1))},
			[]any{"manifest", "source", "vendorHint"}},
		{"manifest with an unpaired surrogate", map[string]any{"name": "n", "manifest": json.RawMessage(strings.Replace(manifest, `"x"`, `"\udead"`, 1))},
			[]any{"manifest", "source", "vendorHint"}},
		// encoding/json would store an unpaired surrogate escape as U+FFFD, a character
		// the client never sent: refused in the plugin's own fields as in its manifest.
		{"unpaired surrogate in name", json.RawMessage(`{"name":"\ud800"}`), []any{"name"}},
		{"unpaired surrogate in description", json.RawMessage(`{"name":"n","description":"a\udc00"}`), []any{"description"}},
	}
	before := digest(t, e)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body := e.Do(t, "POST", "/v1/plugins", tc.body, owner.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
			first := body["details"].([]any)[0].(map[string]any)
			if !reflect.DeepEqual(first["path"], tc.path) {
				t.Fatalf("path %v, want %v (%v)", first["path"], tc.path, body)
			}
			if patch, ok := tc.body.(map[string]any); ok && tc.path[0] != "name" { // the same rules guard updates
				delete(patch, "name")
				e.Do(t, "PATCH", "/v1/plugins/"+id, patch, owner.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
			}
		})
	}
	e.Do(t, "PATCH", "/v1/plugins/"+id, map[string]any{"name": nil}, owner.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
	e.Do(t, "PATCH", "/v1/plugins/"+id, json.RawMessage(`{"description":"\ud800 x"}`), owner.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
	e.Do(t, "PATCH", "/v1/plugins/plg_1", map[string]any{}, owner.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
	e.Do(t, "GET", "/v1/plugins/mkt_1", nil, owner.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
	e.Do(t, "DELETE", "/v1/plugins/x", nil, owner.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
	expectNoWrites(t, e, before)

	// The bounds themselves are accepted.
	newPluginWith(t, e, owner, map[string]any{"name": strings.Repeat("é", 255), "sourceRepositoryUrl": long(1024),
		"sourceSchemaVersion": long(100), "description": "d"})
}

func TestPluginExtension(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")

	// A manifest is kept with its unknown properties, and shown in the projection.
	item := newPluginWith(t, e, owner, map[string]any{"name": "Search", "description": "Finds.", "manifest": json.RawMessage(manifest)})
	ext := item["extension"].(map[string]any)
	if ext["id"] != item["id"] || ext["name"] != "Search" || ext["description"] != "Finds." ||
		ext["sourceFormat"] != "service-extension-manifest" {
		t.Fatalf("extension: %v", ext)
	}
	var sent, kept any
	dec := json.NewDecoder(strings.NewReader(manifest))
	dec.UseNumber()
	if err := dec.Decode(&sent); err != nil {
		t.Fatal(err)
	}
	r := e.Do(t, "GET", "/v1/plugins/"+item["id"].(string), nil, owner.As()...).Expect(t, http.StatusOK)
	var out struct {
		Item struct {
			Extension struct{ Manifest json.RawMessage }
		}
	}
	r.Decode(t, &out)
	dec = json.NewDecoder(strings.NewReader(string(out.Item.Extension.Manifest)))
	dec.UseNumber()
	if err := dec.Decode(&kept); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(sent, kept) {
		t.Fatalf("manifest changed:\nsent %v\nkept %v", sent, kept)
	}
	if item["sourceFormat"] != nil {
		t.Fatalf("the plugin's own sourceFormat stays as sent (null): %v", item["sourceFormat"])
	}

	// The plugin's sourceFormat wins in the projection; null manifest clears it.
	id := item["id"].(string)
	patched := e.Do(t, "PATCH", "/v1/plugins/"+id, map[string]any{"sourceFormat": "manual"}, owner.As()...).
		Expect(t, http.StatusOK).JSON(t)["item"].(map[string]any)
	if patched["extension"].(map[string]any)["sourceFormat"] != "manual" {
		t.Fatalf("projection: %v", patched["extension"])
	}
	patched = e.Do(t, "PATCH", "/v1/plugins/"+id, map[string]any{"manifest": nil}, owner.As()...).
		Expect(t, http.StatusOK).JSON(t)["item"].(map[string]any)
	if patched["extension"] != nil {
		t.Fatalf("a manual plugin without manifest has no extension: %v", patched["extension"])
	}

	// The extension-manifest format shows a projection before a manifest exists.
	pending := newPluginWith(t, e, owner, map[string]any{"name": "Pending", "sourceFormat": "service-extension-manifest"})
	pext := pending["extension"].(map[string]any)
	if pext["manifest"] != nil || pext["sourceFormat"] != "service-extension-manifest" || pext["description"] != nil {
		t.Fatalf("pending extension: %v", pext)
	}

	// Sending back the stored manifest (in Postgres' key order) is no change.
	e.Clock.Advance(time.Minute)
	withManifest := newPluginWith(t, e, owner, map[string]any{"name": "Again", "manifest": json.RawMessage(manifest)})
	var storedOut struct {
		Item struct {
			Extension struct{ Manifest json.RawMessage }
		}
	}
	e.Do(t, "GET", "/v1/plugins/"+withManifest["id"].(string), nil, owner.As()...).Expect(t, http.StatusOK).Decode(t, &storedOut)
	stored := storedOut.Item.Extension.Manifest // raw, so the large number keeps its digits
	e.Clock.Advance(time.Minute)
	unchanged := e.Do(t, "PATCH", "/v1/plugins/"+withManifest["id"].(string), map[string]any{"manifest": stored}, owner.As()...).
		Expect(t, http.StatusOK).JSON(t)["item"].(map[string]any)
	if unchanged["updatedAt"] != withManifest["updatedAt"] {
		t.Fatalf("re-sending the same manifest counted as a change")
	}
}

func TestPluginPermissions(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	admin := e.AddMember(t, owner, "ada", "admin")
	member := e.AddMember(t, owner, "bob", "member")
	editor := e.AddMember(t, owner, "eve", "member")
	manager := e.AddMember(t, owner, "max", "member")
	id := newPlugin(t, e, admin, "Search")
	loose := newPlugin(t, e, owner, "In no marketplace")
	mkt := newMarketplace(t, e, owner, "Engineering")
	setGrants(t, e, owner, mkt, memberGrant(editor, "editor"), memberGrant(manager, "manager"))
	addPlugin(t, e, mkt, map[string]any{"pluginId": id}, owner.As()...).Expect(t, http.StatusCreated)
	rival := e.NewOrg(t, "Rival")

	before := digest(t, e)
	e.Do(t, "POST", "/v1/plugins", map[string]any{"name": "x"}, member.As()...).ExpectError(t, http.StatusForbidden, "forbidden")
	e.Do(t, "POST", "/v1/plugins", map[string]any{}, editor.As()...).ExpectError(t, http.StatusForbidden, "forbidden") // role before body
	e.Do(t, "POST", "/v1/plugins", map[string]any{"name": "x"}).ExpectError(t, http.StatusUnauthorized, "unauthorized")
	e.Do(t, "PATCH", "/v1/plugins/"+id, map[string]any{"name": "x"}, member.As()...).ExpectError(t, http.StatusForbidden, "forbidden")
	e.Do(t, "PATCH", "/v1/plugins/"+loose, map[string]any{"name": "x"}, editor.As()...).ExpectError(t, http.StatusForbidden, "forbidden")
	e.Do(t, "DELETE", "/v1/plugins/"+id, nil, editor.As()...).ExpectError(t, http.StatusForbidden, "forbidden")
	e.Do(t, "DELETE", "/v1/plugins/"+id, nil, member.As()...).ExpectError(t, http.StatusForbidden, "forbidden")
	// Another organization's plugin does not exist for its members, whoever they are.
	e.Do(t, "GET", "/v1/plugins/"+id, nil, rival.As()...).ExpectError(t, http.StatusNotFound, "plugin_not_found")
	e.Do(t, "PATCH", "/v1/plugins/"+id, map[string]any{"name": "x"}, rival.As()...).ExpectError(t, http.StatusNotFound, "plugin_not_found")
	e.Do(t, "DELETE", "/v1/plugins/"+id, nil, rival.As()...).ExpectError(t, http.StatusNotFound, "plugin_not_found")
	e.Do(t, "DELETE", "/v1/plugins/"+missing(typeid.Plugin), nil, owner.As()...).ExpectError(t, http.StatusNotFound, "plugin_not_found")
	if items := e.Do(t, "GET", "/v1/plugins", nil, rival.As()...).Expect(t, http.StatusOK).JSON(t)["items"].([]any); len(items) != 0 {
		t.Fatalf("another organization's plugins are listed: %v", items)
	}
	expectNoWrites(t, e, before)

	// Every member reads the catalogue; the marketplaces shown are those they may see.
	for _, m := range []apitest.Member{member, editor} {
		item := e.Do(t, "GET", "/v1/plugins/"+id, nil, m.As()...).Expect(t, http.StatusOK).JSON(t)["item"].(map[string]any)
		wantVisible := 0
		if m.MemberID == editor.MemberID {
			wantVisible = 1
		}
		if item["memberCount"] != float64(1) || len(item["marketplaces"].([]any)) != wantVisible {
			t.Fatalf("%s sees %v", m.Name, item)
		}
	}

	// An editor of a marketplace containing the plugin may change it; its manager may delete it.
	e.Do(t, "PATCH", "/v1/plugins/"+id, map[string]any{"name": "Renamed"}, editor.As()...).Expect(t, http.StatusOK)
	e.Do(t, "DELETE", "/v1/plugins/"+id, nil, manager.As()...).Expect(t, http.StatusOK)
	// Deleted, it left the marketplace, so the grant no longer reaches it.
	e.Do(t, "DELETE", "/v1/plugins/"+id, nil, manager.As()...).ExpectError(t, http.StatusForbidden, "forbidden")
	e.Do(t, "DELETE", "/v1/plugins/"+id, nil, admin.As()...).Expect(t, http.StatusOK)
}

// TestPluginRankIsLowestOverItsMarketplaces: a member's rank on a plugin is their lowest
// over the marketplaces it is in. An editor may add any plugin of the organization to a
// marketplace they manage; that must not let them rewrite or delete a plugin that a
// marketplace they hold no rank on distributes (the deletion would take it out of that
// one too). Reading is unchanged: every member reads the catalogue.
func TestPluginRankIsLowestOverItsMarketplaces(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	bob := e.AddMember(t, owner, "bob", "member")
	official := newMarketplace(t, e, owner, "Official")
	sandbox := newMarketplace(t, e, owner, "Bob's sandbox")
	setGrants(t, e, owner, sandbox, memberGrant(bob, "manager"))
	p := newPluginWith(t, e, owner, map[string]any{"name": "Vetted", "sourceRepositoryUrl": "https://github.com/acme/vetted"})["id"].(string)
	addPlugin(t, e, official, map[string]any{"pluginId": p}, owner.As()...).Expect(t, http.StatusCreated)
	mine := newPlugin(t, e, owner, "Bob's own")
	addPlugin(t, e, sandbox, map[string]any{"pluginId": mine}, owner.As()...).Expect(t, http.StatusCreated)

	patch := map[string]any{"sourceRepositoryUrl": "https://evil.example/x"}
	e.Do(t, "PATCH", "/v1/plugins/"+p, patch, bob.As()...).ExpectError(t, http.StatusForbidden, "forbidden")
	// Bob may add the vetted plugin to the marketplace he manages...
	addPlugin(t, e, sandbox, map[string]any{"pluginId": p}, bob.As()...).Expect(t, http.StatusCreated)
	// ...but that gives him no say over it: Official, where he has no rank, still has it.
	before := digest(t, e)
	e.Do(t, "PATCH", "/v1/plugins/"+p, patch, bob.As()...).ExpectError(t, http.StatusForbidden, "forbidden")
	e.Do(t, "DELETE", "/v1/plugins/"+p, nil, bob.As()...).ExpectError(t, http.StatusForbidden, "forbidden")
	expectNoWrites(t, e, before)
	// Reading needs no rank; he sees the marketplace he may see, and the count of both.
	item := e.Do(t, "GET", "/v1/plugins/"+p, nil, bob.As()...).Expect(t, http.StatusOK).JSON(t)["item"].(map[string]any)
	if item["memberCount"] != float64(2) || len(item["marketplaces"].([]any)) != 1 {
		t.Fatalf("bob reads %v", item)
	}
	// A viewer grant on Official is not enough either; manager there and in the sandbox is.
	setGrants(t, e, owner, official, memberGrant(bob, "viewer"))
	e.Do(t, "PATCH", "/v1/plugins/"+p, patch, bob.As()...).ExpectError(t, http.StatusForbidden, "forbidden")
	setGrants(t, e, owner, official, memberGrant(bob, "editor"))
	e.Do(t, "PATCH", "/v1/plugins/"+p, map[string]any{"name": "Vetted 2"}, bob.As()...).Expect(t, http.StatusOK)
	e.Do(t, "DELETE", "/v1/plugins/"+p, nil, bob.As()...).ExpectError(t, http.StatusForbidden, "forbidden")
	setGrants(t, e, owner, official, memberGrant(bob, "manager"))
	e.Do(t, "DELETE", "/v1/plugins/"+p, nil, bob.As()...).Expect(t, http.StatusOK)
	// A plugin only his marketplace distributes, put there by the owner, is his to change;
	// owners keep every right.
	e.Do(t, "PATCH", "/v1/plugins/"+mine, map[string]any{"name": "Bob's own 2"}, bob.As()...).Expect(t, http.StatusOK)
	e.Do(t, "PATCH", "/v1/plugins/"+mine, map[string]any{"name": "Bob's own 3"}, owner.As()...).Expect(t, http.StatusOK)
}

// TestMembersCannotAdoptAPluginNoAdminDistributed: a plugin in no marketplace (an admin's
// draft, one taken out of Official for a while) is changed by owners and admins only. An
// editor may add it to a marketplace they edit (the specification's add answers 201), and
// it was then in their marketplaces alone, so they could rewrite its source or delete it
// in two requests; two editors could hand it to each other the same way. Only a
// marketplace an owner or admin put it in makes it members' to care for.
func TestMembersCannotAdoptAPluginNoAdminDistributed(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	bob := e.AddMember(t, owner, "bob", "member")
	carol := e.AddMember(t, owner, "carol", "member")
	sandbox := newMarketplace(t, e, owner, "Bob's sandbox")
	shared := newMarketplace(t, e, owner, "Shared")
	setGrants(t, e, owner, sandbox, memberGrant(bob, "manager"))
	setGrants(t, e, owner, shared, memberGrant(bob, "manager"), memberGrant(carol, "editor"))
	draft := newPluginWith(t, e, owner, map[string]any{"name": "Draft", "sourceRepositoryUrl": "https://github.com/acme/draft"})["id"].(string)
	handed := newPlugin(t, e, owner, "Handed over")
	patch := map[string]any{"sourceRepositoryUrl": "https://evil.example/x"}

	addPlugin(t, e, sandbox, map[string]any{"pluginId": draft}, bob.As()...).Expect(t, http.StatusCreated)
	addPlugin(t, e, shared, map[string]any{"pluginId": handed}, carol.As()...).Expect(t, http.StatusCreated)
	before := digest(t, e)
	for _, p := range []string{draft, handed} {
		e.Do(t, "PATCH", "/v1/plugins/"+p, patch, bob.As()...).ExpectError(t, http.StatusForbidden, "forbidden")
		e.Do(t, "DELETE", "/v1/plugins/"+p, nil, bob.As()...).ExpectError(t, http.StatusForbidden, "forbidden")
	}
	expectNoWrites(t, e, before)
	// Once the owner distributes it where bob manages, it is his to care for.
	addPlugin(t, e, shared, map[string]any{"pluginId": draft}, owner.As()...).Expect(t, http.StatusCreated)
	e.Do(t, "PATCH", "/v1/plugins/"+draft, map[string]any{"name": "Draft 2"}, bob.As()...).Expect(t, http.StatusOK)
}

// TestDeletePluginNeedsFreshSignIn: deleting a plugin takes it out of every marketplace,
// so an owner or admin whose session is stale is refused (403 reauth, nothing written) as
// on the removal from one marketplace. API keys and members acting through a grant are
// never asked, and a new sign-in is enough.
func TestDeletePluginNeedsFreshSignIn(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	admin := e.AddMember(t, owner, "ada", "admin")
	manager := e.AddMember(t, owner, "max", "member")
	m := newMarketplace(t, e, owner, "Official")
	setGrants(t, e, owner, m, memberGrant(manager, "manager"))
	ownerKey := e.APIKey(t, owner)
	plugins := make([]string, 4)
	for i := range plugins {
		plugins[i] = newPlugin(t, e, owner, "P"+string(rune('a'+i)))
		addPlugin(t, e, m, map[string]any{"pluginId": plugins[i]}, owner.As()...).Expect(t, http.StatusCreated)
	}
	loose := newPlugin(t, e, owner, "In no marketplace")
	e.Clock.Advance(time.Hour) // the sessions are now stale

	before := digest(t, e)
	e.Do(t, "DELETE", "/v1/marketplaces/"+m+"/plugins/"+plugins[0], nil, owner.As()...).ExpectError(t, http.StatusForbidden, "reauth")
	for _, who := range []apitest.Member{owner, admin} {
		body := e.Do(t, "DELETE", "/v1/plugins/"+plugins[0], nil, who.As()...).ExpectError(t, http.StatusForbidden, "reauth")
		if body["reason"] != "fresh_auth_required" {
			t.Fatalf("reauth body: %v", body)
		}
	}
	e.Do(t, "DELETE", "/v1/plugins/"+loose, nil, owner.As()...).ExpectError(t, http.StatusForbidden, "reauth")
	expectNoWrites(t, e, before)
	if n := count(t, e, "marketplace_plugins", "plugin_id = $1 AND removed_at IS NULL", plugins[0]); n != 1 {
		t.Fatalf("a stale session took the plugin out of its marketplace")
	}

	e.Do(t, "DELETE", "/v1/plugins/"+plugins[1], nil, apitest.Key(ownerKey)).Expect(t, http.StatusOK)
	e.Do(t, "DELETE", "/v1/plugins/"+plugins[2], nil, manager.As()...).Expect(t, http.StatusOK)
	fresh := []apitest.Opt{apitest.Session(signIn(t, e, owner.User)), apitest.Org(owner.OrgID)}
	e.Do(t, "DELETE", "/v1/plugins/"+plugins[3], nil, fresh...).Expect(t, http.StatusOK)
	e.Do(t, "DELETE", "/v1/plugins/"+loose, nil, fresh...).Expect(t, http.StatusOK)
}

// TestDeletePluginAuditNamesTheMarketplacesItLeft: deleting a plugin takes it out of
// every marketplace it is in, each a removal that marketplace.plugin.remove records when
// done one at a time. The plugin.delete event named the plugin only, so a marketplace's
// trail lost the plugin without a word; it now names the marketplaces it left (not one it
// had already left before).
func TestDeletePluginAuditNamesTheMarketplacesItLeft(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	plg := newPlugin(t, e, owner, "Search")
	var in []string
	for _, name := range []string{"Engineering", "Design"} {
		mkt := newMarketplace(t, e, owner, name)
		addPlugin(t, e, mkt, map[string]any{"pluginId": plg}, owner.As()...).Expect(t, http.StatusCreated)
		in = append(in, mkt)
	}
	left := newMarketplace(t, e, owner, "Old")
	addPlugin(t, e, left, map[string]any{"pluginId": plg}, owner.As()...).Expect(t, http.StatusCreated)
	e.Do(t, "DELETE", "/v1/marketplaces/"+left+"/plugins/"+plg, nil, owner.As()...).Expect(t, http.StatusNoContent)
	loose := newPlugin(t, e, owner, "In none")

	e.Do(t, "DELETE", "/v1/plugins/"+plg, nil, owner.As()...).Expect(t, http.StatusOK)
	e.Do(t, "DELETE", "/v1/plugins/"+loose, nil, owner.As()...).Expect(t, http.StatusOK)
	slices.Sort(in)
	for id, want := range map[string]map[string]any{
		plg:   {"name": "Search", "marketplaceIds": []any{in[0], in[1]}},
		loose: {"name": "In none", "marketplaceIds": []any{}},
	} {
		var raw []byte
		if err := e.Store.Pool.QueryRow(context.Background(), `SELECT details FROM audit_events
			WHERE action = 'plugin.delete' AND target_id = $1`, id).Scan(&raw); err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("plugin.delete details %v, want %v", got, want)
		}
	}
}
