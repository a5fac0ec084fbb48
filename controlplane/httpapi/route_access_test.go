package httpapi_test

import (
	"bytes"
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/apitest"
	"github.com/tollgate-dev/tollgate/pkg/credential"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
)

// who is the documented gate of a route: the callers API.md (and docs/ for the routes it
// does not list) lets reach the route's handler.
type who int

const (
	anyone         who = iota // public
	anyCredential             // a live session or API key; no organization
	sessionNoOrg              // a live session; API keys 403; no organization
	sessionMember             // a live session of an active member of the organization; keys 403
	anyMember                 // a session or key of an active member, any role
	managersOnly              // owners and admins of the organization
	platformAdmins            // users on the platform-admin allowlist
)

// routeCallers is the contract of who may call each route (API.md's "Who" columns;
// docs/admin.md for the audit trails and platform routes, docs/usage-limits.md,
// docs/prices.md and docs/accounting.md for the routes API.md does not list). A route of
// the router missing here fails TestEveryRouteAdmitsOnlyItsDocumentedCallers: a new route
// needs an authorization decision written down. Handler-level rules (plugin and
// marketplace grants, own keys) are checked by their own tests.
var routeCallers = map[string]who{
	"GET /health":       anyone,
	"GET /ready":        anyone,
	"GET /openapi.json": anyone,
	"GET /docs":         anyone,

	"POST /v1/auth/sign-up":                        anyone,
	"POST /v1/auth/sign-in":                        anyone,
	"POST /v1/auth/sign-out":                       sessionNoOrg,
	"GET /v1/me":                                   anyCredential,
	"PUT /v1/me/active-organization":               sessionNoOrg,
	"POST /v1/organizations":                       sessionNoOrg,
	"GET /v1/organizations":                        anyCredential,
	"POST /v1/invitations":                         managersOnly,
	"POST /v1/invitations/accept":                  sessionNoOrg,
	"GET /v1/members":                              anyMember,
	"PATCH /v1/members/{memberId}":                 managersOnly,
	"DELETE /v1/members/{memberId}":                managersOnly,
	"POST /v1/teams":                               managersOnly,
	"GET /v1/teams":                                anyMember,
	"POST /v1/teams/{teamId}/members":              managersOnly,
	"DELETE /v1/teams/{teamId}/members/{memberId}": managersOnly,
	"DELETE /v1/teams/{teamId}":                    managersOnly,
	"POST /v1/api-keys":                            sessionMember,
	"GET /v1/api-keys":                             anyMember,
	"DELETE /v1/api-keys/{apiKeyId}":               anyMember,

	"GET /v1/organizations/{organizationId}/audit-events": managersOnly,

	"POST /v1/plugins":                                           managersOnly,
	"GET /v1/plugins":                                            anyMember,
	"GET /v1/plugins/{pluginId}":                                 anyMember,
	"PATCH /v1/plugins/{pluginId}":                               anyMember,
	"DELETE /v1/plugins/{pluginId}":                              anyMember,
	"POST /v1/marketplaces":                                      managersOnly,
	"GET /v1/marketplaces":                                       anyMember,
	"GET /v1/marketplaces/{marketplaceId}":                       anyMember,
	"PUT /v1/marketplaces/{marketplaceId}/access":                anyMember,
	"GET /v1/marketplaces/{marketplaceId}/plugins":               anyMember,
	"POST /v1/marketplaces/{marketplaceId}/plugins":              anyMember,
	"DELETE /v1/marketplaces/{marketplaceId}/plugins/{pluginId}": anyMember,

	"GET /v1/gateway/usage-limit-policies":                                          managersOnly,
	"POST /v1/gateway/usage-limit-policies":                                         managersOnly,
	"PATCH /v1/gateway/usage-limit-policies/{policyId}":                             managersOnly,
	"POST /v1/gateway/usage-limit-policies/{policyId}/archive":                      managersOnly,
	"POST /v1/gateway/usage-limit-policies/{policyId}/restore":                      managersOnly,
	"GET /v1/gateway/usage-limit-policies/{policyId}/assignments":                   managersOnly,
	"POST /v1/gateway/usage-limit-policies/{policyId}/assignments":                  managersOnly,
	"DELETE /v1/gateway/usage-limit-policies/{policyId}/assignments/{assignmentId}": managersOnly,
	"GET /v1/gateway/usage-limits/me":                                               anyMember,
	"GET /v1/gateway/usage-limits/members/{memberId}":                               managersOnly,
	"POST /v1/gateway/usage-limit-reset-requests":                                   anyMember,
	"GET /v1/gateway/usage-limit-reset-requests/me":                                 anyMember,
	"GET /v1/gateway/usage-limit-reset-requests":                                    managersOnly,
	"POST /v1/gateway/usage-limit-reset-requests/{requestId}/approve":               managersOnly,
	"POST /v1/gateway/usage-limit-reset-requests/{requestId}/deny":                  managersOnly,
	"GET /v1/gateway/model-prices":                                                  anyMember,
	"PUT /v1/gateway/model-prices":                                                  managersOnly,
	"GET /v1/gateway/model-prices/fallback":                                         anyMember,
	"PUT /v1/gateway/model-prices/fallback":                                         managersOnly,
	"DELETE /v1/gateway/model-prices/fallback":                                      managersOnly,
	"GET /v1/gateway/model-prices/unpriced-models":                                  anyMember,
	"PUT /v1/gateway/model-prices/unpriced-models":                                  managersOnly,
	"POST /v1/gateway/usage-capture/suspend":                                        managersOnly,
	"POST /v1/gateway/usage-capture/resume":                                         managersOnly,
	"GET /v1/gateway/usage-recovery/pending":                                        managersOnly,
	"POST /v1/gateway/usage-recovery/recover":                                       managersOnly,
	"GET /v1/gateway/usage-reconciliation/quarantined":                              managersOnly,
	"POST /v1/gateway/usage-reconciliation/reconcile":                               managersOnly,

	"GET /v1/admin/organizations":                               platformAdmins,
	"GET /v1/admin/organizations/{organizationId}/capabilities": platformAdmins,
	"PUT /v1/admin/organizations/{organizationId}/capabilities": platformAdmins,
	"GET /v1/admin/platform-admins":                             platformAdmins,
	"POST /v1/admin/platform-admins":                            platformAdmins,
	"DELETE /v1/admin/platform-admins/{email}":                  platformAdmins,
	"GET /v1/admin/audit-events":                                platformAdmins,

	// Removed (410 to everyone).
	"GET /v1/gateway/dashboard": anyone,
}

