package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/apitest"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// validWrite is a request a mutating route accepts, built for one organization: the
// baseline that TestHostileWritesChangeNothing spoils one part of at a time.
type validWrite struct {
	path string
	// body is the JSON body (Go values, marshalled); nil sends none.
	body any
	// as authenticates the request; nil: the organization's owner (a session, in its
	// organization).
	as []apitest.Opt
	// global: the route does not act inside an organization (sign-up, platform
	// administration), so another organization's ids are no hostile input for it.
	global bool
	// perItem: the route answers 200 with an outcome per listed id (recovery,
	// reconciliation), so an id that names nothing is an outcome, not a 4xx.
	perItem bool
	// idempotent: the route documents that a path id naming nothing of its parent changes
	// nothing and answers 200 (removing a policy assignment the policy does not have).
	idempotent bool
}

// writeFixture builds the valid request of one route inside owner's organization
// (owner is its owner, and a platform administrator).
type writeFixture func(t *testing.T, e *apitest.Env, owner apitest.Member) validWrite

// writeFixtures has one entry per mutating route ("METHOD /pattern", as Server.Routes
// lists them). A route added to the table without an entry here fails the test, so that
// every write is walked with hostile input from the day it exists.
var writeFixtures = map[string]writeFixture{
	"POST /v1/auth/sign-up": func(t *testing.T, e *apitest.Env, o apitest.Member) validWrite {
		return validWrite{path: "/v1/auth/sign-up", body: map[string]any{"email": fmt.Sprintf("new.%d@example.test", time.Now().UnixNano()),
			"password": apitest.Password, "name": "Newcomer"}, as: []apitest.Opt{}, global: true}
	},
	"POST /v1/auth/sign-in": func(t *testing.T, e *apitest.Env, o apitest.Member) validWrite {
		return validWrite{path: "/v1/auth/sign-in", body: map[string]any{"email": o.Email, "password": apitest.Password},
			as: []apitest.Opt{}, global: true}
	},
	"POST /v1/auth/sign-out": func(t *testing.T, e *apitest.Env, o apitest.Member) validWrite {
		return validWrite{path: "/v1/auth/sign-out", as: []apitest.Opt{apitest.Session(signIn(t, e, o.User))}, global: true}
	},
	"PUT /v1/me/active-organization": func(t *testing.T, e *apitest.Env, o apitest.Member) validWrite {
		return validWrite{path: "/v1/me/active-organization", body: map[string]any{"organizationId": o.OrgID},
			as: []apitest.Opt{apitest.Session(o.Token)}}
	},
	"POST /v1/organizations": func(t *testing.T, e *apitest.Env, o apitest.Member) validWrite {
		return validWrite{path: "/v1/organizations", body: map[string]any{"name": "Second", "slug": "second-" + o.OrgID[len(o.OrgID)-8:]},
			as: []apitest.Opt{apitest.Session(o.Token)}, global: true}
	},
	"POST /v1/invitations": func(t *testing.T, e *apitest.Env, o apitest.Member) validWrite {
		return validWrite{path: "/v1/invitations", body: map[string]any{"email": "invitee." + o.MemberID + "@example.test", "role": "member"}}
	},
	"POST /v1/invitations/accept": func(t *testing.T, e *apitest.Env, o apitest.Member) validWrite {
		u := e.SignUp(t, "invitee")
		var inv struct{ Token string }
		e.Do(t, "POST", "/v1/invitations", map[string]any{"email": u.Email, "role": "member"}, o.As()...).
			Expect(t, http.StatusCreated).Decode(t, &inv)
		return validWrite{path: "/v1/invitations/accept", body: map[string]any{"token": inv.Token}, as: []apitest.Opt{apitest.Session(u.Token)}}
	},
	"PATCH /v1/members/{memberId}": func(t *testing.T, e *apitest.Env, o apitest.Member) validWrite {
		bob := e.AddMember(t, o, "bob", "member")
		return validWrite{path: "/v1/members/" + bob.MemberID, body: map[string]any{"role": "admin"}}
	},
	"DELETE /v1/members/{memberId}": func(t *testing.T, e *apitest.Env, o apitest.Member) validWrite {
		bob := e.AddMember(t, o, "bob", "member")
		return validWrite{path: "/v1/members/" + bob.MemberID}
	},
	"POST /v1/teams": func(t *testing.T, e *apitest.Env, o apitest.Member) validWrite {
		return validWrite{path: "/v1/teams", body: map[string]any{"name": "Platform"}}
	},
	"POST /v1/teams/{teamId}/members": func(t *testing.T, e *apitest.Env, o apitest.Member) validWrite {
		bob := e.AddMember(t, o, "bob", "member")
		return validWrite{path: "/v1/teams/" + newTeam(t, e, o, "Platform") + "/members", body: map[string]any{"memberId": bob.MemberID}}
	},
	"DELETE /v1/teams/{teamId}/members/{memberId}": func(t *testing.T, e *apitest.Env, o apitest.Member) validWrite {
		bob := e.AddMember(t, o, "bob", "member")
		return validWrite{path: "/v1/teams/" + newTeam(t, e, o, "Platform", bob) + "/members/" + bob.MemberID}
	},
	"DELETE /v1/teams/{teamId}": func(t *testing.T, e *apitest.Env, o apitest.Member) validWrite {
		return validWrite{path: "/v1/teams/" + newTeam(t, e, o, "Platform")}
	},
	"POST /v1/api-keys": func(t *testing.T, e *apitest.Env, o apitest.Member) validWrite {
		return validWrite{path: "/v1/api-keys", body: map[string]any{"name": "ci"}}
	},
	"DELETE /v1/api-keys/{apiKeyId}": func(t *testing.T, e *apitest.Env, o apitest.Member) validWrite {
		var out struct{ APIKey struct{ ID string } }
		e.Do(t, "POST", "/v1/api-keys", map[string]any{"name": "ci"}, o.As()...).Expect(t, http.StatusCreated).Decode(t, &out)
		return validWrite{path: "/v1/api-keys/" + out.APIKey.ID}
	},
	"POST /v1/plugins": func(t *testing.T, e *apitest.Env, o apitest.Member) validWrite {
		return validWrite{path: "/v1/plugins", body: map[string]any{"name": "Linter", "description": "Lints."}}
	},
	"PATCH /v1/plugins/{pluginId}": func(t *testing.T, e *apitest.Env, o apitest.Member) validWrite {
		return validWrite{path: "/v1/plugins/" + newPlugin(t, e, o, "Linter"), body: map[string]any{"name": "Formatter", "description": "Formats."}}
	},
	"DELETE /v1/plugins/{pluginId}": func(t *testing.T, e *apitest.Env, o apitest.Member) validWrite {
		return validWrite{path: "/v1/plugins/" + newPlugin(t, e, o, "Linter")}
	},
	"POST /v1/marketplaces": func(t *testing.T, e *apitest.Env, o apitest.Member) validWrite {
		return validWrite{path: "/v1/marketplaces", body: map[string]any{"name": "Engineering"}}
	},
	"PUT /v1/marketplaces/{marketplaceId}/access": func(t *testing.T, e *apitest.Env, o apitest.Member) validWrite {
		bob := e.AddMember(t, o, "bob", "member")
		return validWrite{path: "/v1/marketplaces/" + newMarketplace(t, e, o, "Engineering") + "/access",
			body: map[string]any{"grants": []any{memberGrant(bob, "viewer")}}}
	},
	"POST /v1/marketplaces/{marketplaceId}/plugins": func(t *testing.T, e *apitest.Env, o apitest.Member) validWrite {
		return validWrite{path: "/v1/marketplaces/" + newMarketplace(t, e, o, "Engineering") + "/plugins",
			body: map[string]any{"pluginId": newPlugin(t, e, o, "Linter")}}
	},
	"DELETE /v1/marketplaces/{marketplaceId}/plugins/{pluginId}": func(t *testing.T, e *apitest.Env, o apitest.Member) validWrite {
		mkt, pl := newMarketplace(t, e, o, "Engineering"), newPlugin(t, e, o, "Linter")
		addPlugin(t, e, mkt, map[string]any{"pluginId": pl}, o.As()...).Expect(t, http.StatusCreated)
		return validWrite{path: "/v1/marketplaces/" + mkt + "/plugins/" + pl}
	},
	"POST /v1/gateway/usage-limit-policies": func(t *testing.T, e *apitest.Env, o apitest.Member) validWrite {
		return validWrite{path: policiesPath, body: map[string]any{"name": "Daily", "hardLimit": true,
			"limits": []any{map[string]any{"timeframe": "day", "costUsd": "5"}}}}
	},
	"PATCH /v1/gateway/usage-limit-policies/{policyId}": func(t *testing.T, e *apitest.Env, o apitest.Member) validWrite {
		p := dayPolicy(t, e, o, "Daily", "5", nil)
		return validWrite{path: policiesPath + "/" + p.ID, body: map[string]any{"name": "Weekly", "revision": p.Revision,
			"limits": []any{map[string]any{"timeframe": "week", "costUsd": "20.5"}}}}
	},
	"POST /v1/gateway/usage-limit-policies/{policyId}/archive": func(t *testing.T, e *apitest.Env, o apitest.Member) validWrite {
		p := dayPolicy(t, e, o, "Daily", "5", nil)
		return validWrite{path: policiesPath + "/" + p.ID + "/archive", body: map[string]any{"revision": p.Revision}}
	},
	"POST /v1/gateway/usage-limit-policies/{policyId}/restore": func(t *testing.T, e *apitest.Env, o apitest.Member) validWrite {
		p := dayPolicy(t, e, o, "Daily", "5", nil)
		e.Do(t, "POST", policiesPath+"/"+p.ID+"/archive", map[string]any{"revision": p.Revision}, o.As()...).Expect(t, http.StatusOK)
		return validWrite{path: policiesPath + "/" + p.ID + "/restore", body: map[string]any{"revision": p.Revision + 1}}
	},
	"POST /v1/gateway/usage-limit-policies/{policyId}/assignments": func(t *testing.T, e *apitest.Env, o apitest.Member) validWrite {
		bob := e.AddMember(t, o, "bob", "member")
		return validWrite{path: policiesPath + "/" + dayPolicy(t, e, o, "Daily", "5", nil).ID + "/assignments",
			body: map[string]any{"memberId": bob.MemberID}}
	},
	"DELETE /v1/gateway/usage-limit-policies/{policyId}/assignments/{assignmentId}": func(t *testing.T, e *apitest.Env, o apitest.Member) validWrite {
		bob := e.AddMember(t, o, "bob", "member")
		p := assign(t, e, o, dayPolicy(t, e, o, "Daily", "5", nil).ID, map[string]any{"memberId": bob.MemberID})
		return validWrite{path: policiesPath + "/" + p.ID + "/assignments/" + p.Assignments[0].ID, idempotent: true}
	},
	"POST /v1/gateway/usage-limit-reset-requests": func(t *testing.T, e *apitest.Env, o apitest.Member) validWrite {
		bob := blockedMember(t, e, o)
		return validWrite{path: resetsPath, body: map[string]any{"bucketId": bucketID(e, bob, window.Day), "reason": "deadline tonight"}, as: bob.As()}
	},
	"POST /v1/gateway/usage-limit-reset-requests/{requestId}/approve": func(t *testing.T, e *apitest.Env, o apitest.Member) validWrite {
		bob := blockedMember(t, e, o)
		r := decodeReset(t, submit(t, e, bob, bucketID(e, bob, window.Day), "please").Expect(t, http.StatusOK))
		return validWrite{path: resetsPath + "/" + r.ID + "/approve", body: map[string]any{}}
	},
	"POST /v1/gateway/usage-limit-reset-requests/{requestId}/deny": func(t *testing.T, e *apitest.Env, o apitest.Member) validWrite {
		bob := blockedMember(t, e, o)
		r := decodeReset(t, submit(t, e, bob, bucketID(e, bob, window.Day), "please").Expect(t, http.StatusOK))
		return validWrite{path: resetsPath + "/" + r.ID + "/deny", body: map[string]any{"note": "not this week"}}
	},
	"PUT /v1/gateway/model-prices": func(t *testing.T, e *apitest.Env, o apitest.Member) validWrite {
		return validWrite{path: "/v1/gateway/model-prices", body: map[string]any{"prices": []any{map[string]any{"model": "acme-large",
			"inputMicroUsdPerMillion": 3_000_000, "outputMicroUsdPerMillion": 15_000_000, "cachedInputMicroUsdPerMillion": 300_000}}}}
	},
	"PUT /v1/gateway/model-prices/fallback": func(t *testing.T, e *apitest.Env, o apitest.Member) validWrite {
		return validWrite{path: "/v1/gateway/model-prices/fallback", body: map[string]any{"inputMicroUsdPerMillion": 3_000_000,
			"outputMicroUsdPerMillion": 15_000_000, "cachedInputMicroUsdPerMillion": 300_000}}
	},
	"DELETE /v1/gateway/model-prices/fallback": func(t *testing.T, e *apitest.Env, o apitest.Member) validWrite {
		// A price to reset: resetting the default changes nothing (and records nothing).
		e.Do(t, "PUT", "/v1/gateway/model-prices/fallback", map[string]any{"inputMicroUsdPerMillion": 3_000_000,
			"outputMicroUsdPerMillion": 15_000_000, "cachedInputMicroUsdPerMillion": 300_000}, o.As()...).Expect(t, http.StatusOK)
		return validWrite{path: "/v1/gateway/model-prices/fallback"}
	},
	"PUT /v1/gateway/model-prices/unpriced-models": func(t *testing.T, e *apitest.Env, o apitest.Member) validWrite {
		return validWrite{path: "/v1/gateway/model-prices/unpriced-models", body: map[string]any{"action": "refuse"}}
	},
	"POST /v1/gateway/usage-capture/suspend": func(t *testing.T, e *apitest.Env, o apitest.Member) validWrite {
		bob := e.AddMember(t, o, "bob", "member")
		return validWrite{path: suspendPath, body: captureBody(bob.MemberID, 0, true)}
	},
	"POST /v1/gateway/usage-capture/resume": func(t *testing.T, e *apitest.Env, o apitest.Member) validWrite {
		bob := e.AddMember(t, o, "bob", "member")
		var moved struct {
			Members []struct{ TrackingVersion int64 }
		}
		e.Do(t, "POST", suspendPath, captureBody(bob.MemberID, 0, true), o.As()...).Expect(t, http.StatusOK).Decode(t, &moved)
		return validWrite{path: resumePath, body: captureBody(bob.MemberID, moved.Members[0].TrackingVersion, true)}
	},
	"POST /v1/gateway/usage-recovery/recover": func(t *testing.T, e *apitest.Env, o apitest.Member) validWrite {
		// A preview: an applied call is audited even when it finds nothing (recovery.Recover).
		return validWrite{path: recoverPath, body: map[string]any{"requestIds": []any{"req-1"}, "reviewReference": "CHG-42", "apply": false}, perItem: true}
	},
	"POST /v1/gateway/usage-reconciliation/reconcile": func(t *testing.T, e *apitest.Env, o apitest.Member) validWrite {
		bob := e.AddMember(t, o, "bob", "member")
		return validWrite{path: "/v1/gateway/usage-reconciliation/reconcile", body: map[string]any{"items": []any{map[string]any{
			"requestId": "req-1", "memberId": bob.MemberID, "admittedAt": stamp(e.Clock.Now()), "costMicroUsd": 400}},
			"reviewReference": "INC-7", "apply": true}, perItem: true}
	},
	"PUT /v1/admin/organizations/{organizationId}/capabilities": func(t *testing.T, e *apitest.Env, o apitest.Member) validWrite {
		return validWrite{path: capPath(o.OrgID), body: map[string]any{"capabilities": map[string]any{"installLinks": false, "modelsAnalytics": true}}, global: true}
	},
	"POST /v1/admin/platform-admins": func(t *testing.T, e *apitest.Env, o apitest.Member) validWrite {
		return validWrite{path: "/v1/admin/platform-admins", body: map[string]any{"email": "ops." + o.MemberID + "@example.test"}, global: true}
	},
	"DELETE /v1/admin/platform-admins/{email}": func(t *testing.T, e *apitest.Env, o apitest.Member) validWrite {
		email := "ops." + o.MemberID + "@example.test"
		e.Do(t, "POST", "/v1/admin/platform-admins", map[string]any{"email": email}, o.As()...).Expect(t, http.StatusCreated)
		return validWrite{path: "/v1/admin/platform-admins/" + email, global: true}
	},
}

