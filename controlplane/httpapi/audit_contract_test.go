package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/apitest"
)

// notAudited are the mutating routes that record no audit event, each with why. Every
// other mutating route of Server.Routes must record at least one (docs/admin.md, "Audit
// trails": every write records an event in the same transaction as its change).
var notAudited = map[string]string{
	// A session is a credential, not a change of an organization: sign-up creates a user
	// who belongs to no organization yet, sign-in and sign-out make and end a session.
	"POST /v1/auth/sign-up":  "creates a user in no organization; no trail files it",
	"POST /v1/auth/sign-in":  "makes a session",
	"POST /v1/auth/sign-out": "ends a session",
	// The caller's own preference of which organization their session acts in.
	"PUT /v1/me/active-organization": "a session's preference, no organization's data",
	// A preview (apply false) changes nothing; an applied recovery is audited
	// (accounting_test.go).
	"POST /v1/gateway/usage-recovery/recover": "the fixture is a preview",
	// The fixture's item names no quarantined settlement: refused per item, nothing
	// charged. An applied reconciliation is audited (accounting_reconciliation_test.go).
	"POST /v1/gateway/usage-reconciliation/reconcile": "the fixture's item is refused",
}

// secretFields are the names of answer fields whose values are secrets (an API key, a
// session or invitation token): none may be copied into an audit event.
var secretFields = regexp.MustCompile(`(?i)^(key|token|secret|sessionToken|apiKey|password)$`)