// gateAnswer is what a caller meets at a route's gate.
type gateAnswer string

const (
	passes       gateAnswer = "passes"  // reaches the handler
	unauthorized gateAnswer = "401"     // 401 unauthorized
	forbidden    gateAnswer = "403"     // 403 forbidden
	notOrgMember gateAnswer = "404 org" // 404 organization_not_found
)

// accessCaller is one kind of caller of the contract.
type accessCaller struct {
	name string
	as   func() []apitest.Opt
	// valid: the credential authenticates; session: it is a session; member: the role
	// in the organization under test ("" when not an active member); admin: on the
	// platform allowlist.
	valid, session bool
	member         string
	admin          bool
}

// expected is what the contract says caller meets at a route of gate w.
func (w who) expected(c accessCaller) gateAnswer {
	if w == anyone {
		return passes
	}
	if !c.valid {
		return unauthorized
	}
	switch w {
	case anyCredential:
		return passes
	case sessionNoOrg:
		if !c.session {
			return forbidden
		}
		return passes
	case platformAdmins:
		if !c.admin {
			return forbidden
		}
		return passes
	case sessionMember:
		if !c.session {
			return forbidden
		}
	}
	if c.member == "" {
		return notOrgMember
	}
	if w == managersOnly && c.member == "member" {
		return forbidden
	}
	return passes
}

var pathParam = regexp.MustCompile(`\{([^}]+)\}`)

