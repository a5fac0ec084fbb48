package httpapi_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/apitest"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

func TestUsagePolicyCreateAndList(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	p := createPolicy(t, e, o, map[string]any{"name": "  Team budget  ", "limits": []map[string]any{
		{"timeframe": "month", "costUsd": "100"}, {"timeframe": "day", "costUsd": "0.000005"}, {"timeframe": "week", "costUsd": "0"},
	}})
	if p.Name != "Team budget" || p.Revision != 1 || !p.HardLimit || !p.AllowRequestReset || p.ArchivedAt != nil || len(p.Assignments) != 0 {
		t.Fatalf("created %+v", p)
	}
	// Limits come back day, week, month with exact micro-USD.
	want := []struct {
		tf string
		v  int64
	}{{"day", 5}, {"week", 0}, {"month", 100_000_000}}
	for i, w := range want {
		if p.Limits[i].Timeframe != w.tf || p.Limits[i].CostLimitMicroUsd != w.v {
			t.Fatalf("limits %+v", p.Limits)
		}
	}
	// A lone limit without a timeframe limits the day.
	q := createPolicy(t, e, o, map[string]any{"name": "Soft", "limits": []map[string]any{{"costUsd": "4503599627.370495"}},
		"hardLimit": false, "allowRequestReset": false})
	if q.Limits[0].Timeframe != "day" || q.Limits[0].CostLimitMicroUsd != 4503599627370495 || q.HardLimit || q.AllowRequestReset {
		t.Fatalf("created %+v", q)
	}
	var list struct{ Policies []policy }
	r := e.Do(t, "GET", policiesPath, nil, o.As()...).Expect(t, http.StatusOK)
	if r.Header.Get("Cache-Control") != "private, no-store" {
		t.Fatalf("cache-control %q", r.Header.Get("Cache-Control"))
	}
	r.Decode(t, &list)
	if len(list.Policies) != 2 || list.Policies[0].ID != p.ID || list.Policies[1].ID != q.ID {
		t.Fatalf("list %+v", list)
	}
	if n := usageCount(t, e, `SELECT count(*) FROM audit_events WHERE action = 'usage_policy.create'`); n != 2 {
		t.Fatalf("%d create audit events", n)
	}
}

