package httpapi_test

import (
	"net/http"
	"sync"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/apitest"
)

// concurrently runs the requests at the same moment and answers their responses in
// order.
func concurrently(reqs ...func() *apitest.Resp) []*apitest.Resp {
	out := make([]*apitest.Resp, len(reqs))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, req := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			out[i] = req()
		}()
	}
	close(start)
	wg.Wait()
	return out
}

// noServerErrors fails the test on any 5xx among rs.
func noServerErrors(t *testing.T, round int, rs ...*apitest.Resp) {
	t.Helper()
	for _, r := range rs {
		if r.Status >= 500 {
			t.Fatalf("round %d: answered %d: %s", round, r.Status, r.Body)
		}
	}
}

// expectStatus fails the test unless r answered status with the given error code
// (code "" for a success).
func expectStatus(t *testing.T, round int, r *apitest.Resp, status int, code string) {
	t.Helper()
	if r.Status != status || (code != "" && r.JSON(t)["error"] != code) {
		t.Fatalf("round %d: answered %d, want %d %s: %s", round, r.Status, status, code, r.Body)
	}
}

// Two invitations of one user to one organization, accepted at the same moment: one
// joins, the other is 409 already_member (as when accepted one after the other) and
// stays unused.
func TestAcceptTwoInvitationsConcurrently(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	owner := e.NewOrg(t, "Acme")
	for round := range 10 {
		u := e.SignUp(t, "ann")
		var tokens [2]string
		for i := range tokens {
			var inv struct{ Token string }
			e.Do(t, "POST", "/v1/invitations", map[string]string{"email": u.Email, "role": "member"}, owner.As()...).
				Expect(t, http.StatusCreated).Decode(t, &inv)
			tokens[i] = inv.Token
		}
		accept := func(token string) func() *apitest.Resp {
			return func() *apitest.Resp {
				return e.Do(t, "POST", "/v1/invitations/accept", map[string]string{"token": token}, apitest.Session(u.Token))
			}
		}
		rs := concurrently(accept(tokens[0]), accept(tokens[1]))
		noServerErrors(t, round, rs...)
		if rs[0].Status == http.StatusOK {
			expectStatus(t, round, rs[1], http.StatusConflict, "already_member")
		} else {
			expectStatus(t, round, rs[0], http.StatusConflict, "already_member")
			expectStatus(t, round, rs[1], http.StatusOK, "")
		}
		if n := count(t, e, "members", "user_id = $1 AND organization_id = $2", u.ID, owner.OrgID); n != 1 {
			t.Fatalf("round %d: %d memberships, want 1", round, n)
		}
		// The refused acceptance changed nothing: its invitation is still unused.
		if n := count(t, e, "invitations", "email_normalized = $1 AND accepted_at IS NULL", u.Email); n != 1 {
			t.Fatalf("round %d: %d unused invitations, want 1", round, n)
		}
	}
}
