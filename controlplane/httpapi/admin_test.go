package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/openapi"
	"github.com/tollgate-dev/tollgate/controlplane/password"
	"github.com/tollgate-dev/tollgate/controlplane/platform"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/apitest"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
)

// newAdmin provisions a platform administrator as an operator does, with bootstrap-admin's
// function (the account created with the fixtures' password, its email allowlisted), and
// signs them in. Sign-up refuses allowlisted emails and the API refuses to allowlist an
// existing account's, so neither is a way to make one.
func newAdmin(t *testing.T, e *apitest.Env, name string) apitest.User {
	t.Helper()
	ctx := context.Background()
	hash, err := password.Hash(apitest.Password)
	if err != nil {
		t.Fatal(err)
	}
	email := fmt.Sprintf("%s.admin%d@example.test", name, slugSeq.Add(1))
	var p platform.Provisioned
	err = e.Store.InTx(ctx, func(tx pgx.Tx) error {
		p, err = platform.ProvisionAdmin(ctx, tx, email, name, hash, typeid.New(typeid.User), e.Clock.Now())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	u := apitest.User{ID: p.User.ID, Email: email, Name: name}
	u.Token = signIn(t, e, u)
	return u
}

var slugSeq atomic.Int64

// insertOrg creates an organization directly in the database, at a chosen instant, so
// tests control the page's order and size without signing up an owner per organization.
func insertOrg(t *testing.T, e *apitest.Env, name string, at time.Time) string {
	t.Helper()
	id := typeid.New(typeid.Org)
	err := store.CreateOrganization(context.Background(), e.Store.Pool, store.Organization{
		ID: id, Name: name, Slug: fmt.Sprintf("org-%d", slugSeq.Add(1)), CreatedAt: at})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// insertMembers adds n active members to an organization directly.
func insertMembers(t *testing.T, e *apitest.Env, orgID string, n int) []string {
	t.Helper()
	ctx := context.Background()
	var ids []string
	for range n {
		email := fmt.Sprintf("m%d@example.test", slugSeq.Add(1))
		u := store.User{ID: typeid.New(typeid.User), Email: email, EmailNormalized: email, Name: "m", PasswordHash: "x",
			CreatedAt: apitest.Start}
		if err := store.CreateUser(ctx, e.Store.Pool, u); err != nil {
			t.Fatal(err)
		}
		m := store.Member{ID: typeid.New(typeid.Member), OrganizationID: orgID, UserID: u.ID, Role: "member", CreatedAt: apitest.Start}
		if err := store.CreateMember(ctx, e.Store.Pool, m); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, m.ID)
	}
	return ids
}

type orgPage struct {
	Organizations []struct {
		ID           string
		Name         string
		Slug         string
		CreatedAt    string
		MemberCount  int64
		Capabilities map[string]bool
	}
	Page struct {
		Total      int64
		Limit      int
		Offset     int
		Returned   int
		HasMore    bool
		Search     string
		DurationMs int64
	}
	GeneratedAt string
}

func (p orgPage) ids() []string {
	out := []string{}
	for _, o := range p.Organizations {
		out = append(out, o.ID)
	}
	return out
}

func getPage(t *testing.T, e *apitest.Env, admin apitest.User, query string) orgPage {
	t.Helper()
	var p orgPage
	e.Do(t, "GET", "/v1/admin/organizations"+query, nil, apitest.Session(admin.Token)).Expect(t, http.StatusOK).Decode(t, &p)
	return p
}

func searchQuery(s string) string { return "?" + url.Values{"search": {s}}.Encode() }

// expectBody checks an answer's body is exactly want (as JSON).
func expectBody(t *testing.T, r *apitest.Resp, want string) {
	t.Helper()
	var got, exp any
	if err := json.Unmarshal(r.Body, &got); err != nil {
		t.Fatalf("body %s: %v", r.Body, err)
	}
	if err := json.Unmarshal([]byte(want), &exp); err != nil {
		t.Fatal(err)
	}
	g, _ := json.Marshal(got)
	x, _ := json.Marshal(exp)
	if string(g) != string(x) {
		t.Fatalf("body %s, want %s", g, x)
	}
}

func TestAdminRoutesNeedPlatformAdmin(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	admin := newAdmin(t, e, "admin")
	adminOrg := e.CreateOrg(t, admin, "Platform")
	adminKey := e.APIKey(t, adminOrg)
	ownerKey := e.APIKey(t, owner)
	capPath := "/v1/admin/organizations/" + owner.OrgID + "/capabilities"
	routes := []struct {
		method, path string
		body         any
	}{
		{"GET", "/v1/admin/organizations", nil},
		{"GET", "/v1/admin/organizations?limit=nope", nil},
		{"GET", capPath, nil},
		{"PUT", capPath, map[string]any{"capabilities": map[string]any{"installLinks": false}}},
		{"PUT", capPath, `{"not json`},
		{"PUT", "/v1/admin/organizations/nope/capabilities", map[string]any{"capabilities": map[string]any{}}},
		{"GET", "/v1/admin/platform-admins", nil},
		{"POST", "/v1/admin/platform-admins", map[string]any{"email": "x@example.test"}},
		{"DELETE", "/v1/admin/platform-admins/" + admin.Email, nil},
		{"GET", "/v1/admin/audit-events", nil},
		{"GET", "/v1/admin/audit-events?limit=0&actor=x", nil},
	}
	for _, rt := range routes {
		t.Run(rt.method+" "+rt.path, func(t *testing.T) {
			r := e.Do(t, rt.method, rt.path, rt.body)
			r.ExpectError(t, http.StatusUnauthorized, "unauthorized")
			expectBody(t, r, `{"error":"unauthorized"}`)
			e.Do(t, rt.method, rt.path, rt.body, apitest.Key("not-a-key")).ExpectError(t, http.StatusUnauthorized, "unauthorized")
			// An organization owner is nobody on the platform: 403 before the body or the
			// path is looked at, with both kinds of credential.
			for _, cred := range []apitest.Opt{apitest.Session(owner.Token), apitest.Key(ownerKey)} {
				r := e.Do(t, rt.method, rt.path, rt.body, cred)
				expectBody(t, r.Expect(t, http.StatusForbidden), `{"error":"forbidden"}`)
			}
		})
	}
	// Both credentials of an allowlisted user work.
	e.Do(t, "GET", "/v1/admin/organizations", nil, apitest.Session(admin.Token)).Expect(t, http.StatusOK)
	e.Do(t, "GET", "/v1/admin/organizations", nil, apitest.Key(adminKey)).Expect(t, http.StatusOK)
	e.Do(t, "PUT", capPath, map[string]any{"capabilities": map[string]any{"modelsAnalytics": true}}, apitest.Key(adminKey)).
		Expect(t, http.StatusOK)
}

func TestAdminOrganizationPageQueryRules(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	admin := newAdmin(t, e, "admin")
	for i := range 120 {
		insertOrg(t, e, fmt.Sprintf("Org %03d", i), apitest.Start.Add(time.Duration(i)*time.Minute))
	}
	long := strings.Repeat("é", 170)
	cases := []struct {
		name         string
		query        string
		limit        int
		offset       int
		returned     int
		search       string
		hasMore      bool
		wantTotal    int64
		skipValidate bool
	}{
		{name: "defaults", query: "", limit: 50, returned: 50, hasMore: true, wantTotal: 120},
		{name: "limit zero clamps to 1", query: "?limit=0", limit: 1, returned: 1, hasMore: true, wantTotal: 120},
		{name: "negative limit clamps to 1", query: "?limit=-7", limit: 1, returned: 1, hasMore: true, wantTotal: 120},
		{name: "limit 1", query: "?limit=1", limit: 1, returned: 1, hasMore: true, wantTotal: 120},
		{name: "limit 100", query: "?limit=100", limit: 100, returned: 100, hasMore: true, wantTotal: 120},
		{name: "limit 101 clamps to 100", query: "?limit=101", limit: 100, returned: 100, hasMore: true, wantTotal: 120},
		{name: "largest integer limit clamps to 100", query: "?limit=9223372036854775807", limit: 100, returned: 100, hasMore: true, wantTotal: 120},
		{name: "smallest integer limit clamps to 1", query: "?limit=-9223372036854775808", limit: 1, returned: 1, hasMore: true, wantTotal: 120},
		{name: "offset 0 explicit", query: "?offset=0&limit=10", limit: 10, returned: 10, hasMore: true, wantTotal: 120},
		{name: "offset at the cap", query: "?offset=100000", limit: 50, offset: 100000, returned: 0, hasMore: false, wantTotal: 120},
		{name: "search trimmed", query: searchQuery("  Org 11  "), limit: 50, returned: 10, search: "Org 11", wantTotal: 10},
		{name: "blank search is no search", query: searchQuery(" \t "), limit: 50, returned: 50, hasMore: true, wantTotal: 120},
		{name: "search cut to 160 characters", query: searchQuery("  " + long), limit: 50, search: strings.Repeat("é", 160)},
		{name: "search cut then trimmed", query: searchQuery(strings.Repeat("x", 159) + " yz"), limit: 50, search: strings.Repeat("x", 159)},
		{name: "unknown parameters ignored", query: "?limit=2&sort=name", limit: 2, returned: 2, hasMore: true, wantTotal: 120},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := getPage(t, e, admin, tc.query)
			if p.Page.Limit != tc.limit || p.Page.Offset != tc.offset || p.Page.Returned != tc.returned ||
				p.Page.Search != tc.search || p.Page.HasMore != tc.hasMore || p.Page.Total != tc.wantTotal {
				t.Fatalf("page %+v, want limit %d offset %d returned %d search %q hasMore %v total %d",
					p.Page, tc.limit, tc.offset, tc.returned, tc.search, tc.hasMore, tc.wantTotal)
			}
			if len(p.Organizations) != tc.returned {
				t.Fatalf("%d organizations, page says %d", len(p.Organizations), tc.returned)
			}
		})
	}

	bad := []struct{ name, query, path string }{
		{"limit not a number", "?limit=ten", "limit"},
		{"limit decimal", "?limit=1.5", "limit"},
		{"limit exponent", "?limit=1e2", "limit"},
		{"limit empty", "?limit=", "limit"},
		{"limit beyond 64 bits", "?limit=99999999999999999999999", "limit"},
		{"limit plus sign (a space once decoded)", "?limit=+5", "limit"},
		{"limit twice", "?limit=1&limit=2", "limit"},
		{"offset negative", "?offset=-1", "offset"},
		{"offset above the cap", "?offset=100001", "offset"},
		{"offset huge", "?offset=99999999999999999999999", "offset"},
		{"offset not a number", "?offset=abc", "offset"},
		{"search not UTF-8", "?search=%FF", "search"},
		{"search with NUL", "?search=a%00b", "search"},
		{"search twice", "?search=a&search=b", "search"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			r := e.Do(t, "GET", "/v1/admin/organizations"+tc.query, nil, apitest.Session(admin.Token))
			m := r.ExpectError(t, http.StatusBadRequest, "invalid_request")
			details, _ := m["details"].([]any)
			if len(details) != 1 || len(m) != 2 {
				t.Fatalf("want exactly one detail and no other members: %s", r.Body)
			}
			d := details[0].(map[string]any)
			if msg, _ := d["message"].(string); msg == "" {
				t.Fatalf("detail without message: %s", r.Body)
			}
			if p, _ := d["path"].([]any); len(p) != 1 || p[0] != tc.path {
				t.Fatalf("detail path %v, want [%s]", d["path"], tc.path)
			}
		})
	}
	t.Run("malformed query string", func(t *testing.T) {
		e.Do(t, "GET", "/v1/admin/organizations?limit=%zz", nil, apitest.Session(admin.Token)).
			ExpectError(t, http.StatusBadRequest, "invalid_request")
	})
	t.Run("several problems at once", func(t *testing.T) {
		m := e.Do(t, "GET", "/v1/admin/organizations?limit=x&offset=y", nil, apitest.Session(admin.Token)).
			ExpectError(t, http.StatusBadRequest, "invalid_request")
		if d, _ := m["details"].([]any); len(d) != 2 {
			t.Fatalf("want two details: %v", m)
		}
	})
}