// TestEveryRouteAdmitsOnlyItsDocumentedCallers reads every route from the router and
// sends it, with ids that name nothing and no body, as every kind of caller: none, a bad
// or unknown credential, an expired or signed-out session, a revoked key, an owner, admin
// and member of the organization (session and key), a member of another organization
// naming this one (session and key), a member removed from it (the session they still
// hold, the key they had), and a platform administrator who is not a member. Each must
// meet the gate routeCallers documents: 401, 403, 404 organization_not_found, or the
// handler (any other answer: 400 for the missing body, 404 for the id). A route without
// an entry fails, so every new route comes with its authorization decision.
func TestEveryRouteAdmitsOnlyItsDocumentedCallers(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	ctx := context.Background()
	owner := e.NewOrg(t, "Acme")
	admin := e.AddMember(t, owner, "admin", "admin")
	member := e.AddMember(t, owner, "member", "member")
	removed := e.AddMember(t, owner, "removed", "member")
	outsider := e.NewOrg(t, "Other")
	platform := e.NewOrg(t, "Platform")
	if _, err := store.AddPlatformAdmin(ctx, e.Store.Pool, strings.ToLower(platform.Email), "test", e.Clock.Now()); err != nil {
		t.Fatal(err)
	}

	ownerKey, adminKey, memberKey := e.APIKey(t, owner), e.APIKey(t, admin), e.APIKey(t, member)
	outsiderKey, platformKey := e.APIKey(t, outsider), e.APIKey(t, platform)
	removedKey := e.APIKey(t, removed)
	e.Do(t, "DELETE", "/v1/members/"+removed.MemberID, nil, owner.As()...).Expect(t, http.StatusNoContent)
	revokedKey := e.APIKey(t, member)
	var revokedID string
	if err := e.Store.Pool.QueryRow(ctx, `SELECT id FROM api_keys WHERE key_hash = $1`, credential.Hash(revokedKey)).Scan(&revokedID); err != nil {
		t.Fatal(err)
	}
	e.Do(t, "DELETE", "/v1/api-keys/"+revokedID, nil, member.As()...).Expect(t, http.StatusNoContent)
	signedOut := e.SignIn(t, member.User)
	e.Do(t, "POST", "/v1/auth/sign-out", nil, apitest.Session(signedOut.Token)).Expect(t, http.StatusNoContent)
	expired := e.SignIn(t, member.User)
	if _, err := e.Store.Pool.Exec(ctx, `UPDATE sessions SET expires_at = $2 WHERE token_hash = $1`,
		credential.Hash(expired.Token), e.Clock.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}

	org := apitest.Org(owner.OrgID)
	// fresh signs the user in again for each request: sign-out ends the session it is
	// sent with, and owners' writes ask for a recent sign-in.
	fresh := func(u apitest.User) func() []apitest.Opt {
		return func() []apitest.Opt { return []apitest.Opt{apitest.Session(e.SignIn(t, u).Token), org} }
	}
	fixed := func(opts ...apitest.Opt) func() []apitest.Opt {
		return func() []apitest.Opt { return append(opts, org) }
	}
	callers := []accessCaller{
		{name: "no credential", as: fixed()},
		{name: "unknown session", as: fixed(apitest.Session("tgs_" + strings.Repeat("a", 43)))},
		{name: "unknown API key", as: fixed(apitest.Key("tgk_" + strings.Repeat("a", 43)))},
		{name: "expired session", as: fixed(apitest.Session(expired.Token))},
		{name: "signed-out session", as: fixed(apitest.Session(signedOut.Token))},
		{name: "revoked API key", as: fixed(apitest.Key(revokedKey))},
		{name: "removed member's API key", as: fixed(apitest.Key(removedKey))},
		{name: "owner session", as: fresh(owner.User), valid: true, session: true, member: "owner"},
		{name: "owner API key", as: fixed(apitest.Key(ownerKey)), valid: true, member: "owner"},
		{name: "admin session", as: fresh(admin.User), valid: true, session: true, member: "admin"},
		{name: "admin API key", as: fixed(apitest.Key(adminKey)), valid: true, member: "admin"},
		{name: "member session", as: fresh(member.User), valid: true, session: true, member: "member"},
		{name: "member API key", as: fixed(apitest.Key(memberKey)), valid: true, member: "member"},
		{name: "removed member's session", as: fresh(removed.User), valid: true, session: true},
		{name: "other organization's owner session", as: fresh(outsider.User), valid: true, session: true},
		{name: "other organization's owner API key", as: fixed(apitest.Key(outsiderKey)), valid: true},
		{name: "platform administrator session", as: fresh(platform.User), valid: true, session: true, admin: true},
		{name: "platform administrator API key", as: fixed(apitest.Key(platformKey)), valid: true, admin: true},
	}

	params := map[string]string{
		"organizationId": owner.OrgID,
		"memberId":       typeid.New(typeid.Member),
		"teamId":         typeid.New(typeid.Team),
		"apiKeyId":       typeid.New(typeid.APIKey),
		"pluginId":       typeid.New(typeid.Plugin),
		"marketplaceId":  typeid.New(typeid.Marketplace),
		"policyId":       typeid.New(typeid.Policy),
		"assignmentId":   typeid.New(typeid.Assignment),
		"requestId":      typeid.New(typeid.ResetRequest),
		"email":          "nobody@example.test",
	}
	routes := e.Server.Routes()
	if len(routes) < 60 {
		t.Fatalf("only %d routes", len(routes))
	}
	for _, r := range routes {
		w, ok := routeCallers[r]
		if !ok {
			t.Errorf("route %s has no documented callers in routeCallers: decide who may call it (API.md) and add it", r)
			continue
		}
		method, pattern, _ := strings.Cut(r, " ")
		path := pathParam.ReplaceAllStringFunc(pattern, func(m string) string {
			v, ok := params[m[1:len(m)-1]]
			if !ok {
				t.Fatalf("route %s: no value for path parameter %s", r, m)
			}
			return v
		})
		for _, c := range callers {
			want := w.expected(c)
			res := e.Do(t, method, path, nil, c.as()...)
			if got := gateOf(res); got != want {
				t.Errorf("%s as %s: %s (%d %.200s), want %s", r, c.name, got, res.Status, res.Body, want)
			}
		}
	}
	for r := range routeCallers {
		if !containsRoute(routes, r) {
			t.Errorf("routeCallers lists %s, which no route serves", r)
		}
	}
}

