package httpapi_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/apitest"
)

// Request bodies are read as the contract names them: a field whose name differs only in
// case is unknown (encoding/json alone would fill the field), a repeated key, null as the
// whole body and a non-JSON Content-Type are refused, and type errors name the field with
// its indexes. A refused request changes nothing.
func TestRequestBodiesAreReadStrictly(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	admin := e.AddMember(t, o, "cat", "admin")
	bob := e.AddMember(t, o, "bob", "member")
	bobPath := "/v1/members/" + bob.MemberID
	mkt := newMarketplace(t, e, o, "Engineering")

	// detail returns the only detail of an invalid_request body as "path: message".
	detail := func(t *testing.T, r *apitest.Resp) string {
		t.Helper()
		details, _ := r.ExpectError(t, http.StatusBadRequest, "invalid_request")["details"].([]any)
		if len(details) != 1 {
			t.Fatalf("details %v", details)
		}
		d := details[0].(map[string]any)
		return fmt.Sprintf("%v: %v", d["path"], d["message"])
	}
	for _, tc := range []struct {
		name   string
		method string
		path   string
		body   any
		opts   []apitest.Opt
		want   string
	}{
		{"role in upper case", "PATCH", bobPath, `{"ROLE":"admin"}`, nil, "[ROLE]: unknown field"},
		{"role in title case", "PATCH", bobPath, `{"Role":"admin"}`, nil, "[Role]: unknown field"},
		{"role twice", "PATCH", bobPath, `{"role":"bogus","role":"admin"}`, nil, "[role]: duplicate field"},
		{"null", "PATCH", bobPath, `null`, nil, "<nil>: the body must be a JSON object"},
		{"an array", "PATCH", bobPath, `[]`, nil, "<nil>: the body must be a JSON object"},
		{"as text", "PATCH", bobPath, `{"role":"admin"}`, []apitest.Opt{apitest.Header("Content-Type", "text/plain")},
			"<nil>: Content-Type must be application/json"},
		{"as a form", "PATCH", bobPath, `{"role":"admin"}`, []apitest.Opt{apitest.Header("Content-Type", "application/x-www-form-urlencoded")},
			"<nil>: Content-Type must be application/json"},
		{"pluginId in upper case", "POST", "/v1/marketplaces/" + mkt + "/plugins", `{"PLUGINID":"plg_01h455vb4pex5vsknk084sn02q"}`, nil,
			"[PLUGINID]: unknown field"},
		{"a grant's role as a number", "PUT", "/v1/marketplaces/" + mkt + "/access",
			`{"grants":[{"memberId":"` + bob.MemberID + `","role":"viewer"},{"memberId":"` + admin.MemberID + `","role":5}]}`, nil,
			"[grants 1 role]: must be a string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := detail(t, e.Do(t, tc.method, tc.path, tc.body, append(admin.As(), tc.opts...)...))
			if got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
	var list struct {
		Members []struct{ ID, Role string }
	}
	e.Do(t, "GET", "/v1/members", nil, bob.As()...).Expect(t, http.StatusOK).Decode(t, &list)
	for _, m := range list.Members {
		if m.ID == bob.MemberID && m.Role != "member" {
			t.Fatalf("bob became %q", m.Role)
		}
	}
	var item struct{ Item struct{ Access []any } }
	e.Do(t, "GET", "/v1/marketplaces/"+mkt, nil, o.As()...).Expect(t, http.StatusOK).Decode(t, &item)
	if len(item.Item.Access) != 0 {
		t.Fatalf("access changed: %v", item.Item.Access)
	}

	// The same body, named as the contract names it, is taken.
	e.Do(t, "PATCH", bobPath, `{"role":"admin"}`, admin.As()...).Expect(t, http.StatusOK)
	e.Do(t, "PATCH", bobPath, `{"role":"member"}`, append(admin.As(), apitest.Header("Content-Type", "application/json; charset=utf-8"))...).
		Expect(t, http.StatusOK)
}

// Routes whose 400 is {error, message} join the full path into the message.
func TestRequestBodyTypeErrorsNameTheFieldInMessages(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	pol := dayPolicy(t, e, o, "Daily", "5", nil)
	for _, tc := range []struct {
		name   string
		method string
		path   string
		body   string
		want   string
	}{
		{"a policy limit's costUsd as a number", "PATCH", policiesPath + "/" + pol.ID,
			`{"name":"x","revision":1,"limits":[{"timeframe":"day","costUsd":"1"},{"timeframe":"week","costUsd":2}]}`,
			"limits.1.costUsd: must be a string"},
		{"a policy updated with Go names", "PATCH", policiesPath + "/" + pol.ID,
			`{"Name":"x","Limits":[{"timeframe":"day","costUsd":"1"}],"Revision":1}`, "Name: unknown field"},
		{"a fractional price", "PUT", "/v1/gateway/model-prices",
			`{"prices":[{"model":"m","inputMicroUsdPerMillion":1.5,"outputMicroUsdPerMillion":1,"cachedInputMicroUsdPerMillion":1}]}`,
			"prices.0.inputMicroUsdPerMillion: must be an integer"},
		{"a null policy", "POST", policiesPath, `null`, "the body must be a JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := e.Do(t, tc.method, tc.path, tc.body, o.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
			if m["message"] != tc.want {
				t.Fatalf("message %q, want %q", m["message"], tc.want)
			}
		})
	}
	var list struct{ Policies []policy }
	e.Do(t, "GET", policiesPath, nil, o.As()...).Expect(t, http.StatusOK).Decode(t, &list)
	if len(list.Policies) != 1 || list.Policies[0].Name != "Daily" || list.Policies[0].Revision != 1 {
		t.Fatalf("policies changed: %+v", list.Policies)
	}
}