func TestAdminOrganizationPageOrderAndHasMore(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	admin := newAdmin(t, e, "admin")
	// Three organizations share one instant: the id (descending) breaks the tie.
	t0 := apitest.Start.Add(-time.Hour)
	old := insertOrg(t, e, "Oldest", t0.Add(-time.Minute))
	tied := []string{insertOrg(t, e, "Tie A", t0), insertOrg(t, e, "Tie B", t0), insertOrg(t, e, "Tie C", t0)}
	newest := insertOrg(t, e, "Newest", t0.Add(time.Minute))
	sort.Sort(sort.Reverse(sort.StringSlice(tied)))
	want := append(append([]string{newest}, tied...), old)

	p := getPage(t, e, admin, "")
	if !slices.Equal(p.ids(), want) {
		t.Fatalf("order %v, want %v", p.ids(), want)
	}
	if p.Organizations[0].CreatedAt != t0.Add(time.Minute).Format("2006-01-02T15:04:05.000Z") {
		t.Fatalf("createdAt %q", p.Organizations[0].CreatedAt)
	}

	// Paging with limit 2 walks the same order without gaps or repeats, and hasMore is
	// offset + returned < total at every edge.
	edges := []struct {
		offset, returned int
		hasMore          bool
	}{
		{0, 2, true}, {2, 2, true}, {3, 2, false}, {4, 1, false}, {5, 0, false}, {6, 0, false},
	}
	for _, tc := range edges {
		p := getPage(t, e, admin, fmt.Sprintf("?limit=2&offset=%d", tc.offset))
		if p.Page.Returned != tc.returned || p.Page.HasMore != tc.hasMore || p.Page.Total != 5 {
			t.Fatalf("offset %d: page %+v, want returned %d hasMore %v total 5", tc.offset, p.Page, tc.returned, tc.hasMore)
		}
		end := min(tc.offset+tc.returned, len(want))
		if tc.offset < len(want) && !slices.Equal(p.ids(), want[tc.offset:end]) {
			t.Fatalf("offset %d: %v, want %v", tc.offset, p.ids(), want[tc.offset:end])
		}
	}
	// A page that ends exactly at the last organization has no more.
	if p := getPage(t, e, admin, "?limit=5"); p.Page.HasMore || p.Page.Returned != 5 {
		t.Fatalf("exact fit: %+v", p.Page)
	}
	if p := getPage(t, e, admin, "?limit=4"); !p.Page.HasMore {
		t.Fatalf("one short: %+v", p.Page)
	}
	// hasMore also holds for a search's own total.
	if p := getPage(t, e, admin, "?limit=2&search=tie"); p.Page.Total != 3 || !p.Page.HasMore ||
		!slices.Equal(p.ids(), tied[:2]) {
		t.Fatalf("search page: %+v %v", p.Page, p.ids())
	}
	if p := getPage(t, e, admin, "?limit=2&offset=2&search=tie"); p.Page.HasMore || !slices.Equal(p.ids(), tied[2:]) {
		t.Fatalf("search last page: %+v %v", p.Page, p.ids())
	}
}