// gateOf reads which gate an answer came from. The handlers' own refusals with these
// codes (a plugin grant's 403, a stale owner's reauth) need objects the ids here never
// name.
func gateOf(res *apitest.Resp) gateAnswer {
	body := string(res.Body)
	switch {
	case res.Status == http.StatusUnauthorized:
		return unauthorized
	case res.Status == http.StatusForbidden:
		return forbidden
	case res.Status == http.StatusNotFound && strings.Contains(body, `"organization_not_found"`):
		return notOrgMember
	}
	return passes
}

func containsRoute(routes []string, r string) bool {
	for _, x := range routes {
		if x == r {
			return true
		}
	}
	return false
}

// readFixtures builds, inside owner's organization, the path of one GET route whose
// path names objects of the organization, and the ids in it that must not come back to
// another organization's caller.
var readFixtures = map[string]func(t *testing.T, e *apitest.Env, o apitest.Member) string{
	"GET /v1/organizations/{organizationId}/audit-events": func(t *testing.T, e *apitest.Env, o apitest.Member) string {
		return "/v1/organizations/" + o.OrgID + "/audit-events"
	},
	"GET /v1/plugins/{pluginId}": func(t *testing.T, e *apitest.Env, o apitest.Member) string {
		return "/v1/plugins/" + newPlugin(t, e, o, "Linter")
	},
	"GET /v1/marketplaces/{marketplaceId}": func(t *testing.T, e *apitest.Env, o apitest.Member) string {
		return "/v1/marketplaces/" + newMarketplace(t, e, o, "Engineering")
	},
	"GET /v1/marketplaces/{marketplaceId}/plugins": func(t *testing.T, e *apitest.Env, o apitest.Member) string {
		m := newMarketplace(t, e, o, "Engineering")
		e.Do(t, "POST", "/v1/marketplaces/"+m+"/plugins", map[string]any{"pluginId": newPlugin(t, e, o, "Linter")}, o.As()...).
			Expect(t, http.StatusCreated)
		return "/v1/marketplaces/" + m + "/plugins"
	},
	"GET /v1/gateway/usage-limit-policies/{policyId}/assignments": func(t *testing.T, e *apitest.Env, o apitest.Member) string {
		bob := e.AddMember(t, o, "bob", "member")
		p := assign(t, e, o, dayPolicy(t, e, o, "Daily", "5", nil).ID, map[string]any{"memberId": bob.MemberID})
		return policiesPath + "/" + p.ID + "/assignments"
	},
	"GET /v1/gateway/usage-limits/members/{memberId}": func(t *testing.T, e *apitest.Env, o apitest.Member) string {
		return "/v1/gateway/usage-limits/members/" + e.AddMember(t, o, "bob", "member").MemberID
	},
	// Platform administration reads every organization: another organization's id is
	// the route's purpose, not hostile input.
	"GET /v1/admin/organizations/{organizationId}/capabilities": nil,
}