// TestEveryWriteIsAudited walks every mutating route of the route table (Server.Routes,
// with writeFixtures' valid requests: a route added without a fixture fails
// TestHostileWritesChangeNothing, one that records nothing fails here unless notAudited
// says why) and checks the events its valid request records: at least one; each names
// its actor (the calling user, and the member for a route inside an organization), is
// filed under the caller's organization for such a route, and carries no secret of the
// request or the answer (password, API key, session or invitation token).
func TestEveryWriteIsAudited(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	ctx := context.Background()
	var routes []string
	for _, r := range e.Server.Routes() {
		if !strings.HasPrefix(r, "GET ") {
			routes = append(routes, r)
		}
	}
	if len(routes) < 40 {
		t.Fatalf("only %d mutating routes listed", len(routes))
	}
	for r := range notAudited {
		if !containsString(routes, r) {
			t.Errorf("notAudited names %s, which is no mutating route", r)
		}
	}
	for _, r := range routes {
		fixture := writeFixtures[r]
		if fixture == nil {
			t.Errorf("route %s has no valid request in writeFixtures", r)
			continue
		}
		method, _, _ := strings.Cut(r, " ")
		t.Run(r, func(t *testing.T) {
			o := e.NewOrg(t, "Audited")
			if _, err := store.AddPlatformAdmin(ctx, e.Store.Pool, strings.ToLower(o.Email), "test", e.Clock.Now()); err != nil {
				t.Fatal(err)
			}
			w := fixture(t, e, o)
			if w.as == nil {
				w.as = o.As()
			}
			before := auditIDSet(t, e)
			var body any
			if w.body != nil {
				body = w.body
			}
			res := e.Do(t, method, w.path, body, w.as...)
			if res.Status >= 300 {
				t.Fatalf("the valid request: %d %s", res.Status, res.Body)
			}
			events := newAuditRows(t, e, before)
			if _, ok := notAudited[r]; ok {
				return
			}
			if len(events) == 0 {
				t.Fatalf("%s changed something and recorded no audit event", r)
			}
			var secrets []string
			collectSecrets(res.Body, &secrets)
			if w.body != nil {
				raw, _ := json.Marshal(w.body)
				collectSecrets(raw, &secrets)
			}
			for _, ev := range events {
				text := fmt.Sprintf("%v %s", ptr(ev.TargetID), ev.Details)
				for _, s := range secrets {
					if len(s) >= 8 && strings.Contains(text, s) {
						t.Errorf("event %s (%s) carries a secret %q: %s", ev.ID, ev.Action, s, text)
					}
				}
				if !w.global || strings.HasPrefix(r, "POST /v1/organizations") {
					if ev.ActorUserID == nil {
						t.Errorf("event %s (%s) names no acting user", ev.ID, ev.Action)
					}
				}
				if !w.global {
					if ptr(ev.OrganizationID) != o.OrgID {
						t.Errorf("event %s (%s) filed under %q, not the caller's organization %s", ev.ID, ev.Action, ptr(ev.OrganizationID), o.OrgID)
					}
					if ev.ActorMemberID == nil && ev.ActorUserID != nil {
						t.Errorf("event %s (%s) by a member names no acting member", ev.ID, ev.Action)
					}
				}
			}
		})
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func ptr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func auditIDSet(t *testing.T, e *apitest.Env) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, id := range storedAuditIDs(t, e, "true") {
		out[id] = true
	}
	return out
}

// newAuditRows reads the events not in before.
func newAuditRows(t *testing.T, e *apitest.Env, before map[string]bool) []store.AuditRecord {
	t.Helper()
	rows, err := e.Store.Pool.Query(context.Background(), `SELECT id, occurred_at, actor_user_id, actor_member_id,
		organization_id, action, target_id, details FROM audit_events ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.AuditRecord, error) {
		var a store.AuditRecord
		err := r.Scan(&a.ID, &a.OccurredAt, &a.ActorUserID, &a.ActorMemberID, &a.OrganizationID, &a.Action, &a.TargetID, &a.Details)
		return a, err
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []store.AuditRecord
	for _, a := range all {
		if !before[a.ID] {
			out = append(out, a)
		}
	}
	return out
}

// collectSecrets adds the string values of secret-named fields anywhere in a JSON document.
func collectSecrets(raw []byte, out *[]string) {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return
	}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, c := range x {
				if s, ok := c.(string); ok && secretFields.MatchString(k) {
					*out = append(*out, s)
				}
				walk(c)
			}
		case []any:
			for _, c := range x {
				walk(c)
			}
		}
	}
	walk(v)
}

// TestAuditNamesTheAPIKey: a write made with an API key records the key's id
// (details.apiKeyId), as a platform administrator's does, so that an administrator
// investigating a leaked key can tell its writes from the member's own session's; a
// write made with a session names no key.
func TestAuditNamesTheAPIKey(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Keyed")
	var minted struct {
		Key    string
		APIKey struct{ ID string }
	}
	e.Do(t, "POST", "/v1/api-keys", map[string]any{"name": "ci"}, o.As()...).Expect(t, http.StatusCreated).Decode(t, &minted)
	e.Do(t, "POST", "/v1/teams", map[string]any{"name": "By key"}, apitest.Key(minted.Key)).Expect(t, http.StatusCreated)
	e.Do(t, "POST", "/v1/teams", map[string]any{"name": "By session"}, o.As()...).Expect(t, http.StatusCreated)
	evs := readAllAudit(t, e, orgAuditPath(o.OrgID), url.Values{"action": {"team.create"}}, o.As()...)
	if len(evs) != 2 {
		t.Fatalf("%d team.create events", len(evs))
	}
	byKey, bySession := evs[1], evs[0]
	if byKey.Details["name"] != "By key" {
		byKey, bySession = bySession, byKey
	}
	if byKey.Details["apiKeyId"] != minted.APIKey.ID || ptr(byKey.ActorMemberID) != o.MemberID {
		t.Errorf("the key's write: member %v, details %v; want member %s and apiKeyId %s", ptr(byKey.ActorMemberID), byKey.Details, o.MemberID, minted.APIKey.ID)
	}
	if _, named := bySession.Details["apiKeyId"]; named {
		t.Errorf("the session's write names a key: %v", bySession.Details)
	}
	if strings.Contains(fmt.Sprint(byKey.Details), minted.Key) {
		t.Errorf("the event carries the key itself: %v", byKey.Details)
	}
}

// TestMemberRemovalIsAuditedWithWhatItEnded: a removed member drops out of every list, so
// the member.remove event is all an auditor has: it names who was removed (user, name,
// email, role) and what the removal ended with them (their API keys, their teams).
func TestMemberRemovalIsAuditedWithWhatItEnded(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Removing")
	bob := e.AddMember(t, o, "bob", "admin")
	var minted struct{ APIKey struct{ ID string } }
	e.Do(t, "POST", "/v1/api-keys", map[string]any{"name": "ci"}, bob.As()...).Expect(t, http.StatusCreated).Decode(t, &minted)
	team := newTeam(t, e, o, "Platform", bob)
	e.Do(t, "DELETE", "/v1/members/"+bob.MemberID, nil, o.As()...).Expect(t, http.StatusNoContent)
	evs := readAllAudit(t, e, orgAuditPath(o.OrgID), url.Values{"action": {"member.remove"}}, o.As()...)
	if len(evs) != 1 || ptr(evs[0].TargetID) != bob.MemberID {
		t.Fatalf("member.remove events: %+v", evs)
	}
	d := evs[0].Details
	want := map[string]any{"userId": bob.ID, "email": bob.Email, "role": "admin",
		"revokedApiKeys": []any{minted.APIKey.ID}, "teams": []any{team}}
	for k, v := range want {
		if fmt.Sprint(d[k]) != fmt.Sprint(v) {
			t.Errorf("details.%s = %v, want %v (details %v)", k, d[k], v, d)
		}
	}
}