func TestAdminOrganizationSearchIsLiteralAndCaseInsensitive(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	admin := newAdmin(t, e, "admin")
	at := apitest.Start.Add(-time.Hour)
	ids := map[string]string{}
	for i, name := range []string{"100% Pure", "100 Percent", "snake_case Inc", "snakeXcase Inc", `back\slash`, "backXslash",
		"Acme Corp", "École Lumière", "foo", "Multi\nLine"} {
		ids[name] = insertOrg(t, e, name, at.Add(time.Duration(i)*time.Second))
	}
	// A slug to find by, and an organization whose name and slug are adjacent in the
	// search key.
	if _, err := e.Store.Pool.Exec(context.Background(), `UPDATE organizations SET slug = 'bar-quux' WHERE id = $1`, ids["foo"]); err != nil {
		t.Fatal(err)
	}
	acmeID := ids["Acme Corp"]
	cases := []struct {
		search string
		want   []string // names
	}{
		{"%", []string{"100% Pure"}},
		{"0%", []string{"100% Pure"}},
		{"100%", []string{"100% Pure"}},
		{"e_c", []string{"snake_case Inc"}},
		{"snake_", []string{"snake_case Inc"}},
		{`k\s`, []string{`back\slash`}},
		{`\`, []string{`back\slash`}},
		{"ACME", []string{"Acme Corp"}},
		{"aCmE cOrP", []string{"Acme Corp"}},
		{"école", []string{"École Lumière"}},
		{"LUMIÈRE", []string{"École Lumière"}},
		{"quux", []string{"foo"}},                               // slug
		{"BAR-Q", []string{"foo"}},                              // slug, case-insensitive
		{acmeID, []string{"Acme Corp"}},                         // the whole id
		{strings.ToUpper(acmeID[10:22]), []string{"Acme Corp"}}, // part of the id, upper case
		{"i\nl", []string{"Multi\nLine"}},                       // a line break inside a name matches itself
		{"foo\nbar", nil},                                       // never matches across name and slug
		{"foobar", nil},                                         // nor across their join
		{"nothing", nil},
	}
	for _, tc := range cases {
		t.Run(tc.search, func(t *testing.T) {
			p := getPage(t, e, admin, searchQuery(tc.search))
			var got []string
			for _, o := range p.Organizations {
				got = append(got, o.Name)
			}
			slices.Sort(got)
			want := slices.Clone(tc.want)
			// Ids are searched too, and a random id can hold a short term by chance
			// ("ACME" once matched backXslash's id in CI).
			for name, id := range ids {
				if strings.Contains(id, strings.ToLower(tc.search)) && !slices.Contains(want, name) {
					want = append(want, name)
				}
			}
			slices.Sort(want)
			if !slices.Equal(got, want) || p.Page.Total != int64(len(want)) {
				t.Fatalf("search %q: %v (total %d), want %v", tc.search, got, p.Page.Total, want)
			}
		})
	}
	// "_" is literal too, and every id has one (org_...), so it matches everything.
	if p := getPage(t, e, admin, searchQuery("_")); p.Page.Total != 10 {
		t.Fatalf(`search "_": total %d, want 10`, p.Page.Total)
	}
}

func TestAdminOrganizationPageEnrichment(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	admin := newAdmin(t, e, "admin")
	e.Clock.Advance(1500 * time.Millisecond)
	a := insertOrg(t, e, "Alpha", apitest.Start.Add(-2*time.Hour))
	b := insertOrg(t, e, "Beta", apitest.Start.Add(-time.Hour))
	members := insertMembers(t, e, a, 3)
	insertMembers(t, e, b, 1)
	if _, err := store.RemoveMember(context.Background(), e.Store.Pool, members[0], apitest.Start); err != nil {
		t.Fatal(err)
	}
	e.Do(t, "PUT", "/v1/admin/organizations/"+b+"/capabilities",
		map[string]any{"capabilities": map[string]any{"installLinks": false, "modelsAnalytics": true}},
		apitest.Session(admin.Token)).Expect(t, http.StatusOK)

	r := e.Do(t, "GET", "/v1/admin/organizations", nil, apitest.Session(admin.Token)).Expect(t, http.StatusOK)
	if cc := r.Header.Get("Cache-Control"); cc != "private, no-store" {
		t.Fatalf("Cache-Control %q", cc)
	}
	var p orgPage
	r.Decode(t, &p)
	if p.GeneratedAt != "2026-09-14T12:00:01.500Z" {
		t.Fatalf("generatedAt %q, want the injected clock in UTC with Z", p.GeneratedAt)
	}
	if p.Page.DurationMs < 0 {
		t.Fatalf("durationMs %d", p.Page.DurationMs)
	}
	got := map[string]any{}
	for _, o := range p.Organizations {
		got[o.ID] = []any{o.MemberCount, o.Capabilities}
	}
	want := map[string]any{
		a: []any{int64(2), map[string]bool{"installLinks": true, "mcpConnections": true, "modelsAnalytics": false, "gatewayDashboard": true}},
		b: []any{int64(1), map[string]bool{"installLinks": false, "mcpConnections": true, "modelsAnalytics": true, "gatewayDashboard": true}},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("entries %v, want %v", got, want)
	}
	// The page carries exactly the documented members (the harness checks the schema;
	// this pins the set of keys in the answer).
	var raw map[string]json.RawMessage
	r.Decode(t, &raw)
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range raw {
			if !yield(k) {
				return
			}
		}
	})
	if !slices.Equal(keys, []string{"generatedAt", "organizations", "page"}) {
		t.Fatalf("keys %v", keys)
	}
}

func capPath(orgID string) string { return "/v1/admin/organizations/" + orgID + "/capabilities" }

func TestCapabilityRoutesErrors(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	admin := newAdmin(t, e, "admin")
	org := insertOrg(t, e, "Acme", apitest.Start)
	missing := typeid.New(typeid.Org)
	as := apitest.Session(admin.Token)
	good := map[string]any{"capabilities": map[string]any{"installLinks": true}}

	expectMessage := func(t *testing.T, r *apitest.Resp, status int, code, contains string) {
		t.Helper()
		m := r.ExpectError(t, status, code)
		msg, _ := m["message"].(string)
		if len(m) != 2 || !strings.Contains(msg, contains) {
			t.Fatalf("want {error, message} with %q in the message: %s", contains, r.Body)
		}
	}
	badBodies := []struct {
		name     string
		body     any
		contains string
	}{
		{"no body", nil, "body"},
		{"not JSON", `{"capabilities":`, "JSON"},
		{"an array", `[]`, "object"},
		{"trailing data", `{"capabilities":{}} {}`, "after"},
		{"capabilities missing", `{}`, "capabilities: is required"},
		{"capabilities null", `{"capabilities":null}`, "capabilities: must be an object"},
		{"capabilities a string", `{"capabilities":"all"}`, "capabilities: must be an object"},
		{"unknown top-level field", `{"capabilities":{},"force":true}`, "force"},
		{"unknown capability", `{"capabilities":{"teleport":true}}`, "capabilities.teleport: is not a known capability"},
		{"string value", `{"capabilities":{"installLinks":"yes"}}`, "capabilities.installLinks: must be a boolean or null"},
		{"number value", `{"capabilities":{"modelsAnalytics":1}}`, "capabilities.modelsAnalytics"},
		{"gatewayDashboard validated", `{"capabilities":{"gatewayDashboard":"on"}}`, "capabilities.gatewayDashboard: must be a boolean or null"},
		{"gatewayDashboard object", `{"capabilities":{"gatewayDashboard":{}}}`, "capabilities.gatewayDashboard"},
	}
	for _, tc := range badBodies {
		t.Run("PUT "+tc.name, func(t *testing.T) {
			// The body is checked before the id, so a bad body wins over a bad id and over
			// a missing organization.
			for _, id := range []string{org, "nope", missing} {
				expectMessage(t, e.Do(t, "PUT", capPath(id), tc.body, as), http.StatusBadRequest, "invalid_request", tc.contains)
			}
		})
	}
	for _, id := range []string{"nope", "org_123", strings.ToUpper(missing), typeid.New(typeid.Team)} {
		t.Run("bad id "+id, func(t *testing.T) {
			expectMessage(t, e.Do(t, "PUT", capPath(id), good, as), http.StatusBadRequest, "invalid_request", "organizationId")
			expectMessage(t, e.Do(t, "GET", capPath(id), nil, as), http.StatusBadRequest, "invalid_request", "organizationId")
		})
	}
	// Path and query text that Postgres cannot store (not UTF-8, NUL) is a 400 of the
	// same {error, message} shape, and on the PUT it comes after the body's.
	t.Run("path and query text", func(t *testing.T) {
		for _, c := range []struct{ name, path, contains string }{
			{"path not UTF-8", "/v1/admin/organizations/%FF/capabilities", "organizationId: must be UTF-8 text"},
			{"path with NUL", "/v1/admin/organizations/org%00/capabilities", "organizationId: must be UTF-8 text"},
			{"query value with NUL", capPath(org) + "?x=%00", "x: must be UTF-8 text"},
			{"query value not UTF-8", capPath(org) + "?x=%FF", "x: must be UTF-8 text"},
		} {
			t.Run(c.name, func(t *testing.T) {
				expectMessage(t, e.Do(t, "PUT", c.path, good, as), http.StatusBadRequest, "invalid_request", c.contains)
				expectMessage(t, e.Do(t, "GET", c.path, nil, as), http.StatusBadRequest, "invalid_request", c.contains)
				expectMessage(t, e.Do(t, "PUT", c.path, `{}`, as), http.StatusBadRequest, "invalid_request", "capabilities: is required")
				expectMessage(t, e.Do(t, "PUT", c.path, `{"capabilities":{"teleport":true}}`, as), http.StatusBadRequest, "invalid_request",
					"capabilities.teleport: is not a known capability")
			})
		}
	})
	t.Run("unknown organization", func(t *testing.T) {
		expectBody(t, e.Do(t, "PUT", capPath(missing), good, as).Expect(t, http.StatusNotFound),
			`{"error":"not_found","message":"Organization not found."}`)
		expectBody(t, e.Do(t, "GET", capPath(missing), nil, as).Expect(t, http.StatusNotFound),
			`{"error":"not_found","message":"Organization not found."}`)
	})
}

// storedOverrides reads the override rows of an organization as name=value strings.
func storedOverrides(t *testing.T, e *apitest.Env, orgID string) []string {
	t.Helper()
	rows, err := e.Store.Pool.Query(context.Background(),
		`SELECT capability || '=' || value FROM organization_capability_overrides WHERE organization_id = $1 ORDER BY capability`, orgID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

func TestCapabilityOverridesSetClearAndLeave(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	admin := newAdmin(t, e, "admin")
	org := insertOrg(t, e, "Acme", apitest.Start)
	as := apitest.Session(admin.Token)
	put := func(body string) map[string]any {
		t.Helper()
		m := e.Do(t, "PUT", capPath(org), body, as).Expect(t, http.StatusOK).JSON(t)
		if m["ok"] != true || fmt.Sprint(m["organization"]) != fmt.Sprint(map[string]any{"id": org}) {
			t.Fatalf("answer %v", m)
		}
		return m["capabilities"].(map[string]any)
	}
	caps := func(il, mc, ma bool) map[string]any {
		return map[string]any{"installLinks": il, "mcpConnections": mc, "modelsAnalytics": ma, "gatewayDashboard": true}
	}
	steps := []struct {
		name   string
		body   string
		want   map[string]any
		stored []string
	}{
		{"defaults untouched by an empty write", `{"capabilities":{}}`, caps(true, true, false), []string{}},
		{"disable installLinks", `{"capabilities":{"installLinks":false}}`, caps(false, true, false), []string{"installLinks=false"}},
		{"absent leaves installLinks", `{"capabilities":{"modelsAnalytics":true}}`, caps(false, true, true),
			[]string{"installLinks=false", "modelsAnalytics=true"}},
		{"an override equal to the default is still stored", `{"capabilities":{"mcpConnections":true}}`, caps(false, true, true),
			[]string{"installLinks=false", "mcpConnections=true", "modelsAnalytics=true"}},
		{"null clears back to the default", `{"capabilities":{"installLinks":null,"mcpConnections":false}}`, caps(true, false, true),
			[]string{"mcpConnections=false", "modelsAnalytics=true"}},
		{"clearing what is not stored is fine", `{"capabilities":{"installLinks":null}}`, caps(true, false, true),
			[]string{"mcpConnections=false", "modelsAnalytics=true"}},
		{"all three at once", `{"capabilities":{"installLinks":false,"mcpConnections":null,"modelsAnalytics":null}}`, caps(false, true, false),
			[]string{"installLinks=false"}},
	}
	for _, st := range steps {
		got := put(st.body)
		if fmt.Sprint(got) != fmt.Sprint(st.want) {
			t.Fatalf("%s: capabilities %v, want %v", st.name, got, st.want)
		}
		if s := storedOverrides(t, e, org); !slices.Equal(s, st.stored) {
			t.Fatalf("%s: stored %v, want %v", st.name, s, st.stored)
		}
	}
	// GET shows the effective values and what is stored.
	expectBody(t, e.Do(t, "GET", capPath(org), nil, as).Expect(t, http.StatusOK),
		`{"capabilities":{"installLinks":false,"mcpConnections":true,"modelsAnalytics":false,"gatewayDashboard":true},
		  "overrides":{"installLinks":false,"mcpConnections":null,"modelsAnalytics":null}}`)
	// The organization page shows the same effective values.
	p := getPage(t, e, admin, "")
	if len(p.Organizations) != 1 || fmt.Sprint(p.Organizations[0].Capabilities) !=
		fmt.Sprint(map[string]bool{"installLinks": false, "mcpConnections": true, "modelsAnalytics": false, "gatewayDashboard": true}) {
		t.Fatalf("page capabilities %+v", p.Organizations)
	}
}

func TestGatewayDashboardIsNeverStored(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	admin := newAdmin(t, e, "admin")
	org := insertOrg(t, e, "Acme", apitest.Start)
	for _, v := range []string{"false", "true", "null"} {
		m := e.Do(t, "PUT", capPath(org), `{"capabilities":{"gatewayDashboard":`+v+`}}`, apitest.Session(admin.Token)).
			Expect(t, http.StatusOK).JSON(t)
		if m["capabilities"].(map[string]any)["gatewayDashboard"] != true {
			t.Fatalf("gatewayDashboard %v: answer %v", v, m)
		}
		if s := storedOverrides(t, e, org); len(s) != 0 {
			t.Fatalf("gatewayDashboard %v was stored: %v", v, s)
		}
	}
	// Alongside a real change, only the real change is stored.
	e.Do(t, "PUT", capPath(org), `{"capabilities":{"gatewayDashboard":false,"mcpConnections":false}}`, apitest.Session(admin.Token)).
		Expect(t, http.StatusOK)
	if s := storedOverrides(t, e, org); !slices.Equal(s, []string{"mcpConnections=false"}) {
		t.Fatalf("stored %v", s)
	}
}

func TestRetiredOverridesRemovedByAnyWrite(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	admin := newAdmin(t, e, "admin")
	org := insertOrg(t, e, "Acme", apitest.Start)
	other := insertOrg(t, e, "Other", apitest.Start)
	ctx := context.Background()
	// Rows an older release left behind (gatewayDashboard is retired) and one from a
	// newer release this one does not know (kept: it is not on the retired list).
	for _, row := range []struct {
		org, name string
		value     bool
	}{{org, "gatewayDashboard", false}, {other, "gatewayDashboard", false}, {org, "futureThing", true}, {org, "installLinks", false}} {
		if _, err := e.Store.Pool.Exec(ctx, `INSERT INTO organization_capability_overrides
			(organization_id, capability, value, updated_at, updated_by) VALUES ($1, $2, $3, $4, 'legacy')`,
			row.org, row.name, row.value, apitest.Start); err != nil {
			t.Fatal(err)
		}
	}
	// Reads ignore the retired row: gatewayDashboard is true whatever is stored.
	expectBody(t, e.Do(t, "GET", capPath(org), nil, apitest.Session(admin.Token)).Expect(t, http.StatusOK),
		`{"capabilities":{"installLinks":false,"mcpConnections":true,"modelsAnalytics":false,"gatewayDashboard":true},
		  "overrides":{"installLinks":false,"mcpConnections":null,"modelsAnalytics":null}}`)
	// A write that touches an unrelated capability removes the retired row.
	e.Do(t, "PUT", capPath(org), `{"capabilities":{"modelsAnalytics":true}}`, apitest.Session(admin.Token)).Expect(t, http.StatusOK)
	if s := storedOverrides(t, e, org); !slices.Equal(s, []string{"futureThing=true", "installLinks=false", "modelsAnalytics=true"}) {
		t.Fatalf("stored %v", s)
	}
	// Only the written organization is swept; the other is swept by its own next write,
	// even an empty one.
	if s := storedOverrides(t, e, other); !slices.Equal(s, []string{"gatewayDashboard=false"}) {
		t.Fatalf("other organization: %v", s)
	}
	e.Do(t, "PUT", capPath(other), `{"capabilities":{}}`, apitest.Session(admin.Token)).Expect(t, http.StatusOK)
	if s := storedOverrides(t, e, other); len(s) != 0 {
		t.Fatalf("other organization after an empty write: %v", s)
	}
	var removed string
	if err := e.Store.Pool.QueryRow(ctx, `SELECT details->>'removedRetired' FROM audit_events
		WHERE organization_id = $1 AND action = 'organization.capabilities.update'`, other).Scan(&removed); err != nil {
		t.Fatal(err)
	}
	if removed != `["gatewayDashboard"]` {
		t.Fatalf("audit removedRetired %s", removed)
	}
}

func TestCapabilityWritesAreAudited(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	admin := newAdmin(t, e, "admin")
	adminOrg := e.CreateOrg(t, admin, "Platform")
	key := e.APIKey(t, adminOrg)
	org := insertOrg(t, e, "Acme", apitest.Start)
	e.Clock.Advance(time.Minute)
	e.Do(t, "PUT", capPath(org), `{"capabilities":{"installLinks":false,"gatewayDashboard":false}}`, apitest.Session(admin.Token)).
		Expect(t, http.StatusOK)
	e.Clock.Advance(time.Minute)
	e.Do(t, "PUT", capPath(org), `{"capabilities":{"installLinks":null,"modelsAnalytics":true}}`, apitest.Key(key)).
		Expect(t, http.StatusOK)

	rows, err := e.Store.Pool.Query(context.Background(), `SELECT actor_user_id, actor_member_id, target_id, occurred_at, details
		FROM audit_events WHERE organization_id = $1 AND action = 'organization.capabilities.update' ORDER BY occurred_at`, org)
	if err != nil {
		t.Fatal(err)
	}
	type rec struct {
		actor, target string
		member        *string
		at            time.Time
		details       map[string]any
	}
	var recs []rec
	for rows.Next() {
		var r rec
		if err := rows.Scan(&r.actor, &r.member, &r.target, &r.at, &r.details); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	rows.Close()
	if len(recs) != 2 {
		t.Fatalf("%d audit records, want 2", len(recs))
	}
	first, second := recs[0], recs[1]
	if first.actor != admin.ID || first.member != nil || first.target != org || !first.at.Equal(apitest.Start.Add(time.Minute)) {
		t.Fatalf("first record %+v", first)
	}
	check := func(r rec, key, want string) {
		t.Helper()
		got, _ := json.Marshal(r.details[key])
		if string(got) != want {
			t.Fatalf("details.%s = %s, want %s (all: %v)", key, got, want, r.details)
		}
	}
	check(first, "before", `{"installLinks":null,"mcpConnections":null,"modelsAnalytics":null}`)
	check(first, "after", `{"installLinks":false,"mcpConnections":null,"modelsAnalytics":null}`)
	check(first, "requested", `{"installLinks":false}`)
	check(first, "gatewayDashboardInput", `true`)
	check(first, "actorEmail", `"`+strings.ToLower(admin.Email)+`"`)
	check(second, "before", `{"installLinks":false,"mcpConnections":null,"modelsAnalytics":null}`)
	check(second, "after", `{"installLinks":null,"mcpConnections":null,"modelsAnalytics":true}`)
	check(second, "requested", `{"installLinks":null,"modelsAnalytics":true}`)
	if second.details["apiKeyId"] == nil || second.actor != admin.ID {
		t.Fatalf("a write through an API key names the key: %+v", second)
	}
}

func TestPlatformAdminAllowlist(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	root := newAdmin(t, e, "root")
	as := apitest.Session(root.Token)

	// An email without an account is reserved: 201 the first time (trimmed and
	// lower-cased), 200 (no change) after; it is listed with a null userId and sign-up
	// refuses it.
	var added struct{ PlatformAdmin map[string]any }
	e.Do(t, "POST", "/v1/admin/platform-admins", map[string]string{"email": "  FUTURE@example.test "}, as).
		Expect(t, http.StatusCreated).Decode(t, &added)
	if added.PlatformAdmin["email"] != "future@example.test" || added.PlatformAdmin["userId"] != nil || added.PlatformAdmin["addedBy"] != root.ID {
		t.Fatalf("added %v", added)
	}
	e.Do(t, "POST", "/v1/admin/platform-admins", map[string]string{"email": "future@example.test"}, as).Expect(t, http.StatusOK)
	e.Do(t, "POST", "/v1/auth/sign-up", map[string]string{"email": "future@example.test", "password": apitest.Password, "name": "F"}).
		ExpectError(t, http.StatusForbidden, "forbidden")
	// An administrator provisioned by bootstrap-admin is on the list already: 200.
	second := newAdmin(t, e, "second")
	e.Do(t, "POST", "/v1/admin/platform-admins", map[string]string{"email": second.Email}, as).Expect(t, http.StatusOK)
	e.Do(t, "GET", "/v1/admin/organizations", nil, apitest.Session(second.Token)).Expect(t, http.StatusOK)
	expectBody(t, e.Do(t, "GET", "/v1/admin/platform-admins", nil, as).Expect(t, http.StatusOK), fmt.Sprintf(
		`{"platformAdmins":[
			{"email":"future@example.test","userId":null,"addedBy":%q,"createdAt":"2026-09-14T12:00:00.000Z"},
			{"email":%q,"userId":%q,"addedBy":"bootstrap","createdAt":"2026-09-14T12:00:00.000Z"},
			{"email":%q,"userId":%q,"addedBy":"bootstrap","createdAt":"2026-09-14T12:00:00.000Z"}]}`,
		root.ID, root.Email, root.ID, second.Email, second.ID))

	for _, body := range []any{`{}`, `{"email":"not-an-email"}`, `{"email":7}`, `{"email":"a@b.test","role":"x"}`} {
		e.Do(t, "POST", "/v1/admin/platform-admins", body, as).ExpectError(t, http.StatusBadRequest, "invalid_request")
	}

	// Removal rules.
	e.Do(t, "DELETE", "/v1/admin/platform-admins/not-an-email", nil, as).ExpectError(t, http.StatusBadRequest, "invalid_request")
	e.Do(t, "DELETE", "/v1/admin/platform-admins/nobody@example.test", nil, as).ExpectError(t, http.StatusNotFound, "platform_admin_not_found")
	e.Do(t, "DELETE", "/v1/admin/platform-admins/"+root.Email, nil, as).ExpectError(t, http.StatusConflict, "cannot_remove_self")
	e.Do(t, "DELETE", "/v1/admin/platform-admins/FUTURE@example.test", nil, as).Expect(t, http.StatusNoContent)
	e.Do(t, "DELETE", "/v1/admin/platform-admins/"+second.Email, nil, as).Expect(t, http.StatusNoContent)
	// second loses access on their next request.
	e.Do(t, "GET", "/v1/admin/organizations", nil, apitest.Session(second.Token)).ExpectError(t, http.StatusForbidden, "forbidden")
	// root is now the last administrator.
	e.Do(t, "DELETE", "/v1/admin/platform-admins/"+root.Email, nil, as).ExpectError(t, http.StatusConflict, "last_platform_admin")
	e.Do(t, "GET", "/v1/admin/organizations", nil, as).Expect(t, http.StatusOK)

	// Every change is audited, attributed to root; the refused ones and the no-op are not.
	rows, err := e.Store.Pool.Query(context.Background(), `SELECT action, actor_user_id, coalesce(target_id, ''), details->>'email'
		FROM audit_events WHERE action LIKE 'platform_admin.%' ORDER BY occurred_at, id`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var action, actor, target, email string
		if err := rows.Scan(&action, &actor, &target, &email); err != nil {
			t.Fatal(err)
		}
		if actor != root.ID {
			t.Fatalf("actor %s", actor)
		}
		got = append(got, action+" "+email+" "+target)
	}
	rows.Close()
	slices.Sort(got) // same instant: order by content
	want := []string{
		"platform_admin.add future@example.test ",
		"platform_admin.remove " + second.Email + " " + second.ID,
		"platform_admin.remove future@example.test ",
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("audit %q, want %q", got, want)
	}
}

// TestAllowlistingRefusesAnExistingAccount: emails are not verified, so an account is
// whoever's registered its address first, and sign-up refuses allowlisted emails so that
// nobody can claim an administrator's address first. Allowlisting through the API an
// email that an account already uses would hand that account, and its sessions, platform
// administration: it is refused (409 user_exists, naming bootstrap-admin) and changes
// nothing; bootstrap-admin's reset of the password is the way, and it ends the
// squatter's sessions.
func TestAllowlistingRefusesAnExistingAccount(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	admin := newAdmin(t, e, "root")
	squatter := e.SignUp(t, "newops") // signs up with the address the operators will allowlist
	e.Do(t, "GET", "/v1/admin/organizations", nil, apitest.Session(squatter.Token)).ExpectError(t, http.StatusForbidden, "forbidden")

	before := count(t, e, "platform_admins", "true")
	audits := count(t, e, "audit_events", "true")
	body := e.Do(t, "POST", "/v1/admin/platform-admins", map[string]any{"email": " " + strings.ToUpper(squatter.Email)},
		apitest.Session(admin.Token)).ExpectError(t, http.StatusConflict, "user_exists")
	if msg, _ := body["message"].(string); !strings.Contains(msg, "controlplane bootstrap-admin --email "+squatter.Email) ||
		!strings.Contains(msg, "resets the account's password") {
		t.Fatalf("message %q", body["message"])
	}
	if count(t, e, "platform_admins", "true") != before || count(t, e, "audit_events", "true") != audits {
		t.Fatal("a refused allowlisting wrote")
	}
	e.Do(t, "GET", "/v1/admin/organizations", nil, apitest.Session(squatter.Token)).ExpectError(t, http.StatusForbidden, "forbidden")

	// bootstrap-admin provisions the address: a new password, the squatter's session ended.
	hash, err := password.Hash("the operator's own password")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	err = e.Store.InTx(ctx, func(tx pgx.Tx) error {
		p, err := platform.ProvisionAdmin(ctx, tx, strings.ToLower(squatter.Email), "ops", hash, typeid.New(typeid.User), e.Clock.Now())
		if err == nil && (p.Created || p.User.ID != squatter.ID || len(p.Revoked) != 1) {
			t.Errorf("provisioned %+v", p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	e.Do(t, "GET", "/v1/admin/organizations", nil, apitest.Session(squatter.Token)).ExpectError(t, http.StatusUnauthorized, "unauthorized")
	e.Do(t, "POST", "/v1/auth/sign-in", map[string]any{"email": squatter.Email, "password": apitest.Password}).
		ExpectError(t, http.StatusUnauthorized, "unauthorized")
}

// TestBootstrapAdminRevokesTheSquattersAPIKeys: the platform-admin gate takes API keys
// too, so a key the squatter minted before bootstrap-admin would become an
// administrator's credential the moment the address is allowlisted. bootstrap-admin's
// reset revokes every key of the account (in each of its organizations) with its
// sessions, in the same transaction (TestBootstrapAdminTellsEnforcersToForgetTheSquatter:
// and tells the enforcers).
func TestBootstrapAdminRevokesTheSquattersAPIKeys(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	newAdmin(t, e, "root")
	squatter := e.SignUp(t, "newops")
	key := e.APIKey(t, e.CreateOrg(t, squatter, "Squat"))
	other := e.APIKey(t, e.CreateOrg(t, squatter, "Second"))
	e.Do(t, "GET", "/v1/admin/organizations", nil, apitest.Key(key)).ExpectError(t, http.StatusForbidden, "forbidden")

	hash, err := password.Hash("the operator's own password")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	err = e.Store.InTx(ctx, func(tx pgx.Tx) error {
		_, err := platform.ProvisionAdmin(ctx, tx, strings.ToLower(squatter.Email), "ops", hash, typeid.New(typeid.User), e.Clock.Now())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{key, other} {
		e.Do(t, "GET", "/v1/admin/organizations", nil, apitest.Key(k)).ExpectError(t, http.StatusUnauthorized, "unauthorized")
		e.Do(t, "POST", "/v1/admin/platform-admins", map[string]any{"email": "accomplice@example.test"}, apitest.Key(k)).
			ExpectError(t, http.StatusUnauthorized, "unauthorized")
		e.Do(t, "GET", "/v1/me", nil, apitest.Key(k)).ExpectError(t, http.StatusUnauthorized, "unauthorized")
	}
}

// TestSignUpAndAllowlistingOneEmailConcurrently: a sign-up and an allowlisting of one
// email at the same moment never both succeed (each checks for the other under the
// email's lock): either the account came first and the allowlisting is 409 user_exists,
// or the allowlisting came first and the sign-up is refused.
func TestSignUpAndAllowlistingOneEmailConcurrently(t *testing.T) {
	t.Parallel()
	e := apitest.NewWith(t, apitest.Options{TrustForwardedFor: true}) // refused sign-ups are throttled per address
	admin := newAdmin(t, e, "root")
	for round := range 10 {
		email := fmt.Sprintf("race%d.%d@example.test", round, slugSeq.Add(1))
		rs := concurrently(
			func() *apitest.Resp {
				return e.Do(t, "POST", "/v1/auth/sign-up", map[string]string{"email": email, "password": apitest.Password, "name": "M"},
					apitest.Header("X-Forwarded-For", fmt.Sprintf("192.0.2.%d", round+1)))
			},
			func() *apitest.Resp {
				return e.Do(t, "POST", "/v1/admin/platform-admins", map[string]string{"email": email}, apitest.Session(admin.Token))
			})
		noServerErrors(t, round, rs...)
		if rs[0].Status == http.StatusCreated {
			expectStatus(t, round, rs[1], http.StatusConflict, "user_exists")
		} else {
			expectStatus(t, round, rs[0], http.StatusForbidden, "forbidden")
			expectStatus(t, round, rs[1], http.StatusCreated, "")
		}
	}
}

// TestAdminRoutesAreDocumented checks that the document describes every admin route of
// the table and nothing more under /v1/admin.
func TestAdminRoutesAreDocumented(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	var served []string
	for _, r := range e.Server.Routes() {
		if strings.Contains(r, " /v1/admin/") {
			served = append(served, r)
		}
	}
	ops, err := openapi.Operations()
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, o := range ops {
		if strings.HasPrefix(o.Path, "/v1/admin/") {
			documented = append(documented, o.Method+" "+o.Path)
		}
	}
	slices.Sort(served)
	slices.Sort(documented)
	if len(served) == 0 || !slices.Equal(served, documented) {
		t.Fatalf("routes %v, documented %v", served, documented)
	}
}

// TestPlatformWritesUseTheCallersAllowlistingAtTheirTime: an administrator removed from
// the allowlist while their write waited (here behind the removal itself, uncommitted)
// is refused 403 forbidden and changes nothing, as a removal by such a caller already
// was (platform.RemoveAdmin). Before, adding an email and setting an organization's
// capabilities trusted the allowlist read at authentication, so the write of an
// administrator just removed still committed.
func TestPlatformWritesUseTheCallersAllowlistingAtTheirTime(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	org := e.NewOrg(t, "Acme")
	writes := []struct {
		name, method, path string
		body               any
		wrote              string // counts what the write would have written
	}{
		{"allowlist an email", "POST", "/v1/admin/platform-admins", map[string]string{"email": "accomplice@example.test"},
			"SELECT count(*) FROM platform_admins WHERE email_normalized = 'accomplice@example.test'"},
		{"set capabilities", "PUT", capPath(org.OrgID), map[string]any{"capabilities": map[string]any{"modelsAnalytics": true}},
			"SELECT count(*) FROM organization_capability_overrides"},
	}
	for _, w := range writes {
		t.Run(w.name, func(t *testing.T) {
			rogue := newAdmin(t, e, "rogue")
			hold := openTx(t, e)
			if _, err := hold.Exec(context.Background(), `DELETE FROM platform_admins WHERE email_normalized = $1`, rogue.Email); err != nil {
				t.Fatal(err)
			}
			answered := make(chan *apitest.Resp, 1)
			go func() { answered <- e.Do(t, w.method, w.path, w.body, apitest.Session(rogue.Token)) }()
			awaitLockWaits(t, e, 1)
			if err := hold.Commit(context.Background()); err != nil {
				t.Fatal(err)
			}
			if r := <-answered; r.Status != http.StatusForbidden || strings.TrimSpace(string(r.Body)) != `{"error":"forbidden"}` {
				t.Fatalf("answered %d %s, want 403 {\"error\":\"forbidden\"}", r.Status, r.Body)
			}
			var n int
			if err := e.Store.Pool.QueryRow(context.Background(), w.wrote).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Fatalf("the refused write wrote %d rows", n)
			}
		})
	}
}