// TestReadsOfAnotherOrganizationsIdsAnswer404 reads every GET route whose path names an
// object of an organization (Server.Routes: a new one without a readFixtures entry
// fails) with the ids of another organization's objects, as that other organization's
// owner, admin, member and API keys (the owner also a platform administrator): every
// answer is the refusal that ids naming nothing get (404; 403 where the caller's role may
// not use the route at all), and none carries an id of the victim's path.
func TestReadsOfAnotherOrganizationsIdsAnswer404(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	ctx := context.Background()
	victim := e.NewOrg(t, "Victim")
	owner := e.NewOrg(t, "Caller")
	if _, err := store.AddPlatformAdmin(ctx, e.Store.Pool, strings.ToLower(owner.Email), "test", e.Clock.Now()); err != nil {
		t.Fatal(err)
	}
	admin := e.AddMember(t, owner, "admin", "admin")
	member := e.AddMember(t, owner, "member", "member")
	callers := map[string][]apitest.Opt{
		"owner session":           owner.As(),
		"owner API key":           {apitest.Key(e.APIKey(t, owner))},
		"admin session":           admin.As(),
		"member API key":          {apitest.Key(e.APIKey(t, member))},
		"owner naming the victim": {apitest.Session(owner.Token), apitest.Org(victim.OrgID)},
	}
	var routes []string
	for _, r := range e.Server.Routes() {
		if strings.HasPrefix(r, "GET ") && strings.Contains(r, "{") {
			routes = append(routes, r)
		}
	}
	if len(routes) < 6 {
		t.Fatalf("only %d GET routes with path ids", len(routes))
	}
	ids := regexp.MustCompile(`[a-z]+_[0-9a-z]{26}`)
	for _, r := range routes {
		fixture, ok := readFixtures[r]
		if !ok {
			t.Errorf("route %s has no entry in readFixtures: add one, so that it is read with another organization's ids", r)
			continue
		}
		if fixture == nil {
			continue
		}
		path := fixture(t, e, victim)
		nothing := ids.ReplaceAllStringFunc(path, func(id string) string {
			return typeid.New(typeid.Prefix(id[:strings.LastIndex(id, "_")]))
		})
		for name, as := range callers {
			res, unknown := e.Do(t, "GET", path, nil, as...), e.Do(t, "GET", nothing, nil, as...)
			if res.Status != http.StatusNotFound && res.Status != http.StatusForbidden {
				t.Errorf("%s as the other organization's %s: %d %.300s, want 404 (403 for a role the route refuses)", r, name, res.Status, res.Body)
			} else if res.Status != unknown.Status || !bytes.Equal(res.Body, unknown.Body) {
				t.Errorf("%s as the other organization's %s: %d %.300s, but ids that name nothing answer %d %.300s", r, name, res.Status, res.Body, unknown.Status, unknown.Body)
			}
			for _, id := range ids.FindAllString(path, -1) {
				if strings.Contains(string(res.Body), id) {
					t.Errorf("%s as the other organization's %s: the answer names %s: %.300s", r, name, id, res.Body)
				}
			}
		}
	}
}