// blockedMember adds a member under a day limit of 5 micro-USD, all of it spent.
func blockedMember(t *testing.T, e *apitest.Env, o apitest.Member) apitest.Member {
	bob := e.AddMember(t, o, "bob", "member")
	p := dayPolicy(t, e, o, "Daily", "0.000005", map[string]any{"allowRequestReset": true})
	assign(t, e, o, p.ID, map[string]any{"memberId": bob.MemberID})
	setUsed(t, e, bob, window.Day, 5)
	return bob
}

// hostileVariant is one spoiled copy of a valid request.
type hostileVariant struct {
	what        string
	path        string
	body        []byte // nil: none
	contentType string // "": application/json when there is a body
	// mayAnswer200: a per-item route's id variant (an outcome in a 200)
	mayAnswer200 bool
}

// TestHostileWritesChangeNothing walks every mutating route of the route table
// (Server.Routes: a new route without an entry in writeFixtures fails) and sends, as the
// authorized caller, spoiled copies of a valid request: bodies that are not JSON, carry
// data after the object, repeat a key, put a value of the wrong type, null, a 1 MB or
// 64 KB string, a NUL, invalid UTF-8 or an out-of-range number (2^63, 1e30, -1, 1.5) at
// each place of the body in turn, add an unknown field, come empty, as text, or over the
// size cap; and path and body ids of another organization, ids that name nothing and ids
// of the wrong shape. Every answer must be a 4xx in the documented error shape (apitest
// checks each against the OpenAPI document), the database (every row of every table)
// must be as it was, and the valid request must still succeed afterwards. Two documented
// answers are not refusals: an id naming nothing in a recovery or reconciliation list is
// an outcome of a 200 (perItem), and removing an assignment the policy does not have is a
// 200 that changes nothing (idempotent); the database must still be unchanged. An empty
// body sent as JSON is hostile everywhere: approve and deny, whose body is optional, take
// it left out (no Content-Type), not empty.
func TestHostileWritesChangeNothing(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	doc := servedDocument(t, e)
	ctx := context.Background()
	snapshot := snapshotter(t, e)
	owners := func(name string) apitest.Member {
		o := e.NewOrg(t, name)
		if _, err := store.AddPlatformAdmin(ctx, e.Store.Pool, strings.ToLower(o.Email), "test", e.Clock.Now()); err != nil {
			t.Fatal(err)
		}
		return o
	}
	var routes []string
	for _, r := range e.Server.Routes() {
		if !strings.HasPrefix(r, "GET ") {
			routes = append(routes, r)
		}
	}
	if len(routes) < 40 {
		t.Fatalf("only %d mutating routes listed", len(routes))
	}
	for _, r := range routes {
		if writeFixtures[r] == nil {
			t.Errorf("route %s has no valid request in writeFixtures: add one, so that it is walked with hostile input", r)
		}
	}
	for _, r := range routes {
		fixture := writeFixtures[r]
		if fixture == nil {
			continue
		}
		method, pattern, _ := strings.Cut(r, " ")
		t.Run(r, func(t *testing.T) {
			victim, caller := owners("Victim"), owners("Caller")
			theirs, ours := fixture(t, e, victim), fixture(t, e, caller)
			if ours.as == nil {
				ours.as = caller.As()
			}
			variants := hostileVariants(t, doc, method, pattern, ours, theirs)
			before := snapshot()
			var bad []string
			for _, v := range variants {
				opts := slices.Clone(ours.as)
				if v.contentType != "" {
					opts = append(opts, apitest.Header("Content-Type", v.contentType))
				}
				var body any
				if v.body != nil {
					body = v.body
				}
				res := e.Do(t, method, v.path, body, opts...)
				var shape struct{ Error string }
				switch {
				case v.mayAnswer200 && res.Status == http.StatusOK:
				case res.Status < 400 || res.Status >= 500:
					bad = append(bad, fmt.Sprintf("%s: %d %.300s", v.what, res.Status, res.Body))
				case json.Unmarshal(res.Body, &shape) != nil || shape.Error == "":
					bad = append(bad, fmt.Sprintf("%s: %d without an error code: %.300s", v.what, res.Status, res.Body))
				}
				if after := snapshot(); !equalSnapshots(before, after) {
					bad = append(bad, fmt.Sprintf("%s: %d %.200s, and it changed tables %v", v.what, res.Status, res.Body, changed(before, after)))
					before = after
				}
			}
			if len(bad) > 0 {
				t.Errorf("%d of %d hostile variants were not refused cleanly:\n%s", len(bad), len(variants), strings.Join(bad, "\n"))
			}
			var valid any
			if ours.body != nil {
				valid = ours.body
			}
			if res := e.Do(t, method, ours.path, valid, ours.as...); res.Status >= 300 {
				t.Errorf("the valid request after the hostile ones: %d %s", res.Status, res.Body)
			}
		})
	}
}