func TestUsagePolicyBodyValidation(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	p := dayPolicy(t, e, o, "Daily", "1", nil)
	lim := func(items ...map[string]any) []map[string]any { return items }
	cases := []struct {
		name string
		body any
		want string // part of the message
	}{
		{"not JSON", "{", "not valid JSON"},
		{"unknown field", map[string]any{"name": "x", "limits": lim(map[string]any{"costUsd": "1"}), "revision": 1, "extra": true}, "unknown field"},
		{"missing revision", map[string]any{"name": "x", "limits": lim(map[string]any{"costUsd": "1"})}, "revision: is required"},
		{"revision zero", map[string]any{"name": "x", "limits": lim(map[string]any{"costUsd": "1"}), "revision": 0}, "revision: must be an integer"},
		{"revision fraction", map[string]any{"name": "x", "limits": lim(map[string]any{"costUsd": "1"}), "revision": 1.5}, "revision: must be an integer"},
		{"revision too big", map[string]any{"name": "x", "limits": lim(map[string]any{"costUsd": "1"}), "revision": 9007199254740992}, "revision: must be an integer"},
		{"revision string", map[string]any{"name": "x", "limits": lim(map[string]any{"costUsd": "1"}), "revision": "1"}, "revision"},
		{"blank name", map[string]any{"name": "   ", "limits": lim(map[string]any{"costUsd": "1"}), "revision": 1}, "name: must be 1 to 120"},
		{"long name", map[string]any{"name": strings.Repeat("n", 121), "limits": lim(map[string]any{"costUsd": "1"}), "revision": 1}, "name: must be 1 to 120"},
		// Members see the winning policy's name (policyName): it may not hide a right-to-left
		// override or a control character, as the names of teams and keys may not.
		{"bidirectional override in the name", map[string]any{"name": "\u202eylliaD", "limits": lim(map[string]any{"costUsd": "1"}), "revision": 1}, "name: must not contain control characters"},
		{"control character in the name", map[string]any{"name": "a\x1b[31mb", "limits": lim(map[string]any{"costUsd": "1"}), "revision": 1}, "name: must not contain control characters"},
		{"no limits", map[string]any{"name": "x", "limits": []any{}, "revision": 1}, "limits: must have 1 to 3"},
		{"four limits", map[string]any{"name": "x", "revision": 1, "limits": lim(map[string]any{"timeframe": "day", "costUsd": "1"},
			map[string]any{"timeframe": "week", "costUsd": "1"}, map[string]any{"timeframe": "month", "costUsd": "1"}, map[string]any{"timeframe": "day", "costUsd": "1"})}, "limits: must have 1 to 3"},
		{"duplicate timeframe", map[string]any{"name": "x", "revision": 1, "limits": lim(map[string]any{"timeframe": "day", "costUsd": "1"},
			map[string]any{"timeframe": "day", "costUsd": "2"})}, "limits.1.timeframe: repeats"},
		{"timeframe needed with two limits", map[string]any{"name": "x", "revision": 1, "limits": lim(map[string]any{"costUsd": "1"},
			map[string]any{"timeframe": "week", "costUsd": "2"})}, "limits.0.timeframe: is required"},
		{"unknown timeframe", map[string]any{"name": "x", "revision": 1, "limits": lim(map[string]any{"timeframe": "year", "costUsd": "1"})}, "limits.0.timeframe"},
		// The OpenAPI document's timeframe is an enum without null: null is not "left out".
		{"null timeframe", map[string]any{"name": "x", "revision": 1, "limits": lim(map[string]any{"timeframe": nil, "costUsd": "1"})}, "limits.0.timeframe: must be day, week or month"},
		{"cost with exponent", map[string]any{"name": "x", "revision": 1, "limits": lim(map[string]any{"costUsd": "1e3"})}, "limits.0.costUsd"},
		{"cost with 7 decimals", map[string]any{"name": "x", "revision": 1, "limits": lim(map[string]any{"costUsd": "0.0000001"})}, "limits.0.costUsd"},
		{"negative cost", map[string]any{"name": "x", "revision": 1, "limits": lim(map[string]any{"costUsd": "-1"})}, "limits.0.costUsd"},
		{"cost above the bound", map[string]any{"name": "x", "revision": 1, "limits": lim(map[string]any{"costUsd": "4503599627.370496"})}, "limits.0.costUsd"},
		{"cost as number", map[string]any{"name": "x", "revision": 1, "limits": lim(map[string]any{"costUsd": 1})}, "costUsd"},
		{"missing cost", map[string]any{"name": "x", "revision": 1, "limits": lim(map[string]any{"timeframe": "day"})}, "limits.0.costUsd: is required"},
		{"null hardLimit", map[string]any{"name": "x", "revision": 1, "limits": lim(map[string]any{"costUsd": "1"}), "hardLimit": nil}, "hardLimit"},
		{"reserve without a reservation", inFlightBody(map[string]any{"reserve": true}), "inFlight.reservationCostUsd: is required"},
		{"reserve with a zero reservation", inFlightBody(map[string]any{"reserve": true, "reservationCostUsd": "0"}), "inFlight.reservationCostUsd: is required"},
		{"reservation with an exponent", inFlightBody(map[string]any{"reserve": true, "reservationCostUsd": "1e3"}), "inFlight.reservationCostUsd: must be"},
		{"reservation as a number", inFlightBody(map[string]any{"reserve": true, "reservationCostUsd": 1}), "reservationCostUsd"},
		{"null reserve", inFlightBody(map[string]any{"reserve": nil}), "inFlight.reserve: must be a boolean"},
		{"null reservation", inFlightBody(map[string]any{"reservationCostUsd": nil}), "inFlight.reservationCostUsd: must be"},
		{"zero maxRequests", inFlightBody(map[string]any{"maxRequests": 0}), "inFlight.maxRequests: must be an integer from 1 to 100000"},
		{"too many maxRequests", inFlightBody(map[string]any{"maxRequests": 100001}), "inFlight.maxRequests: must be an integer from 1 to 100000"},
		{"fractional maxRequests", inFlightBody(map[string]any{"maxRequests": 1.5}), "maxRequests"},
		{"unknown guard field", inFlightBody(map[string]any{"reserveAll": true}), "unknown field"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := e.Do(t, "PATCH", policiesPath+"/"+p.ID, c.body, o.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
			if msg, _ := m["message"].(string); !strings.Contains(msg, c.want) {
				t.Fatalf("message %q, want it to contain %q", msg, c.want)
			}
			if _, has := m["details"]; has {
				t.Fatal("gateway 400s are {error, message}, not details")
			}
		})
	}
	// Nothing changed: revision 1 is still current, and a real edit moves it to 2.
	var after policy
	e.Do(t, "PATCH", policiesPath+"/"+p.ID, map[string]any{"name": "Daily 2", "revision": 1, "limits": lim(map[string]any{"costUsd": "1"})},
		o.As()...).Expect(t, http.StatusOK).Decode(t, &after)
	if after.Revision != 2 {
		t.Fatalf("revision %d after one valid edit", after.Revision)
	}
	// Create shares the checks: a null timeframe or reservation is refused there too.
	for _, body := range []map[string]any{
		{"name": "x", "limits": lim(map[string]any{"timeframe": nil, "costUsd": "1"})},
		{"name": "x", "limits": lim(map[string]any{"costUsd": "1"}), "inFlight": map[string]any{"reservationCostUsd": nil}},
	} {
		e.Do(t, "POST", policiesPath, body, o.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
	}
	if n := usageCount(t, e, `SELECT count(*) FROM usage_policies WHERE organization_id = $1`, o.OrgID); n != 1 {
		t.Fatalf("%d policies, want the one created first", n)
	}
	// Create refuses revision (it is not a create field).
	e.Do(t, "POST", policiesPath, map[string]any{"name": "x", "revision": 1, "limits": lim(map[string]any{"costUsd": "1"})}, o.As()...).
		ExpectError(t, http.StatusBadRequest, "invalid_request")
}

// inFlightBody is a valid policy edit (revision 1) with the given in-flight guard.
func inFlightBody(guard map[string]any) map[string]any {
	return map[string]any{"name": "x", "revision": 1, "limits": []map[string]any{{"costUsd": "1"}}, "inFlight": guard}
}

// TestUsagePolicyInFlightGuard: the guard is stored, read back (with its defaults on
// every policy), audited, and a full replacement without it removes it.
func TestUsagePolicyInFlightGuard(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	type guard struct {
		Reserve             bool   `json:"reserve"`
		ReservationMicroUsd int64  `json:"reservationMicroUsd"`
		MaxRequests         *int32 `json:"maxRequests"`
	}
	var p struct {
		ID       string `json:"id"`
		Revision int64  `json:"revision"`
		InFlight guard  `json:"inFlight"`
	}
	e.Do(t, "POST", policiesPath, map[string]any{"name": "Guarded", "limits": []map[string]any{{"costUsd": "5"}},
		"inFlight": map[string]any{"reserve": true, "reservationCostUsd": "0.25", "maxRequests": 8}}, o.As()...).
		Expect(t, http.StatusOK).Decode(t, &p)
	if !p.InFlight.Reserve || p.InFlight.ReservationMicroUsd != 250_000 || p.InFlight.MaxRequests == nil || *p.InFlight.MaxRequests != 8 {
		t.Fatalf("created %+v", p)
	}
	var list struct {
		Policies []struct {
			ID       string `json:"id"`
			InFlight guard  `json:"inFlight"`
		} `json:"policies"`
	}
	e.Do(t, "GET", policiesPath, nil, o.As()...).Expect(t, http.StatusOK).Decode(t, &list)
	if g := list.Policies[0].InFlight; len(list.Policies) != 1 || !g.Reserve || g.ReservationMicroUsd != 250_000 || g.MaxRequests == nil || *g.MaxRequests != 8 {
		t.Fatalf("listed %+v", list)
	}
	if n := usageCount(t, e, `SELECT count(*) FROM audit_events WHERE action = 'usage_policy.create'
			AND details->'inFlight'->>'reservationMicroUsd' = '250000'`); n != 1 {
		t.Fatalf("%d create audit events naming the guard", n)
	}
	// A cap alone (no reservations) is a guard too.
	e.Do(t, "PATCH", policiesPath+"/"+p.ID, map[string]any{"name": "Guarded", "revision": 1, "limits": []map[string]any{{"costUsd": "5"}},
		"inFlight": map[string]any{"maxRequests": 2}}, o.As()...).Expect(t, http.StatusOK).Decode(t, &p)
	if p.Revision != 2 || p.InFlight.Reserve || p.InFlight.ReservationMicroUsd != 0 || p.InFlight.MaxRequests == nil || *p.InFlight.MaxRequests != 2 {
		t.Fatalf("after a cap-only edit %+v", p)
	}
	// A full replacement without inFlight has none.
	e.Do(t, "PATCH", policiesPath+"/"+p.ID, map[string]any{"name": "Guarded", "revision": 2, "limits": []map[string]any{{"costUsd": "5"}}},
		o.As()...).Expect(t, http.StatusOK).Decode(t, &p)
	if p.Revision != 3 || p.InFlight != (guard{}) {
		t.Fatalf("after an edit without the guard %+v", p)
	}
}

// TestUsagePatchPolicy covers the specification's update operation: full replacement,
// revision checks, archived policies, revision overflow, unknown and malformed ids.
func TestUsagePatchPolicy(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	admin := e.AddMember(t, o, "ada", "admin")
	p := createPolicy(t, e, o, map[string]any{"name": "Budget", "hardLimit": false, "allowRequestReset": false,
		"limits": []map[string]any{{"timeframe": "day", "costUsd": "1"}, {"timeframe": "week", "costUsd": "5"}}})
	path := policiesPath + "/" + p.ID

	var got policy
	e.Do(t, "PATCH", path, map[string]any{"name": " Renamed ", "revision": 1, "limits": []map[string]any{{"timeframe": "month", "costUsd": "12.5"}}},
		admin.As()...).Expect(t, http.StatusOK).Decode(t, &got)
	// Full replacement: the day and week limits are gone, the flags take their defaults.
	if got.Name != "Renamed" || got.Revision != 2 || len(got.Limits) != 1 || got.Limits[0].Timeframe != "month" ||
		got.Limits[0].CostLimitMicroUsd != 12_500_000 || !got.HardLimit || !got.AllowRequestReset {
		t.Fatalf("patched %+v", got)
	}
	// A stale revision is a conflict.
	e.Do(t, "PATCH", path, map[string]any{"name": "x", "revision": 1, "limits": []map[string]any{{"costUsd": "1"}}}, o.As()...).
		ExpectError(t, http.StatusConflict, "policy_revision_conflict")
	e.Do(t, "PATCH", path, map[string]any{"name": "x", "revision": 3, "limits": []map[string]any{{"costUsd": "1"}}}, o.As()...).
		ExpectError(t, http.StatusConflict, "policy_revision_conflict")
	// Unknown and malformed ids.
	e.Do(t, "PATCH", policiesPath+"/ulp_nope", map[string]any{"name": "x", "revision": 1, "limits": []map[string]any{{"costUsd": "1"}}}, o.As()...).
		ExpectError(t, http.StatusNotFound, "policy_not_found")
	e.Do(t, "PATCH", policiesPath+"/"+strings.Repeat("a", 65), map[string]any{"name": "x", "revision": 1, "limits": []map[string]any{{"costUsd": "1"}}}, o.As()...).
		ExpectError(t, http.StatusBadRequest, "invalid_request")
	// Another organization's policy is not found.
	other := e.NewOrg(t, "Other")
	e.Do(t, "PATCH", path, map[string]any{"name": "x", "revision": 2, "limits": []map[string]any{{"costUsd": "1"}}}, other.As()...).
		ExpectError(t, http.StatusNotFound, "policy_not_found")

	// Archive: revision-checked, idempotent.
	e.Do(t, "POST", path+"/archive", map[string]any{"revision": 1}, o.As()...).ExpectError(t, http.StatusConflict, "policy_revision_conflict")
	var archived policy
	e.Do(t, "POST", path+"/archive", map[string]any{"revision": 2}, o.As()...).Expect(t, http.StatusOK).Decode(t, &archived)
	if archived.ArchivedAt == nil || *archived.ArchivedAt != "2026-09-14T12:00:00.000Z" || archived.Revision != 3 {
		t.Fatalf("archived %+v", archived)
	}
	var again policy
	e.Do(t, "POST", path+"/archive", map[string]any{"revision": 2}, o.As()...).Expect(t, http.StatusOK).Decode(t, &again)
	if again.Revision != 3 {
		t.Fatalf("idempotent archive moved the revision: %+v", again)
	}
	// An archived policy cannot be edited, even at its current revision.
	m := e.Do(t, "PATCH", path, map[string]any{"name": "x", "revision": 3, "limits": []map[string]any{{"costUsd": "1"}}}, o.As()...).
		ExpectError(t, http.StatusConflict, "policy_revision_conflict")
	if !strings.Contains(m["message"].(string), "archived") {
		t.Fatalf("message %v", m["message"])
	}
	// Restore: revision-checked, idempotent.
	e.Do(t, "POST", path+"/restore", map[string]any{"revision": 2}, o.As()...).ExpectError(t, http.StatusConflict, "policy_revision_conflict")
	var restored policy
	e.Do(t, "POST", path+"/restore", map[string]any{"revision": 3}, o.As()...).Expect(t, http.StatusOK).Decode(t, &restored)
	if restored.ArchivedAt != nil || restored.Revision != 4 {
		t.Fatalf("restored %+v", restored)
	}
	e.Do(t, "POST", path+"/restore", map[string]any{"revision": 3}, o.As()...).Expect(t, http.StatusOK)
	e.Do(t, "POST", path+"/restore", map[string]any{}, o.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")

	// Revision overflow: a policy at the bound cannot change again.
	if err := store.SetUsagePolicyRevision(context.Background(), e.Store.Pool, p.ID, 9007199254740991); err != nil {
		t.Fatal(err)
	}
	e.Do(t, "PATCH", path, map[string]any{"name": "x", "revision": 9007199254740991, "limits": []map[string]any{{"costUsd": "1"}}}, o.As()...).
		ExpectError(t, http.StatusConflict, "policy_revision_overflow")
	e.Do(t, "POST", path+"/archive", map[string]any{"revision": 9007199254740991}, o.As()...).
		ExpectError(t, http.StatusConflict, "policy_revision_overflow")
	var final policy
	e.Do(t, "GET", policiesPath, nil, o.As()...).Expect(t, http.StatusOK)
	if err := e.Store.Pool.QueryRow(context.Background(), `SELECT revision FROM usage_policies WHERE id = $1`, p.ID).Scan(&final.Revision); err != nil {
		t.Fatal(err)
	}
	if final.Revision != 9007199254740991 {
		t.Fatalf("revision %d", final.Revision)
	}
	for _, action := range []string{"usage_policy.update", "usage_policy.archive", "usage_policy.restore"} {
		if n := usageCount(t, e, `SELECT count(*) FROM audit_events WHERE action = $1 AND target_id = $2`, action, p.ID); n != 1 {
			t.Fatalf("%d %s audit events", n, action)
		}
	}
}

// TestUsageConcurrentPatches: two edits of the same revision, one wins.
func TestUsageConcurrentPatches(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	p := dayPolicy(t, e, o, "Daily", "1", nil)
	codes := make(chan int, 8)
	for i := 0; i < 8; i++ {
		go func() {
			r := e.Do(t, "PATCH", policiesPath+"/"+p.ID, map[string]any{"name": "x", "revision": 1, "limits": []map[string]any{{"costUsd": "2"}}}, o.As()...)
			codes <- r.Status
		}()
	}
	ok := 0
	for i := 0; i < 8; i++ {
		switch c := <-codes; c {
		case http.StatusOK:
			ok++
		case http.StatusConflict:
		default:
			t.Fatalf("status %d", c)
		}
	}
	if ok != 1 {
		t.Fatalf("%d concurrent edits of revision 1 succeeded", ok)
	}
}

// TestUsageRoleCheckBeforeBody: members get 403 on manager routes, whatever their body;
// the check runs before validation, so a bad body is still 403, not 400.
func TestUsageRoleCheckBeforeBody(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	bob := e.AddMember(t, o, "bob", "member")
	p := dayPolicy(t, e, o, "Daily", "1", nil)
	routes := []struct{ method, path string }{
		{"GET", policiesPath},
		{"POST", policiesPath},
		{"PATCH", policiesPath + "/" + p.ID},
		{"PATCH", policiesPath + "/" + strings.Repeat("x", 70)},
		{"POST", policiesPath + "/" + p.ID + "/archive"},
		{"POST", policiesPath + "/" + p.ID + "/restore"},
		{"GET", policiesPath + "/" + p.ID + "/assignments"},
		{"POST", policiesPath + "/" + p.ID + "/assignments"},
		{"DELETE", policiesPath + "/" + p.ID + "/assignments/ula_x"},
		{"GET", "/v1/gateway/usage-limits/members/" + o.MemberID},
		{"GET", resetsPath},
		{"POST", resetsPath + "/urr_x/approve"},
		{"POST", resetsPath + "/urr_x/deny"},
		{"PUT", "/v1/gateway/model-prices"},
		{"PUT", "/v1/gateway/model-prices/fallback"},
		{"DELETE", "/v1/gateway/model-prices/fallback"},
	}
	for _, rt := range routes {
		var body any
		if rt.method != "GET" && rt.method != "DELETE" {
			body = `{"name": 42, "bogus": [`
		}
		m := e.Do(t, rt.method, rt.path, body, bob.As()...).ExpectError(t, http.StatusForbidden, "forbidden")
		if m["message"] == "" || m["message"] == nil {
			t.Fatalf("%s %s: 403 without message", rt.method, rt.path)
		}
	}
	// 401 carries a message too on these routes.
	m := e.Do(t, "PATCH", policiesPath+"/"+p.ID, `{`).ExpectError(t, http.StatusUnauthorized, "unauthorized")
	if m["message"] == nil {
		t.Fatal("401 without message")
	}
	// Nothing was written by the refused requests.
	if n := usageCount(t, e, `SELECT count(*) FROM audit_events WHERE action LIKE 'usage%'`); n != 1 {
		t.Fatalf("%d usage audit events, want only the create", n)
	}
}

// TestUsagePatchWithoutChangeKeepsRevision: a PATCH whose body describes the policy as it
// already is (an editor saved without editing, a tool applied the same state again) is no
// change, so the revision stays (ACCOUNTING.md: "+1 per change"). It used to move the
// revision, which expired every pending extension request asked against the policy
// (policy_revision_changed), told the enforcers and audited an update from and to the same
// policy.
func TestUsagePatchWithoutChangeKeepsRevision(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	alice := e.AddMember(t, o, "alice", "member")
	p := createPolicy(t, e, o, map[string]any{"name": "Budget", "limits": []map[string]any{
		{"timeframe": "week", "costUsd": "5"}, {"timeframe": "day", "costUsd": "1"}}, "inFlight": map[string]any{"maxRequests": 3}})
	assign(t, e, o, p.ID, map[string]any{"memberId": alice.MemberID})
	setUsed(t, e, alice, window.Day, 1_000_000)
	req := decodeReset(t, submit(t, e, alice, bucketID(e, alice, window.Day), "more please").Expect(t, http.StatusOK))
	path := policiesPath + "/" + p.ID

	// The same terms, written differently: limits in another order, a spelled-out
	// amount, the flags left to their defaults (true, as they are).
	var got policy
	e.Do(t, "PATCH", path, map[string]any{"name": " Budget ", "revision": 1, "limits": []map[string]any{
		{"timeframe": "day", "costUsd": "1.000000"}, {"timeframe": "week", "costUsd": "5"}}, "inFlight": map[string]any{"maxRequests": 3}},
		o.As()...).Expect(t, http.StatusOK).Decode(t, &got)
	if got.Revision != 1 {
		t.Fatalf("a PATCH that changes nothing moved the revision to %d", got.Revision)
	}
	var mine resetPage
	e.Do(t, "GET", resetsPath+"/me", nil, alice.As()...).Expect(t, http.StatusOK).Decode(t, &mine)
	if len(mine.Requests) != 1 || mine.Requests[0].ID != req.ID || mine.Requests[0].Status != "pending" {
		t.Fatalf("the pending request after a PATCH that changed nothing: %+v", mine.Requests)
	}
	if n := usageCount(t, e, `SELECT count(*) FROM audit_events WHERE action = 'usage_policy.update'`); n != 0 {
		t.Fatalf("%d update audit events for no change", n)
	}
	// At a stale revision it is still a conflict: the caller did not see the policy.
	e.Do(t, "PATCH", path, map[string]any{"name": "Budget", "revision": 2, "limits": []map[string]any{
		{"timeframe": "day", "costUsd": "1"}, {"timeframe": "week", "costUsd": "5"}}, "inFlight": map[string]any{"maxRequests": 3}},
		o.As()...).ExpectError(t, http.StatusConflict, "policy_revision_conflict")

	// Any real change moves it, and expires the request: here only the guard changes.
	e.Do(t, "PATCH", path, map[string]any{"name": "Budget", "revision": 1, "limits": []map[string]any{
		{"timeframe": "day", "costUsd": "1"}, {"timeframe": "week", "costUsd": "5"}}}, o.As()...).Expect(t, http.StatusOK).Decode(t, &got)
	if got.Revision != 2 {
		t.Fatalf("dropping the guard answered revision %d, want 2", got.Revision)
	}
	e.Do(t, "GET", resetsPath+"/me?view=history", nil, alice.As()...).Expect(t, http.StatusOK).Decode(t, &mine)
	if len(mine.Requests) != 1 || mine.Requests[0].Status != "expired" || *mine.Requests[0].ExpiredReason != "policy_revision_changed" {
		t.Fatalf("after a real edit: %+v", mine.Requests[0])
	}
}
