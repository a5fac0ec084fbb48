package httpapi_test

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/internal/apitest"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
)

// Tests of the audit trails: GET /v1/organizations/{organizationId}/audit-events (owners
// and admins) and GET /v1/admin/audit-events (platform administrators).

type auditEvent struct {
	ID             string
	OccurredAt     string
	OrganizationID *string
	ActorUserID    *string
	ActorMemberID  *string
	Action         string
	TargetID       *string
	Details        map[string]any
}

type auditPage struct {
	Events     []auditEvent
	Limit      int
	HasMore    bool
	NextCursor *string
}

func orgAuditPath(orgID string) string { return "/v1/organizations/" + orgID + "/audit-events" }

const platformAuditPath = "/v1/admin/audit-events"

// readAudit reads one page; query is added to path as it is.
func readAudit(t *testing.T, e *apitest.Env, path string, query url.Values, opts ...apitest.Opt) auditPage {
	t.Helper()
	var p auditPage
	e.Do(t, "GET", path+"?"+query.Encode(), nil, opts...).Expect(t, http.StatusOK).Decode(t, &p)
	return p
}

// readAllAudit follows nextCursor with small pages and returns every event, checking
// that pages never repeat an event and that the order is newest first.
func readAllAudit(t *testing.T, e *apitest.Env, path string, query url.Values, opts ...apitest.Opt) []auditEvent {
	t.Helper()
	q := url.Values{}
	for k, v := range query {
		q[k] = v
	}
	q.Set("limit", "2")
	var out []auditEvent
	seen := map[string]bool{}
	for range 1000 {
		p := readAudit(t, e, path, q, opts...)
		if p.Limit != 2 || len(p.Events) > 2 || p.HasMore != (p.NextCursor != nil) || (p.HasMore && len(p.Events) != 2) {
			t.Fatalf("page shape: limit %d, %d events, hasMore %v, cursor %v", p.Limit, len(p.Events), p.HasMore, p.NextCursor)
		}
		for _, ev := range p.Events {
			if seen[ev.ID] {
				t.Fatalf("event %s on two pages", ev.ID)
			}
			seen[ev.ID] = true
			out = append(out, ev)
		}
		if !p.HasMore {
			break
		}
		q.Set("cursor", *p.NextCursor)
	}
	for i := 1; i < len(out); i++ {
		a, b := out[i-1], out[i]
		// The test clock moves in whole seconds, so equal rendered instants are equal
		// instants, and those are ordered by id, descending.
		if a.OccurredAt < b.OccurredAt || (a.OccurredAt == b.OccurredAt && a.ID < b.ID) {
			t.Fatalf("not newest first at %d: %s %s then %s %s", i, a.OccurredAt, a.ID, b.OccurredAt, b.ID)
		}
	}
	return out
}

func ids(evs []auditEvent) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.ID
	}
	slices.Sort(out)
	return out
}