// snapshotter lists the tables of the test's database once and returns a function that
// fingerprints every row of every one of them in one query: a count and an
// order-independent sum of row hashes per table (cheap enough to run after each request).
func snapshotter(t *testing.T, e *apitest.Env) func() map[string]string {
	t.Helper()
	ctx := context.Background()
	rows, err := e.Store.Pool.Query(ctx, `SELECT quote_ident(table_name) FROM information_schema.tables
		WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	var parts []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		parts = append(parts, fmt.Sprintf(`SELECT '%s'::text, count(*) || ':' || coalesce(sum(hashtextextended(x::text, 0)::numeric), 0) FROM %s x`,
			name, name))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(parts) < 10 {
		t.Fatalf("only %d tables to snapshot", len(parts))
	}
	query := strings.Join(parts, " UNION ALL ")
	return func() map[string]string {
		t.Helper()
		out := map[string]string{}
		rows, err := e.Store.Pool.Query(ctx, query)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var name, d string
			if err := rows.Scan(&name, &d); err != nil {
				t.Fatal(err)
			}
			out[name] = d
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
}

func equalSnapshots(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func changed(a, b map[string]string) []string {
	var out []string
	for k := range b {
		if a[k] != b[k] {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

var (
	typeIDShape = regexp.MustCompile(`^([a-z]+)_[0-9a-z]{26}$`)
	placeholder = regexp.MustCompile(`^\{([^}]+)\}$`)
)

// isIDField: a body value under a key named like an id (memberId, pluginId, bucketId,
// organizationId) or in a list of ids (requestIds).
func isIDField(path []any) bool {
	for i := len(path) - 1; i >= 0; i-- {
		if k, ok := path[i].(string); ok {
			return strings.HasSuffix(k, "Id") || (strings.HasSuffix(k, "Ids") && i < len(path)-1)
		}
	}
	return false
}

// nowhere is an id of the same shape as id that names nothing.
func nowhere(id string) string {
	if m := typeIDShape.FindStringSubmatch(id); m != nil {
		return typeid.New(typeid.Prefix(m[1]))
	}
	return "zz-no-such-id-0001"
}

// hostileVariants spoils ours one part at a time; theirs is the same request built in
// another organization, whose ids ours must not reach.
func hostileVariants(t *testing.T, doc map[string]any, method, pattern string, ours, theirs validWrite) []hostileVariant {
	t.Helper()
	var out []hostileVariant
	add := func(v hostileVariant) {
		if v.path == "" {
			v.path = ours.path
		}
		out = append(out, v)
	}
	// Path parameters: another organization's, one that names nothing, one of a wrong shape.
	patternSegs, ourSegs, theirSegs := strings.Split(pattern, "/"), strings.Split(ours.path, "/"), strings.Split(theirs.path, "/")
	for i, seg := range patternSegs {
		m := placeholder.FindStringSubmatch(seg)
		if m == nil {
			continue
		}
		with := func(v string) string {
			s := slices.Clone(ourSegs)
			s[i] = v
			return strings.Join(s, "/")
		}
		last := ours.idempotent && i == len(patternSegs)-1
		if !ours.global && theirSegs[i] != ourSegs[i] {
			add(hostileVariant{what: "path " + m[1] + " of another organization", path: with(theirSegs[i]), mayAnswer200: last})
		}
		add(hostileVariant{what: "path " + m[1] + " naming nothing", path: with(nowhere(ourSegs[i])), mayAnswer200: last})
		add(hostileVariant{what: "path " + m[1] + " not an id", path: with("not-an-id"), mayAnswer200: last})
	}
	if ours.body == nil {
		return out
	}
	var body any
	raw, _ := json.Marshal(ours.body)
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&body); err != nil {
		t.Fatal(err)
	}
	var their any
	raw2, _ := json.Marshal(theirs.body)
	dec = json.NewDecoder(bytes.NewReader(raw2))
	dec.UseNumber()
	_ = dec.Decode(&their)
	valid := render(body, nil, nil, nil)

	// The whole body.
	for _, b := range []struct{ what, body string }{
		{"invalid JSON", valid[:len(valid)-1]},
		{"a trailing comma", valid[:len(valid)-1] + `,}`},
		{"a second object after the body", valid + `{}`},
		{"text after the body", valid + ` x`},
		{"null", "null"},
		{"an array", "[" + valid + "]"},
		{"a string", `"` + strings.ReplaceAll(valid, `"`, `\"`) + `"`},
		{"an unknown field", `{"zzUnknown":1,` + valid[1:]},
		{"an unknown field only", `{"zzUnknown":1}`},
		{"invalid UTF-8 outside strings", valid[:len(valid)-1] + "\xff}"},
		{"a body over the size cap", valid[:len(valid)-1] + `,"zzPad":"` + strings.Repeat("a", 1<<20) + `"}`},
		{"whitespace over the size cap", strings.Repeat(" ", 1<<20) + valid},
	} {
		add(hostileVariant{what: b.what, body: []byte(b.body)})
	}
	// Sent as application/json: approve and deny, whose body is optional, take none
	// left out (no Content-Type), not an empty JSON one.
	add(hostileVariant{what: "an empty body", body: []byte{}})
	for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "application/xml", "multipart/form-data; boundary=x"} {
		add(hostileVariant{what: "Content-Type " + ct, body: []byte(valid), contentType: ct})
	}

	// Every value of the body in turn.
	schema := requestSchemaOf(doc, method, pattern)
	for _, n := range nodes(body, nil) {
		at := fmt.Sprint(n.path)
		set := func(what, rawValue string) {
			add(hostileVariant{what: at + ": " + what, body: []byte(render(body, n.path, func(string) string { return rawValue }, nil))})
		}
		if key, ok := n.path[len(n.path)-1].(string); ok {
			add(hostileVariant{what: at + ": repeated", body: []byte(render(body, n.path, func(orig string) string {
				return orig + `,"` + key + `":` + orig
			}, nil))})
			if required(doc, schema, n.path) {
				set("null", "null")
			}
		} else {
			set("null", "null")
		}
		switch v := n.value.(type) {
		case string:
			set("a number", "123")
			set("an object", `{"a":"b"}`)
			set("a 1 MB string", `"`+strings.Repeat("a", 1<<20)+`"`)
			set("a 64 KB string", `"`+strings.Repeat("a", 64<<10)+`"`)
			set("a NUL", `"a\u0000b"`)
			set("invalid UTF-8", "\"a\xffb\"")
			set("an encoded surrogate", "\"a\xed\xa0\x80b\"")
			if _, err := strconv.ParseFloat(v, 64); err == nil {
				for _, s := range []string{"-1", "9223372036854775808", "1e30", "0.0000001", "NaN", "Infinity", " 1"} {
					set("the amount "+s, `"`+s+`"`)
				}
			}
			if isIDField(n.path) {
				add(hostileVariant{what: at + ": an id naming nothing", body: []byte(render(body, n.path, func(string) string {
					return strconv.Quote(nowhere(v))
				}, nil)), mayAnswer200: ours.perItem})
				add(hostileVariant{what: at + ": not an id", body: []byte(render(body, n.path, func(string) string {
					return `"not an id"`
				}, nil)), mayAnswer200: ours.perItem})
				if o, ok := valueAt(their, n.path).(string); ok && o != v && !ours.global {
					add(hostileVariant{what: at + ": another organization's id", body: []byte(render(body, n.path, func(string) string {
						return strconv.Quote(o)
					}, nil)), mayAnswer200: ours.perItem})
				}
			}
		case json.Number:
			set("a string", `"`+v.String()+`"`)
			for _, s := range []string{"9223372036854775808", "9223372036854775807", "-9223372036854775809", "4503599627370496", "1e30", "-1", "1.5", "1e400"} {
				set(s, s)
			}
		case bool:
			set("a string", `"true"`)
			set("a number", `1`)
		case map[string]any:
			set("an array", `[]`)
			set("a string", `"x"`)
		case []any:
			set("an object", `{}`)
			set("a string", `"x"`)
			if len(v) > 0 {
				set("an array of 10000", "["+strings.Repeat(render(v[0], nil, nil, nil)+",", 9999)+render(v[0], nil, nil, nil)+"]")
			}
		}
	}
	return out
}

// node is a value inside a body and where it is (keys and indexes).
type node struct {
	path  []any
	value any
}

func nodes(v any, path []any) []node {
	var out []node
	if len(path) > 0 {
		out = append(out, node{path: path, value: v})
	}
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			out = append(out, nodes(x[k], append(slices.Clone(path), k))...)
		}
	case []any:
		for i, e := range x {
			out = append(out, nodes(e, append(slices.Clone(path), i))...)
		}
	}
	return out
}

func valueAt(v any, path []any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			a, _ := v.([]any)
			if k >= len(a) {
				return nil
			}
			v = a[k]
		}
	}
	return v
}

// render writes v as JSON with its keys sorted; the value at target is replaced by what
// replace makes of its JSON text.
func render(v any, target []any, replace func(string) string, at []any) string {
	if target != nil && slices.Equal(at, target) {
		return replace(render(v, nil, nil, nil))
	}
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var b strings.Builder
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Quote(k) + ":" + render(x[k], target, replace, append(slices.Clone(at), k)))
		}
		return b.String() + "}"
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = render(e, target, replace, append(slices.Clone(at), i))
		}
		return "[" + strings.Join(parts, ",") + "]"
	default:
		b, _ := json.Marshal(x)
		return string(b)
	}
}

// requestSchemaOf is the documented request body schema of an operation.
func requestSchemaOf(doc map[string]any, method, pattern string) map[string]any {
	item, _ := doc["paths"].(map[string]any)[pattern].(map[string]any)
	op, _ := item[strings.ToLower(method)].(map[string]any)
	if op == nil {
		return nil
	}
	return requestSchema(doc, op)
}

// required: the documented schema lists the last key of path among the required
// properties of its object (allOf, oneOf and anyOf branches included).
func required(doc map[string]any, s map[string]any, path []any) bool {
	for _, p := range path[:len(path)-1] {
		s = childSchema(doc, s, p)
		if s == nil {
			return false
		}
	}
	key := path[len(path)-1].(string)
	var found bool
	var walk func(s map[string]any, depth int)
	walk = func(s map[string]any, depth int) {
		if s == nil || depth > 4 {
			return
		}
		if list, ok := s["required"].([]any); ok && slices.Contains(list, any(key)) {
			found = true
		}
		for _, k := range []string{"allOf"} {
			list, _ := s[k].([]any)
			for _, sub := range list {
				walk(resolve(doc, sub), depth+1)
			}
		}
	}
	walk(s, 0)
	return found
}

func childSchema(doc, s map[string]any, p any) map[string]any {
	if s == nil {
		return nil
	}
	switch k := p.(type) {
	case string:
		if props, ok := s["properties"].(map[string]any); ok && props[k] != nil {
			return resolve(doc, props[k])
		}
		for _, key := range []string{"allOf", "oneOf", "anyOf"} {
			list, _ := s[key].([]any)
			for _, sub := range list {
				if c := childSchema(doc, resolve(doc, sub), p); c != nil {
					return c
				}
			}
		}
	case int:
		return resolve(doc, s["items"])
	}
	return nil
}
