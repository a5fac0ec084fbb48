package httpapi_test

import (
	"context"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/controlplane/jsonx"
	"github.com/tollgate-dev/tollgate/internal/apitest"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
)

// pluginTables are every table the plugin and marketplace routes write.
var pluginTables = []string{"plugins", "marketplaces", "marketplace_grants", "marketplace_plugins", "audit_events"}

// digest fingerprints the full contents of the tables the plugin routes write, so a test
// can prove that a refused request changed nothing (no insert, no update).
func digest(t testing.TB, e *apitest.Env) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, table := range pluginTables {
		var d string
		err := e.Store.Pool.QueryRow(context.Background(), `SELECT count(*) || ':' ||
			md5(coalesce(string_agg(x::text, '|' ORDER BY x::text), '')) FROM `+table+` x`).Scan(&d)
		if err != nil {
			t.Fatal(err)
		}
		out[table] = d
	}
	return out
}

// expectNoWrites fails unless the tables are as they were.
func expectNoWrites(t testing.TB, e *apitest.Env, before map[string]string) {
	t.Helper()
	if after := digest(t, e); !reflect.DeepEqual(before, after) {
		t.Fatalf("a refused request wrote:\nbefore %v\nafter  %v", before, after)
	}
}

// count counts rows of a table matching a condition.
func count(t testing.TB, e *apitest.Env, table, where string, args ...any) int {
	t.Helper()
	var n int
	if err := e.Store.Pool.QueryRow(context.Background(), `SELECT count(*) FROM `+table+` WHERE `+where, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// newPlugin creates a plugin as by and returns its id.
func newPlugin(t testing.TB, e *apitest.Env, by apitest.Member, name string) string {
	t.Helper()
	return newPluginWith(t, e, by, map[string]any{"name": name})["id"].(string)
}

// newPluginWith creates a plugin from a body and returns the answered item.
func newPluginWith(t testing.TB, e *apitest.Env, by apitest.Member, body map[string]any) map[string]any {
	t.Helper()
	r := e.Do(t, "POST", "/v1/plugins", body, by.As()...).Expect(t, http.StatusCreated).JSON(t)
	return r["item"].(map[string]any)
}

// newMarketplace creates a marketplace as by and returns its id.
func newMarketplace(t testing.TB, e *apitest.Env, by apitest.Member, name string) string {
	t.Helper()
	r := e.Do(t, "POST", "/v1/marketplaces", map[string]any{"name": name}, by.As()...).Expect(t, http.StatusCreated).JSON(t)
	return r["item"].(map[string]any)["id"].(string)
}

// setGrants replaces a marketplace's grants as by.
func setGrants(t testing.TB, e *apitest.Env, by apitest.Member, marketplaceID string, grants ...map[string]any) {
	t.Helper()
	if grants == nil {
		grants = []map[string]any{}
	}
	e.Do(t, "PUT", "/v1/marketplaces/"+marketplaceID+"/access", map[string]any{"grants": grants}, by.As()...).
		Expect(t, http.StatusOK)
}

func memberGrant(m apitest.Member, role string) map[string]any {
	return map[string]any{"memberId": m.MemberID, "role": role}
}

func teamGrant(teamID, role string) map[string]any {
	return map[string]any{"teamId": teamID, "role": role}
}

func orgGrant(role string) map[string]any {
	return map[string]any{"organization": true, "role": role}
}

// addPlugin calls the specification's add-plugin operation.
func addPlugin(t testing.TB, e *apitest.Env, marketplaceID string, body any, opts ...apitest.Opt) *apitest.Resp {
	t.Helper()
	return e.Do(t, "POST", "/v1/marketplaces/"+marketplaceID+"/plugins", body, opts...)
}

// newTeam creates a team with members as by and returns its id.
func newTeam(t testing.TB, e *apitest.Env, by apitest.Member, name string, members ...apitest.Member) string {
	t.Helper()
	var team struct{ ID string }
	e.Do(t, "POST", "/v1/teams", map[string]any{"name": name}, by.As()...).Expect(t, http.StatusCreated).Decode(t, &team)
	for _, m := range members {
		e.Do(t, "POST", "/v1/teams/"+team.ID+"/members", map[string]any{"memberId": m.MemberID}, by.As()...).
			Expect(t, http.StatusOK)
	}
	return team.ID
}

// signIn opens a fresh session for u.
func signIn(t testing.TB, e *apitest.Env, u apitest.User) string {
	t.Helper()
	var out struct{ Token string }
	e.Do(t, "POST", "/v1/auth/sign-in", map[string]any{"email": u.Email, "password": apitest.Password}).
		Expect(t, http.StatusOK).Decode(t, &out)
	return out.Token
}

// missing returns a well-formed id that names nothing.
func missing(p typeid.Prefix) string { return typeid.New(p) }

// stamp renders an instant the way the API does.
func stamp(tm time.Time) string { return tm.UTC().Format(jsonx.TimeFormat) }
