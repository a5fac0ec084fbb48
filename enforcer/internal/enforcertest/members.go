package enforcertest

import (
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/codes"

	"github.com/tollgate-dev/tollgate/enforcer/internal/fakecp"
	"github.com/tollgate-dev/tollgate/pkg/credential"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// USD is one US dollar in micro-USD.
const USD = 1_000_000

// Member is one member of its own organization, with one API key.
type Member struct {
	Org, ID, Key string
}

// NewMember adds a member with the given limits (none: unlimited) and an API key to the
// fake control plane.
func (e *Env) NewMember(limits ...fakecp.Limit) Member {
	m := Member{Org: typeid.New(typeid.Org), ID: typeid.New(typeid.Member)}
	m.Key, _ = credential.New(credential.APIKeyPrefix)
	e.CP.AddMember(m.Org, m.ID, limits...)
	e.CP.AddKey(m.Key, m.Org, m.ID, typeid.New(typeid.APIKey))
	return m
}

// DayLimit is a day limit of base micro-USD (policy ulp_day, revision 3, requests for a
// reset allowed).
func DayLimit(base int64, hard bool) fakecp.Limit {
	return fakecp.Limit{Timeframe: window.Day, PolicyID: "ulp_day", BaseMicroUSD: base, Hard: hard, AllowRequestReset: true, Revision: 3}
}

// OK returns the OkHttpResponse of an admitted check, failing the test on anything else.
func OK(t testing.TB, resp *authv3.CheckResponse) *authv3.OkHttpResponse {
	t.Helper()
	if resp.GetStatus().GetCode() != int32(codes.OK) || resp.GetOkResponse() == nil {
		t.Fatalf("want OK, got status %v denied %v", resp.GetStatus(), resp.GetDeniedResponse())
	}
	return resp.GetOkResponse()
}

// Denied returns the DeniedHttpResponse of a check refused with the HTTP status,
// failing the test on anything else.
func Denied(t testing.TB, resp *authv3.CheckResponse, status int) *authv3.DeniedHttpResponse {
	t.Helper()
	d := resp.GetDeniedResponse()
	if resp.GetStatus().GetCode() == int32(codes.OK) || d == nil {
		t.Fatalf("want denial %d, got %v", status, resp)
	}
	if int(d.GetStatus().GetCode()) != status {
		t.Fatalf("want HTTP %d, got %d (%s)", status, d.GetStatus().GetCode(), d.GetBody())
	}
	return d
}

// DeniedHeaders are the headers of a refusal, by name as sent.
func DeniedHeaders(d *authv3.DeniedHttpResponse) map[string]string {
	m := map[string]string{}
	for _, h := range d.GetHeaders() {
		m[h.GetHeader().GetKey()] = h.GetHeader().GetValue()
	}
	return m
}

// Admit checks with the key as x-api-key, fails the test unless it is admitted, and
// returns the request id ("" for a fail-open admission without one) and the usage state.
func (e *Env) Admit(t testing.TB, key string) (requestID, usageState string) {
	t.Helper()
	ok := OK(t, e.Check(t, map[string]string{"x-api-key": key}))
	usageState = MustHeader(t, ok.GetResponseHeadersToAdd(), "X-Service-Usage-State")
	if len(ok.GetHeaders()) == 0 {
		return "", usageState
	}
	return ok.GetHeaders()[0].GetHeader().GetValue(), usageState
}
