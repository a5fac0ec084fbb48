package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/tollgate-dev/tollgate/controlplane/apitest"
)

func TestSmoke(t *testing.T) {
	e := apitest.New(t)
	e.Do(t, "GET", "/health", nil).Expect(t, http.StatusOK)
	o := e.NewOrg(t, "Acme")
	m := e.AddMember(t, o, "bob", "member")
	key := e.APIKey(t, m)
	r := e.Do(t, "GET", "/v1/me", nil, apitest.Key(key)).Expect(t, http.StatusOK).JSON(t)
	if r["activeOrganizationId"] != o.OrgID {
		t.Fatalf("me: %v", r)
	}
}