// storedAuditIDs reads the ids of audit events matching a condition, straight from the table.
func storedAuditIDs(t *testing.T, e *apitest.Env, where string, args ...any) []string {
	t.Helper()
	rows, err := e.Store.Pool.Query(context.Background(), `SELECT id FROM audit_events WHERE `+where+` ORDER BY id`, args...)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// orgActivity makes an owner write a few things in their organization.
func orgActivity(t *testing.T, e *apitest.Env, owner apitest.Member, name string) {
	t.Helper()
	plg := newPlugin(t, e, owner, name+" plugin")
	mkt := newMarketplace(t, e, owner, name+" marketplace")
	addPlugin(t, e, mkt, map[string]any{"pluginId": plg}, owner.As()...).Expect(t, http.StatusCreated)
	newTeam(t, e, owner, name+" team")
}

// TestAuditTrailIsolation: two organizations, one user an admin of both, a platform
// administrator who changes one of them. Each organization's trail holds exactly the
// events filed under it, whoever reads it and however they name the organization.
func TestAuditTrailIsolation(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	acme := e.NewOrg(t, "Acme")
	rival := e.NewOrg(t, "Rival")
	orgActivity(t, e, acme, "acme")
	orgActivity(t, e, rival, "rival")
	// Dana is an admin of both organizations.
	danaAcme := e.AddMember(t, acme, "dana", "admin")
	danaRival := e.Join(t, rival, danaAcme.User, "admin")
	e.Clock.Advance(time.Minute)
	newPlugin(t, e, danaAcme, "dana's acme plugin")
	newPlugin(t, e, danaRival, "dana's rival plugin")
	// A platform administrator changes Acme's capabilities: filed under Acme.
	root := newAdmin(t, e, "root")
	e.Do(t, "PUT", capPath(acme.OrgID), map[string]any{"capabilities": map[string]any{"modelsAnalytics": true}},
		apitest.Session(root.Token)).Expect(t, http.StatusOK)
	acmeKey := e.APIKey(t, acme)

	wantAcme := storedAuditIDs(t, e, "organization_id = $1", acme.OrgID)
	wantRival := storedAuditIDs(t, e, "organization_id = $1", rival.OrgID)
	if len(wantAcme) < 8 || len(wantRival) < 6 {
		t.Fatalf("too little activity to test: %d and %d events", len(wantAcme), len(wantRival))
	}

	readers := []struct {
		name  string
		org   string
		opts  []apitest.Opt
		wants []string
	}{
		{"acme's owner", acme.OrgID, acme.As(), wantAcme},
		{"acme's owner, API key", acme.OrgID, []apitest.Opt{apitest.Key(acmeKey)}, wantAcme},
		{"acme's owner, no org header (the path decides)", acme.OrgID, []apitest.Opt{apitest.Session(acme.Token)}, wantAcme},
		{"dana on acme's path, rival's header", acme.OrgID, []apitest.Opt{apitest.Session(danaAcme.Token), apitest.Org(rival.OrgID)}, wantAcme},
		{"dana on rival's path, acme's header", rival.OrgID, []apitest.Opt{apitest.Session(danaAcme.Token), apitest.Org(acme.OrgID)}, wantRival},
		{"rival's owner", rival.OrgID, rival.As(), wantRival},
	}
	for _, rd := range readers {
		t.Run(rd.name, func(t *testing.T) {
			got := readAllAudit(t, e, orgAuditPath(rd.org), nil, rd.opts...)
			if !slices.Equal(ids(got), rd.wants) {
				t.Fatalf("trail %v\nwant      %v", ids(got), rd.wants)
			}
			for _, ev := range got {
				if ev.OrganizationID == nil || *ev.OrganizationID != rd.org {
					t.Fatalf("event of another organization: %+v", ev)
				}
			}
		})
	}

	// The platform administrator's change is in Acme's trail, as the user who made it.
	acmeTrail := readAudit(t, e, orgAuditPath(acme.OrgID), url.Values{"action": {"organization.capabilities.update"}}, acme.As()...)
	if len(acmeTrail.Events) != 1 || deref(acmeTrail.Events[0].ActorUserID) != root.ID || acmeTrail.Events[0].ActorMemberID != nil {
		t.Fatalf("platform change in acme's trail: %+v", acmeTrail.Events)
	}

	// Naming the other organization never shows its events: 404, as for an id that
	// names nothing, with sessions and API keys alike.
	before := digest(t, e)
	for name, opts := range map[string][]apitest.Opt{
		"owner's session":              acme.As(),
		"owner's session, no header":   {apitest.Session(acme.Token)},
		"owner's key":                  {apitest.Key(acmeKey)},
		"owner's key with rival's org": {apitest.Key(acmeKey), apitest.Org(rival.OrgID)},
	} {
		t.Run("acme's owner reading rival: "+name, func(t *testing.T) {
			body := e.Do(t, "GET", orgAuditPath(rival.OrgID), nil, opts...).ExpectError(t, http.StatusNotFound, "organization_not_found")
			if _, has := body["events"]; has {
				t.Fatalf("a 404 with events: %v", body)
			}
		})
	}
	e.Do(t, "GET", orgAuditPath(missing(typeid.Org)), nil, acme.As()...).ExpectError(t, http.StatusNotFound, "organization_not_found")
	// Even a platform administrator reads an organization's trail only as its member.
	e.Do(t, "GET", orgAuditPath(acme.OrgID), nil, apitest.Session(root.Token)).ExpectError(t, http.StatusNotFound, "organization_not_found")
	// A cursor of one organization's trail does not page another's.
	p := readAudit(t, e, orgAuditPath(acme.OrgID), url.Values{"limit": {"1"}}, danaAcme.As()...)
	e.Do(t, "GET", orgAuditPath(rival.OrgID)+"?limit=1&cursor="+url.QueryEscape(*p.NextCursor), nil, danaRival.As()...).
		ExpectError(t, http.StatusBadRequest, "invalid_request")
	expectNoWrites(t, e, before)

	// The platform's trail holds the platform administrator's change and none of the
	// members' writes of either organization.
	platform := readAllAudit(t, e, platformAuditPath, nil, apitest.Session(root.Token))
	if want := storedAuditIDs(t, e, "actor_member_id IS NULL"); !slices.Equal(ids(platform), want) || len(want) == 0 {
		t.Fatalf("platform trail %v, want %v", ids(platform), want)
	}
	for _, ev := range platform {
		if ev.ActorMemberID != nil {
			t.Fatalf("a member's event in the platform trail: %+v", ev)
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// TestAuditTrailAccess: who may read an organization's trail.
func TestAuditTrailAccess(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	admin := e.AddMember(t, owner, "ada", "admin")
	member := e.AddMember(t, owner, "bob", "member")
	gone := e.AddMember(t, owner, "gus", "admin")
	goneKey := e.APIKey(t, gone)
	e.Do(t, "DELETE", "/v1/members/"+gone.MemberID, nil, owner.As()...).Expect(t, http.StatusNoContent)
	memberKey := e.APIKey(t, member)
	path := orgAuditPath(owner.OrgID)

	readAudit(t, e, path, nil, owner.As()...)
	readAudit(t, e, path, nil, admin.As()...)
	r := e.Do(t, "GET", path, nil, admin.As()...)
	if got := r.Header.Get("Cache-Control"); got != "private, no-store" {
		t.Fatalf("cache-control %q", got)
	}

	before := digest(t, e)
	cases := []struct {
		name   string
		path   string
		opts   []apitest.Opt
		status int
		code   string
	}{
		{"no credential", path, nil, 401, "unauthorized"},
		{"bad key", path, []apitest.Opt{apitest.Key("tg_nope")}, 401, "unauthorized"},
		{"a member", path, member.As(), 403, "forbidden"},
		{"a member's API key", path, []apitest.Opt{apitest.Key(memberKey)}, 403, "forbidden"},
		{"a removed admin", path, gone.As(), 404, "organization_not_found"},
		{"a removed admin's key", path, []apitest.Opt{apitest.Key(goneKey)}, 401, "unauthorized"},
		{"malformed organization id", orgAuditPath("org_123"), owner.As(), 400, "invalid_request"},
		{"member id as organization id", orgAuditPath(owner.MemberID), owner.As(), 400, "invalid_request"},
		{"401 before 400", orgAuditPath("nope"), nil, 401, "unauthorized"},
		{"404 before 403 for another organization", orgAuditPath(missing(typeid.Org)), member.As(), 404, "organization_not_found"},
		{"403 before a bad query", path + "?limit=0", member.As(), 403, "forbidden"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body := e.Do(t, "GET", tc.path, nil, tc.opts...).ExpectError(t, tc.status, tc.code)
			if tc.status == 400 {
				details, _ := body["details"].([]any)
				if len(details) != 1 || details[0].(map[string]any)["path"].([]any)[0] != "organizationId" {
					t.Fatalf("details %v", body)
				}
			}
		})
	}
	expectNoWrites(t, e, before)
}

// TestAuditTrailFiltersAndPaging: actor, action, since and until select exactly their
// events; pages follow each other without gaps or repeats, bound to their filter.
func TestAuditTrailFiltersAndPaging(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme") // organization.create at Start
	admin := e.AddMember(t, owner, "ada", "admin")
	path := orgAuditPath(owner.OrgID)

	e.Clock.Advance(time.Hour) // Start+1h: three plugins by the admin
	t1 := e.Clock.Now()
	for _, n := range []string{"a", "b", "c"} {
		newPlugin(t, e, admin, n)
	}
	e.Clock.Advance(time.Hour) // Start+2h: two teams by the owner
	t2 := e.Clock.Now()
	newTeam(t, e, owner, "t1")
	newTeam(t, e, owner, "t2")
	e.Clock.Advance(time.Hour) // Start+3h: one more plugin by the owner
	t3 := e.Clock.Now()
	newPlugin(t, e, owner, "d")

	all := readAllAudit(t, e, path, nil, owner.As()...)
	if want := storedAuditIDs(t, e, "organization_id = $1", owner.OrgID); !slices.Equal(ids(all), want) {
		t.Fatalf("trail %v, want %v", ids(all), want)
	}
	if all[0].Action != "plugin.create" || deref(all[0].ActorMemberID) != owner.MemberID || all[0].OccurredAt != stamp(t3) {
		t.Fatalf("newest event %+v", all[0])
	}
	if all[len(all)-1].Action != "organization.create" {
		t.Fatalf("oldest event %+v", all[len(all)-1])
	}

	rfc := func(tm time.Time) string { return tm.UTC().Format(time.RFC3339Nano) }
	cases := []struct {
		name  string
		query url.Values
		where string
		args  []any
	}{
		{"actor: a member", url.Values{"actor": {admin.MemberID}}, "actor_member_id = $2", []any{admin.MemberID}},
		{"actor: a user", url.Values{"actor": {owner.ID}}, "actor_user_id = $2", []any{owner.ID}},
		{"action", url.Values{"action": {"plugin.create"}}, "action = $2", []any{"plugin.create"}},
		{"action nobody recorded", url.Values{"action": {"plugin.fly"}}, "false", nil},
		{"actor and action", url.Values{"actor": {owner.MemberID}, "action": {"plugin.create"}},
			"actor_member_id = $2 AND action = $3", []any{owner.MemberID, "plugin.create"}},
		{"since is inclusive", url.Values{"since": {rfc(t2)}}, "occurred_at >= $2", []any{t2}},
		{"until is exclusive", url.Values{"until": {rfc(t2)}}, "occurred_at < $2", []any{t2}},
		{"since and until: one hour", url.Values{"since": {rfc(t1)}, "until": {rfc(t2)}},
			"occurred_at >= $2 AND occurred_at < $3", []any{t1, t2}},
		{"another offset names the same instant", url.Values{"since": {t2.In(time.FixedZone("", -5*3600)).Format(time.RFC3339)}},
			"occurred_at >= $2", []any{t2}},
		{"a nanosecond after an event excludes it", url.Values{"since": {rfc(t3.Add(time.Nanosecond))}}, "false", nil},
		{"until a nanosecond after an event includes it", url.Values{"since": {rfc(t3)}, "until": {rfc(t3.Add(time.Nanosecond))}},
			"occurred_at = $2", []any{t3}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := readAllAudit(t, e, path, tc.query, owner.As()...)
			want := storedAuditIDs(t, e, "organization_id = $1 AND "+tc.where, append([]any{owner.OrgID}, tc.args...)...)
			if !slices.Equal(ids(got), want) {
				t.Fatalf("got %v\nwant %v", ids(got), want)
			}
			if tc.where != "false" && len(want) == 0 {
				t.Fatal("the case selects nothing; it proves nothing")
			}
		})
	}

	// The default page is 50; a page of 3 says there is more and where to go on.
	p := readAudit(t, e, path, nil, owner.As()...)
	if p.Limit != 50 || p.HasMore || p.NextCursor != nil || len(p.Events) != len(all) {
		t.Fatalf("default page: limit %d, hasMore %v, %d events", p.Limit, p.HasMore, len(p.Events))
	}
	p = readAudit(t, e, path, url.Values{"limit": {"3"}, "action": {"plugin.create"}}, owner.As()...)
	if len(p.Events) != 3 || !p.HasMore || p.NextCursor == nil {
		t.Fatalf("first page of 3: %+v", p)
	}
	// The cursor is bound to its filter: another filter, or none, is 400.
	for _, q := range []url.Values{
		{"cursor": {*p.NextCursor}},
		{"cursor": {*p.NextCursor}, "action": {"team.create"}},
		{"cursor": {*p.NextCursor}, "action": {"plugin.create"}, "since": {rfc(t1)}},
	} {
		body := e.Do(t, "GET", path+"?"+q.Encode(), nil, owner.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
		if d := body["details"].([]any)[0].(map[string]any); d["path"].([]any)[0] != "cursor" {
			t.Fatalf("details %v", body)
		}
	}
	// With the same filter it continues where the page ended.
	next := readAudit(t, e, path, url.Values{"limit": {"3"}, "action": {"plugin.create"}, "cursor": {*p.NextCursor}}, owner.As()...)
	if len(next.Events) != 1 || next.HasMore || next.NextCursor != nil || next.Events[0].OccurredAt != stamp(t1) {
		t.Fatalf("second page: %+v", next)
	}
}

// TestAuditTrailQueryValidation: every bad query is 400 invalid_request naming the
// parameter, and nothing is read or written.
func TestAuditTrailQueryValidation(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	root := newAdmin(t, e, "root")
	orgPath := orgAuditPath(owner.OrgID)
	cases := []struct {
		name  string
		path  string
		query string
		param string
	}{
		{"actor: not an id", orgPath, "actor=bob", "actor"},
		{"actor: a plugin id", orgPath, "actor=" + missing(typeid.Plugin), "actor"},
		{"actor: empty", orgPath, "actor=", "actor"},
		{"actor: given twice", orgPath, "actor=" + owner.MemberID + "&actor=" + owner.MemberID, "actor"},
		{"action: empty", orgPath, "action=", "action"},
		{"action: upper case", orgPath, "action=Plugin.Create", "action"},
		{"action: a wildcard", orgPath, "action=plugin.%25", "action"},
		{"action: 101 characters", orgPath, "action=a" + strings.Repeat("x", 100), "action"},
		{"since: a date only", orgPath, "since=2026-09-14", "since"},
		{"since: no offset", orgPath, "since=2026-09-14T12:00:00", "since"},
		{"since: words", orgPath, "since=yesterday", "since"},
		{"until: a Unix time", orgPath, "until=1789000000", "until"},
		{"until equal to since", orgPath, "since=2026-09-14T12:00:00Z&until=2026-09-14T12:00:00Z", "until"},
		{"until before since", orgPath, "since=2026-09-14T12:00:00Z&until=2026-09-14T11:00:00Z", "until"},
		{"limit 0", orgPath, "limit=0", "limit"},
		{"limit 101", orgPath, "limit=101", "limit"},
		{"limit not digits", orgPath, "limit=1.5", "limit"},
		{"cursor: garbage", orgPath, "cursor=abc", "cursor"},
		{"an unknown parameter", orgPath, "actorId=" + owner.MemberID, "actorId"},
		{"platform: actor a member id", platformAuditPath, "actor=" + owner.MemberID, "actor"},
		{"platform: bad since", platformAuditPath, "since=now", "since"},
		{"platform: unknown parameter", platformAuditPath, "organizationId=" + owner.OrgID, "organizationId"},
	}
	before := digest(t, e)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			opts := owner.As()
			if tc.path == platformAuditPath {
				opts = []apitest.Opt{apitest.Session(root.Token)}
			}
			body := e.Do(t, "GET", tc.path+"?"+tc.query, nil, opts...).ExpectError(t, http.StatusBadRequest, "invalid_request")
			details, _ := body["details"].([]any)
			if len(details) == 0 {
				t.Fatalf("no details: %v", body)
			}
			d := details[0].(map[string]any)
			if msg, _ := d["message"].(string); msg == "" || d["path"].([]any)[0] != tc.param {
				t.Fatalf("detail %v, want the path %q", d, tc.param)
			}
		})
	}
	// Several problems are reported together.
	body := e.Do(t, "GET", orgPath+"?actor=x&action=X&since=y&limit=0", nil, owner.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
	if n := len(body["details"].([]any)); n != 4 {
		t.Fatalf("%d details, want 4: %v", n, body)
	}
	expectNoWrites(t, e, before)
}

// TestPlatformAuditTrail: platform administrators read the events of platform
// administration, which no organization member made; others get 403.
func TestPlatformAuditTrail(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	orgActivity(t, e, owner, "acme")
	root := newAdmin(t, e, "root")
	rootOrg := e.CreateOrg(t, root, "Platform")
	rootKey := e.APIKey(t, rootOrg)
	e.Clock.Advance(time.Minute)
	e.Do(t, "POST", "/v1/admin/platform-admins", map[string]any{"email": "second@example.test"}, apitest.Session(root.Token)).
		Expect(t, http.StatusCreated)
	e.Clock.Advance(time.Minute)
	e.Do(t, "PUT", capPath(owner.OrgID), map[string]any{"capabilities": map[string]any{"installLinks": false}},
		apitest.Key(rootKey)).Expect(t, http.StatusOK)
	e.Clock.Advance(time.Minute)
	e.Do(t, "DELETE", "/v1/admin/platform-admins/second@example.test", nil, apitest.Session(root.Token)).
		Expect(t, http.StatusNoContent)

	got := readAllAudit(t, e, platformAuditPath, nil, apitest.Session(root.Token))
	actions := make([]string, len(got))
	for i, ev := range got {
		actions[i] = ev.Action
		if deref(ev.ActorUserID) != root.ID || ev.ActorMemberID != nil {
			t.Fatalf("actor of %+v", ev)
		}
	}
	if want := []string{"platform_admin.remove", "organization.capabilities.update", "platform_admin.add"}; !slices.Equal(actions, want) {
		t.Fatalf("actions %v, want %v", actions, want)
	}
	if got[0].OrganizationID != nil || deref(got[1].OrganizationID) != owner.OrgID || got[1].Details["apiKeyId"] == nil {
		t.Fatalf("events %+v", got)
	}
	// Filters work here too: by the administrator, by action, by time.
	if p := readAudit(t, e, platformAuditPath, url.Values{"actor": {owner.ID}}, apitest.Session(root.Token)); len(p.Events) != 0 {
		t.Fatalf("an owner's events in the platform trail: %+v", p.Events)
	}
	if p := readAudit(t, e, platformAuditPath, url.Values{"actor": {root.ID}, "action": {"platform_admin.add"}}, apitest.Key(rootKey)); len(p.Events) != 1 {
		t.Fatalf("filtered: %+v", p.Events)
	}
	since := apitest.Start.Add(2 * time.Minute).Format(time.RFC3339)
	if p := readAudit(t, e, platformAuditPath, url.Values{"since": {since}}, apitest.Session(root.Token)); len(p.Events) != 2 {
		t.Fatalf("since %s: %+v", since, p.Events)
	}

	// Organization owners, with either credential, are nobody here.
	ownerKey := e.APIKey(t, owner)
	before := digest(t, e)
	e.Do(t, "GET", platformAuditPath, nil).ExpectError(t, http.StatusUnauthorized, "unauthorized")
	e.Do(t, "GET", platformAuditPath, nil, owner.As()...).ExpectError(t, http.StatusForbidden, "forbidden")
	e.Do(t, "GET", platformAuditPath+"?limit=0", nil, apitest.Key(ownerKey)).ExpectError(t, http.StatusForbidden, "forbidden")
	expectNoWrites(t, e, before)
}
