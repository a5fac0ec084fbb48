package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/apitest"
)

// TestAnswersWithCredentialsAreNotStored: the answers that carry a secret (a session
// token from sign-up and sign-in, an API key at its creation, an invitation token) and
// every authenticated answer (per caller, and for an x-api-key caller not protected by
// the rule that keeps shared caches from storing answers to requests with
// Authorization) say cache-control: private, no-store. Without it a cache between the
// client and the control plane (a CDN, a corporate proxy, the browser's disk cache) was
// free to keep a session token or an API key in clear.
func TestAnswersWithCredentialsAreNotStored(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	key := e.APIKey(t, owner)
	invitee := e.SignUp(t, "invitee")
	for _, tc := range []struct {
		what   string
		method string
		path   string
		body   any
		opts   []apitest.Opt
		status int
	}{
		{"sign-up", "POST", "/v1/auth/sign-up", map[string]string{"email": "new.user@example.test", "password": apitest.Password, "name": "New"}, nil, http.StatusCreated},
		{"sign-in", "POST", "/v1/auth/sign-in", map[string]string{"email": owner.User.Email, "password": apitest.Password}, nil, http.StatusOK},
		{"failed sign-in", "POST", "/v1/auth/sign-in", map[string]string{"email": owner.User.Email, "password": "wrong password!"}, nil, http.StatusUnauthorized},
		{"api key", "POST", "/v1/api-keys", map[string]string{"name": "ci"}, owner.As(), http.StatusCreated},
		{"invitation", "POST", "/v1/invitations", map[string]string{"email": invitee.Email, "role": "member"}, owner.As(), http.StatusCreated},
		{"me by key", "GET", "/v1/me", nil, []apitest.Opt{apitest.Key(key)}, http.StatusOK},
		{"members by key", "GET", "/v1/members", nil, []apitest.Opt{apitest.Key(key)}, http.StatusOK},
		{"keys by session", "GET", "/v1/api-keys", nil, owner.As(), http.StatusOK},
		{"unauthenticated", "GET", "/v1/me", nil, nil, http.StatusUnauthorized},
	} {
		r := e.Do(t, tc.method, tc.path, tc.body, tc.opts...).Expect(t, tc.status)
		if cc := r.Header.Get("Cache-Control"); cc != "private, no-store" {
			t.Errorf("%s: Cache-Control %q, want private, no-store", tc.what, cc)
		}
	}
	// Public answers with nothing of anyone's stay cacheable.
	if cc := e.Do(t, "GET", "/openapi.json", nil).Expect(t, http.StatusOK).Header.Get("Cache-Control"); cc != "" {
		t.Errorf("/openapi.json: Cache-Control %q", cc)
	}
}
