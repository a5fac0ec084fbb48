package httpapi_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/apitest"
)

// TestNullIsNotLeftOut: an optional field whose OpenAPI type has no null is refused when
// sent as null (400 invalid_request naming it, nothing written), not taken as left out:
// the server must not accept a request the document calls invalid. (The policy bodies'
// nulls are in TestUsagePolicyBodyValidation.)
func TestNullIsNotLeftOut(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	mkt := newMarketplace(t, e, owner, "Eng")
	cases := []struct {
		name, method, path, body, field string
		table, where                    string // nothing new may be here
	}{
		{"organization slug", "POST", "/v1/organizations", `{"name":"Beta","slug":null}`, "slug",
			"organizations", "name = 'Beta'"},
		{"API key expiresInDays", "POST", "/v1/api-keys", `{"name":"ci","expiresInDays":null}`, "expiresInDays",
			"api_keys", "name = 'ci'"},
		{"grant organization", "PUT", "/v1/marketplaces/" + mkt + "/access",
			`{"grants":[{"memberId":"` + owner.MemberID + `","role":"viewer","organization":null}]}`, "organization",
			"marketplace_grants", "marketplace_id = '" + mkt + "'"},
		// Reviewed accounting operations: a null apply was read as a preview.
		{"capture apply", "POST", "/v1/gateway/usage-capture/suspend",
			`{"members":[{"memberId":"` + owner.MemberID + `","trackingVersion":0}],"reviewReference":"r","apply":null}`, "apply",
			"audit_events", "action LIKE 'usage.capture%'"},
		{"recovery apply", "POST", "/v1/gateway/usage-recovery/recover",
			`{"requestIds":["req-1"],"reviewReference":"r","apply":null}`, "apply",
			"audit_events", "action LIKE 'usage.recover%'"},
		{"reconciliation apply", "POST", "/v1/gateway/usage-reconciliation/reconcile",
			`{"items":[{"requestId":"req-1","memberId":"` + owner.MemberID + `","admittedAt":"2026-09-14T11:00:00Z","costMicroUsd":1}],"reviewReference":"r","apply":null}`, "apply",
			"audit_events", "action LIKE 'usage.reconcil%'"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := e.Do(t, c.method, c.path, c.body, owner.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
			// {error, details} names the field in a path, {error, message} in the message.
			details, _ := json.Marshal(m["details"])
			msg, _ := m["message"].(string)
			if !strings.Contains(string(details), `"`+c.field+`"`) && !strings.HasPrefix(msg, c.field+":") {
				t.Fatalf("%v does not name %s", m, c.field)
			}
			if n := count(t, e, c.table, c.where); n != 0 {
				t.Fatalf("%d rows in %s", n, c.table)
			}
		})
	}
}
