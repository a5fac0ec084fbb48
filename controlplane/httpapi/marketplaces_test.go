package httpapi_test

import (
	"context"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/internal/apitest"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
)

func TestMarketplaceCreateAndRead(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	member := e.AddMember(t, owner, "bob", "member")
	rival := e.NewOrg(t, "Rival")

	r := e.Do(t, "POST", "/v1/marketplaces", map[string]any{"name": "Engineering"}, owner.As()...).Expect(t, http.StatusCreated).JSON(t)
	item := r["item"].(map[string]any)
	id := item["id"].(string)
	if err := typeid.Check(id, typeid.Marketplace); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"organizationId": owner.OrgID, "name": "Engineering", "createdByOrgMembershipId": owner.MemberID,
		"createdAt": stamp(apitest.Start), "updatedAt": stamp(apitest.Start), "pluginCount": float64(0),
		"callerRole": "manager", "access": []any{}}
	for k, v := range want {
		if !reflect.DeepEqual(item[k], v) {
			t.Errorf("%s = %v, want %v", k, item[k], v)
		}
	}
	second := newMarketplace(t, e, owner, "Design")

	before := digest(t, e)
	for name, body := range map[string]any{
		"missing name": map[string]any{}, "empty name": map[string]any{"name": ""}, "blank name": map[string]any{"name": " "},
		"256-character name": map[string]any{"name": strings.Repeat("m", 256)}, "unknown field": map[string]any{"name": "a", "x": 1},
	} {
		t.Run(name, func(t *testing.T) {
			e.Do(t, "POST", "/v1/marketplaces", body, owner.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
		})
	}
	e.Do(t, "POST", "/v1/marketplaces", map[string]any{"name": "Mine"}, member.As()...).ExpectError(t, http.StatusForbidden, "forbidden")
	e.Do(t, "POST", "/v1/marketplaces", map[string]any{"name": "Mine"}).ExpectError(t, http.StatusUnauthorized, "unauthorized")
	expectNoWrites(t, e, before)

	// Owners see every marketplace; a member only those a grant gives them.
	items := e.Do(t, "GET", "/v1/marketplaces", nil, owner.As()...).Expect(t, http.StatusOK).JSON(t)["items"].([]any)
	if len(items) != 2 || items[0].(map[string]any)["id"] != id {
		t.Fatalf("owner's list: %v", items)
	}
	if items := e.Do(t, "GET", "/v1/marketplaces", nil, member.As()...).Expect(t, http.StatusOK).JSON(t)["items"].([]any); len(items) != 0 {
		t.Fatalf("member's list before any grant: %v", items)
	}
	e.Do(t, "GET", "/v1/marketplaces/"+id, nil, member.As()...).ExpectError(t, http.StatusNotFound, "marketplace_not_found")
	setGrants(t, e, owner, second, memberGrant(member, "viewer"))
	items = e.Do(t, "GET", "/v1/marketplaces", nil, member.As()...).Expect(t, http.StatusOK).JSON(t)["items"].([]any)
	if len(items) != 1 || items[0].(map[string]any)["id"] != second || items[0].(map[string]any)["callerRole"] != "viewer" {
		t.Fatalf("member's list: %v", items)
	}
	e.Do(t, "GET", "/v1/marketplaces/"+second, nil, member.As()...).Expect(t, http.StatusOK)

	// Ids of another organization do not exist for its members.
	e.Do(t, "GET", "/v1/marketplaces/"+id, nil, rival.As()...).ExpectError(t, http.StatusNotFound, "marketplace_not_found")
	e.Do(t, "GET", "/v1/marketplaces/"+missing(typeid.Marketplace), nil, owner.As()...).ExpectError(t, http.StatusNotFound, "marketplace_not_found")
	e.Do(t, "GET", "/v1/marketplaces/"+strings.Replace(id, "mkt_", "plg_", 1), nil, owner.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
	if items := e.Do(t, "GET", "/v1/marketplaces", nil, rival.As()...).Expect(t, http.StatusOK).JSON(t)["items"].([]any); len(items) != 0 {
		t.Fatalf("rival's list: %v", items)
	}
}

func TestMarketplaceAccess(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	bob := e.AddMember(t, owner, "bob", "member")
	carol := e.AddMember(t, owner, "carol", "member")
	gone := e.AddMember(t, owner, "gone", "member")
	team := newTeam(t, e, owner, "Platform", carol)
	oldTeam := newTeam(t, e, owner, "Old")
	mkt := newMarketplace(t, e, owner, "Engineering")
	rival := e.NewOrg(t, "Rival")
	rivalTeam := newTeam(t, e, rival, "Theirs")
	path := "/v1/marketplaces/" + mkt + "/access"

	e.Clock.Advance(time.Minute)
	r := e.Do(t, "PUT", path, map[string]any{"grants": []any{
		memberGrant(bob, "manager"), teamGrant(team, "editor"), teamGrant(oldTeam, "viewer"), orgGrant("viewer"), memberGrant(gone, "editor"),
	}}, owner.As()...).Expect(t, http.StatusOK).JSON(t)
	item := r["item"].(map[string]any)
	if item["updatedAt"] != stamp(apitest.Start.Add(time.Minute)) || len(item["access"].([]any)) != 5 {
		t.Fatalf("after PUT: %v", item)
	}

	// Grants to removed members and deleted teams give nothing and are not shown.
	e.Do(t, "DELETE", "/v1/members/"+gone.MemberID, nil, owner.As()...).Expect(t, http.StatusNoContent)
	e.Do(t, "DELETE", "/v1/teams/"+oldTeam, nil, owner.As()...).Expect(t, http.StatusNoContent)
	access := e.Do(t, "GET", "/v1/marketplaces/"+mkt, nil, bob.As()...).Expect(t, http.StatusOK).JSON(t)["item"].(map[string]any)["access"].([]any)
	wantAccess := []any{
		map[string]any{"memberId": nil, "teamId": nil, "organization": true, "role": "viewer"},
		map[string]any{"memberId": nil, "teamId": team, "organization": false, "role": "editor"},
		map[string]any{"memberId": bob.MemberID, "teamId": nil, "organization": false, "role": "manager"},
	}
	if !reflect.DeepEqual(access, wantAccess) {
		t.Fatalf("access %v\nwant %v", access, wantAccess)
	}

	// What GET shows can be sent back as it is, here by bob, a manager through his grant.
	e.Do(t, "PUT", path, map[string]any{"grants": access}, bob.As()...).Expect(t, http.StatusOK)
	for m, role := range map[*apitest.Member]string{&bob: "manager", &carol: "editor"} {
		got := e.Do(t, "GET", "/v1/marketplaces/"+mkt, nil, m.As()...).Expect(t, http.StatusOK).JSON(t)["item"].(map[string]any)["callerRole"]
		if got != role {
			t.Fatalf("%s's role %v, want %s", m.Name, got, role)
		}
	}

	before := digest(t, e)
	cases := []struct {
		name   string
		body   any
		detail []any
	}{
		{"missing grants", map[string]any{}, []any{"grants"}},
		{"null grants", map[string]any{"grants": nil}, []any{"grants"}},
		{"no target", map[string]any{"grants": []any{map[string]any{"role": "viewer"}}}, []any{"grants", float64(0)}},
		{"organization false only", map[string]any{"grants": []any{map[string]any{"organization": false, "role": "viewer"}}}, []any{"grants", float64(0)}},
		{"two targets", map[string]any{"grants": []any{map[string]any{"memberId": bob.MemberID, "organization": true, "role": "viewer"}}}, []any{"grants", float64(0)}},
		{"repeated target", map[string]any{"grants": []any{orgGrant("viewer"), orgGrant("editor")}}, []any{"grants", float64(1)}},
		{"bad role", map[string]any{"grants": []any{orgGrant("owner")}}, []any{"grants", float64(0), "role"}},
		{"missing role", map[string]any{"grants": []any{map[string]any{"organization": true}}}, []any{"grants", float64(0), "role"}},
		{"malformed member id", map[string]any{"grants": []any{map[string]any{"memberId": "om_1", "role": "viewer"}}}, []any{"grants", float64(0), "memberId"}},
		{"team id as member id", map[string]any{"grants": []any{map[string]any{"memberId": team, "role": "viewer"}}}, []any{"grants", float64(0), "memberId"}},
		{"unknown grant field", map[string]any{"grants": []any{map[string]any{"organization": true, "role": "viewer", "until": "x"}}}, nil},
		{"unknown member", map[string]any{"grants": []any{map[string]any{"memberId": missing(typeid.Member), "role": "viewer"}}}, []any{"grants", float64(0), "memberId"}},
		{"removed member", map[string]any{"grants": []any{memberGrant(gone, "viewer")}}, []any{"grants", float64(0), "memberId"}},
		{"member of another organization", map[string]any{"grants": []any{memberGrant(rival, "viewer")}}, []any{"grants", float64(0), "memberId"}},
		{"team of another organization", map[string]any{"grants": []any{teamGrant(rivalTeam, "viewer")}}, []any{"grants", float64(0), "teamId"}},
		{"deleted team", map[string]any{"grants": []any{teamGrant(oldTeam, "viewer")}}, []any{"grants", float64(0), "teamId"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body := e.Do(t, "PUT", path, tc.body, owner.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
			if tc.detail != nil && !reflect.DeepEqual(body["details"].([]any)[0].(map[string]any)["path"], tc.detail) {
				t.Fatalf("details %v, want path %v", body["details"], tc.detail)
			}
		})
	}
	e.Do(t, "PUT", path, map[string]any{"grants": []any{}}, carol.As()...).ExpectError(t, http.StatusForbidden, "forbidden")
	e.Do(t, "PUT", path, map[string]any{"grants": []any{}}, rival.As()...).ExpectError(t, http.StatusNotFound, "marketplace_not_found")
	e.Do(t, "PUT", path, map[string]any{"grants": []any{}}).ExpectError(t, http.StatusUnauthorized, "unauthorized")
	e.Do(t, "PUT", "/v1/marketplaces/"+missing(typeid.Marketplace)+"/access", map[string]any{"grants": []any{}}, owner.As()...).
		ExpectError(t, http.StatusNotFound, "marketplace_not_found")
	expectNoWrites(t, e, before)

	// An empty list takes every grant away: bob no longer sees the marketplace.
	setGrants(t, e, owner, mkt)
	e.Do(t, "GET", "/v1/marketplaces/"+mkt, nil, bob.As()...).ExpectError(t, http.StatusNotFound, "marketplace_not_found")
	if n := count(t, e, "marketplace_grants", "marketplace_id = $1", mkt); n != 0 {
		t.Fatalf("%d grants left", n)
	}
	// Writing is another matter: a member of the organization without any grant lacks the
	// permission (403, as on every marketplace write), and nothing changes.
	before = digest(t, e)
	e.Do(t, "PUT", path, map[string]any{"grants": []any{memberGrant(bob, "manager")}}, bob.As()...).
		ExpectError(t, http.StatusForbidden, "forbidden")
	expectNoWrites(t, e, before)
}

// TestMarketplaceAccessIsAudited: a replacement of the grants records the list it
// replaced and the new one. It recorded their number only, so the trail could not tell
// who had been given, or had lost, which role (a manager granting themselves, or a
// friend, a role looked like any other edit of the list).
func TestMarketplaceAccessIsAudited(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	bob := e.AddMember(t, owner, "bob", "member")
	carol := e.AddMember(t, owner, "carol", "member")
	mkt := newMarketplace(t, e, owner, "Engineering")
	setGrants(t, e, owner, mkt, memberGrant(bob, "manager"), orgGrant("viewer"))
	e.Clock.Advance(time.Minute)
	setGrants(t, e, bob, mkt, memberGrant(bob, "manager"), memberGrant(carol, "manager"))

	rows, err := e.Store.Pool.Query(context.Background(), `SELECT actor_member_id, details FROM audit_events
		WHERE action = 'marketplace.access' AND target_id = $1 ORDER BY occurred_at, id`, mkt)
	if err != nil {
		t.Fatal(err)
	}
	type event struct {
		Actor   string
		Details map[string]any
	}
	events, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (event, error) {
		var ev event
		err := r.Scan(&ev.Actor, &ev.Details)
		return ev, err
	})
	if err != nil {
		t.Fatal(err)
	}
	grant := func(member, role string, organization bool) map[string]any {
		g := map[string]any{"memberId": nil, "teamId": nil, "organization": organization, "role": role}
		if member != "" {
			g["memberId"] = member
		}
		return g
	}
	want := []event{
		{owner.MemberID, map[string]any{"grants": float64(2), "before": []any{},
			"after": []any{grant(bob.MemberID, "manager", false), grant("", "viewer", true)}}},
		// As the access list reads: the organization's grant first.
		{bob.MemberID, map[string]any{"grants": float64(2),
			"before": []any{grant("", "viewer", true), grant(bob.MemberID, "manager", false)},
			"after":  []any{grant(bob.MemberID, "manager", false), grant(carol.MemberID, "manager", false)}}},
	}
	if !reflect.DeepEqual(events, want) {
		t.Fatalf("audit events\n got %v\nwant %v", events, want)
	}
}
