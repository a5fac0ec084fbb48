package httpapi_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/apitest"
)

// An instant the API cannot render back in its own form (a four-digit year, Z) is
// refused as the bad input it is: recovery's before and reconciliation's admittedAt
// used to be taken, and the answer named windows of the year 10000 or 0000
// ("10000-01-01T05:00:00.000Z"), which the OpenAPI document's timestamp pattern refuses.
func TestRecoveryAndReconciliationRefuseInstantsOutOfRange(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	bob := e.AddMember(t, owner, "bob", "member")
	for _, at := range []string{"9999-12-31T23:59:59Z", "9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00Z"} {
		e.Do(t, "POST", "/v1/gateway/usage-reconciliation/reconcile", map[string]any{"items": []any{map[string]any{
			"requestId": "req-1", "memberId": bob.MemberID, "admittedAt": at, "costMicroUsd": 400}},
			"reviewReference": "INC-7", "apply": false}, owner.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
		e.Do(t, "GET", pendingPath+"?before="+url.QueryEscape(at), nil, owner.As()...).ExpectError(t, http.StatusBadRequest, "invalid_request")
	}
}
