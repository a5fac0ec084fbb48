package e2e_test

import (
	"context"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/codes"

	"github.com/tollgate-dev/tollgate/pkg/mirror"
)

// checkSession asks the enforcer to admit a request presenting a session token.
func (s *stack) checkSession(t testing.TB, token string) *authv3.CheckResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := s.authz.Check(ctx, checkRequest(map[string]string{"authorization": "Bearer " + token}))
	if err != nil {
		t.Fatalf("ext_authz Check: %v", err)
	}
	return resp
}

// invalidationsApplied waits until the enforcer has applied every invalidation published
// before the call: the test publishes one of its own after them (an API key nobody has)
// and waits for the enforcer to count it, as the channel delivers in order. That is no
// fixed delay (500ms was, once, which a loaded machine can exceed), and it is far less
// than the identity cache's TTL (30s), which is all that dropped a session before
// 2026-12-02.
func (s *stack) invalidationsApplied(t testing.TB) {
	t.Helper()
	applied := func() float64 {
		return s.metric(t, "tollgate_enforcer_invalidations_total", `kind="api_key"`)
	}
	before := applied()
	if err := s.layout.Publish(context.Background(), s.rdb, mirror.Invalidation{Kind: mirror.KindAPIKey, ID: "apk_e2e_marker"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the enforcer to apply the invalidations published", func() bool { return applied() > before })
}

// A signed-out session is refused by the enforcer at once (401), as a revoked API key
// is: it stayed admitted, and charged, from the identity cache for up to 30s.
func TestSignedOutSessionIsRefusedByTheEnforcer(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	s := startStack(t)
	o := s.setUpOrg(t)
	s.must(t, 200, "PUT", "/v1/me/active-organization", o.member.token, "", map[string]string{"organizationId": o.id}, nil)
	admitted(t, s.checkSession(t, o.member.token), "within_limit")

	s.must(t, 204, "POST", "/v1/auth/sign-out", o.member.token, "", nil, nil)
	s.invalidationsApplied(t)
	resp := s.checkSession(t, o.member.token)
	if resp.GetStatus().GetCode() == int32(codes.OK) || resp.GetDeniedResponse().GetStatus().GetCode() != 401 {
		t.Fatalf("the signed-out session: want 401, got %v", resp)
	}
}

// A session acts in its user's active organization: once the user switches it, the
// enforcer charges the session's requests to the new organization's member. It kept
// charging the old one's, under its limits, for up to 30s.
func TestSessionSwitchingOrganizationIsChargedToTheNewOne(t *testing.T) {
	t.Parallel() // its own database and Redis prefix
	s := startStack(t)
	o := s.setUpOrg(t)
	tok := o.member.token
	s.must(t, 200, "PUT", "/v1/me/active-organization", tok, "", map[string]string{"organizationId": o.id}, nil)
	admitted(t, s.checkSession(t, tok), "within_limit")
	var created struct{ Organization struct{ ID string } }
	s.must(t, 201, "POST", "/v1/organizations", tok, "", map[string]string{"name": "Other Inc"}, &created)
	other := created.Organization.ID

	s.must(t, 200, "PUT", "/v1/me/active-organization", tok, "", map[string]string{"organizationId": other}, nil)
	s.invalidationsApplied(t)
	// In the new organization the user is its owner, under no policy.
	admitted(t, s.checkSession(t, tok), "unlimited")
	for _, c := range []struct {
		org  string
		want int64
	}{{o.id, 1}, {other, 1}} {
		var st status
		s.must(t, 200, "GET", "/v1/gateway/usage-limits/me", tok, c.org, nil, &st)
		if st.Coverage.PendingRequests == nil || *st.Coverage.PendingRequests != c.want {
			t.Errorf("organization %s: pending requests %v, want %d", c.org, st.Coverage.PendingRequests, c.want)
		}
	}
}
