package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/internal/apitest"
)

func TestSignUpValidation(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	ok := `{"email":"a@example.test","password":"123456789012","name":"A"}`
	cases := []struct {
		name, body string
		path       string // first detail's path, joined with "."
	}{
		{"empty body", ``, ""},
		{"not json", `{"email":`, ""},
		{"array body", `[]`, ""},
		{"missing email", `{"password":"123456789012","name":"A"}`, "email"},
		{"bad email", `{"email":"nope","password":"123456789012","name":"A"}`, "email"},
		{"short password", `{"email":"a@example.test","password":"short","name":"A"}`, "password"},
		{"blank name", `{"email":"a@example.test","password":"123456789012","name":"   "}`, "name"},
		{"wrong type", `{"email":"a@example.test","password":123,"name":"A"}`, "password"},
		{"unknown field", `{"email":"a@example.test","password":"123456789012","name":"A","admin":true}`, "admin"},
		{"trailing data", ok + `{}`, ""},
		{"oversized", `{"email":"a@example.test","password":"123456789012","name":"` + strings.Repeat("x", 1<<20) + `"}`, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := e.Do(t, "POST", "/v1/auth/sign-up", tc.body).ExpectError(t, http.StatusBadRequest, "invalid_request")
			details, _ := r["details"].([]any)
			if len(details) == 0 {
				t.Fatalf("no details: %v", r)
			}
			if tc.path != "" {
				first := details[0].(map[string]any)
				path, _ := first["path"].([]any)
				if len(path) == 0 || path[0] != tc.path {
					t.Fatalf("detail path %v, want %q", first["path"], tc.path)
				}
			}
		})
	}
	if n := count(t, e, "users", "true"); n != 0 {
		t.Fatalf("refused sign-ups wrote %d users", n)
	}
	e.Do(t, "POST", "/v1/auth/sign-up", ok).Expect(t, http.StatusCreated)
	e.Do(t, "POST", "/v1/auth/sign-up", strings.Replace(ok, "a@example", " A@EXAMPLE", 1)).ExpectError(t, http.StatusConflict, "email_taken")
}

func TestSignUpRefusesAllowlistedEmail(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	if _, err := store.AddPlatformAdmin(context.Background(), e.Store.Pool, "root@example.test", "test", apitest.Start); err != nil {
		t.Fatal(err)
	}
	body := map[string]string{"email": "  Root@Example.TEST ", "password": "123456789012", "name": "Mallory"}
	e.Do(t, "POST", "/v1/auth/sign-up", body).ExpectError(t, http.StatusForbidden, "forbidden")
	if n := count(t, e, "users", "true"); n != 0 {
		t.Fatalf("refused sign-up wrote %d users", n)
	}
}

func TestSignInAndOut(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	u := e.SignUp(t, "ann")
	var out struct{ Token string }
	e.Do(t, "POST", "/v1/auth/sign-in", map[string]string{"email": strings.ToUpper(u.Email), "password": apitest.Password}).
		Expect(t, http.StatusOK).Decode(t, &out)
	e.Do(t, "GET", "/v1/me", nil, apitest.Session(out.Token)).Expect(t, http.StatusOK)
	e.Do(t, "POST", "/v1/auth/sign-in", map[string]string{"email": u.Email, "password": "wrong password!"}).ExpectError(t, http.StatusUnauthorized, "unauthorized")
	e.Do(t, "POST", "/v1/auth/sign-in", map[string]string{"email": "nobody@example.test", "password": "wrong password!"}).ExpectError(t, http.StatusUnauthorized, "unauthorized")
	e.Do(t, "POST", "/v1/auth/sign-out", nil, apitest.Session(out.Token)).Expect(t, http.StatusNoContent)
	e.Do(t, "GET", "/v1/me", nil, apitest.Session(out.Token)).ExpectError(t, http.StatusUnauthorized, "unauthorized")
	// The other session is untouched.
	e.Do(t, "GET", "/v1/me", nil, apitest.Session(u.Token)).Expect(t, http.StatusOK)
}

func TestSignInIsSlowedDownPerEmailAndAddress(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	u := e.SignUp(t, "ann")
	wrong := map[string]string{"email": u.Email, "password": "not the password"}
	for i := 0; i < 5; i++ {
		e.Do(t, "POST", "/v1/auth/sign-in", wrong).Expect(t, http.StatusUnauthorized)
	}
	e.Do(t, "POST", "/v1/auth/sign-in", wrong).Expect(t, http.StatusUnauthorized) // sixth failure starts the wait
	r := e.Do(t, "POST", "/v1/auth/sign-in", map[string]string{"email": u.Email, "password": apitest.Password})
	r.ExpectError(t, http.StatusTooManyRequests, "too_many_attempts")
	if r.Header.Get("Retry-After") == "" {
		t.Fatal("429 without Retry-After")
	}
	// The same address is slowed down for another email too.
	e.Do(t, "POST", "/v1/auth/sign-in", map[string]string{"email": "other@example.test", "password": "x"}).Expect(t, http.StatusTooManyRequests)
	e.Clock.Advance(2 * time.Second)
	e.Do(t, "POST", "/v1/auth/sign-in", map[string]string{"email": u.Email, "password": apitest.Password}).Expect(t, http.StatusOK)
}

// TestABurstOfSignInsIsNotHeardWhole: sign-ins sent at once count as failures while
// they are under way. Before, the brake looked only at the failures recorded, and each
// sign-in records its own after hashing its guess, so a burst of guesses at one
// account's password sent together all passed the brake before the first failed: thirty
// concurrent guesses were thirty answers (docs/security.md, "Sign-in does not tell").
func TestABurstOfSignInsIsNotHeardWhole(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	u := e.SignUp(t, "ann")
	const burst = 30
	heard := answeredAtOnce(t, burst, http.StatusUnauthorized, func(i int) int {
		return e.Do(t, "POST", "/v1/auth/sign-in", map[string]string{"email": u.Email, "password": fmt.Sprintf("guess number %d", i)}).Status
	})
	if heard > 6 {
		t.Fatalf("%d of %d concurrent guesses were heard; the brake hears 5 free failures and the sixth that starts the wait", heard, burst)
	}
	// Nothing stays under way: once the wait is over, the owner signs in.
	e.Clock.Advance(5 * time.Minute)
	e.Do(t, "POST", "/v1/auth/sign-in", map[string]string{"email": u.Email, "password": apitest.Password}).Expect(t, http.StatusOK)
}

// TestOwnSignInDoesNotResetTheAddressBrake: a successful sign-in starts its email's
// count over, not its address's. Otherwise a prober who signs in to an account of their
// own every few guesses sprays passwords over many emails from one address and is never
// slowed down (the interleaving sign-up's brake refuses too). The address's count decays
// after a quiet quarter of an hour instead.
func TestOwnSignInDoesNotResetTheAddressBrake(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	own := e.SignUp(t, "prober")
	guess := func(i int) *apitest.Resp {
		return e.Do(t, "POST", "/v1/auth/sign-in", map[string]string{"email": fmt.Sprintf("victim%d@example.test", i), "password": "guess guess guess"})
	}
	signIn := func() *apitest.Resp {
		return e.Do(t, "POST", "/v1/auth/sign-in", map[string]string{"email": own.Email, "password": apitest.Password})
	}
	for i := range 4 {
		guess(i).ExpectError(t, http.StatusUnauthorized, "unauthorized")
	}
	signIn().Expect(t, http.StatusOK)
	guess(4).ExpectError(t, http.StatusUnauthorized, "unauthorized")
	guess(5).ExpectError(t, http.StatusUnauthorized, "unauthorized") // the address's sixth failure starts the wait
	guess(6).ExpectError(t, http.StatusTooManyRequests, "too_many_attempts")
	signIn().ExpectError(t, http.StatusTooManyRequests, "too_many_attempts")
	e.Clock.Advance(time.Second)
	signIn().Expect(t, http.StatusOK)
	// A quiet quarter of an hour forgets the address: five free failures again.
	e.Clock.Advance(16 * time.Minute)
	for i := range 6 {
		guess(10+i).ExpectError(t, http.StatusUnauthorized, "unauthorized")
	}
}

// TestABurstOfSignUpsIsNotHeardWhole: sign-ups sent at once count as refused while
// they are under way. Before, each refused sign-up recorded its refusal after hashing
// its password, so a burst of probes sent together all passed the address's brake:
// thirty concurrent sign-ups told thirty times whether an email has an account, where
// the brake tells six (docs/security.md, "Sign-up tells whether an email has an
// account").
func TestABurstOfSignUpsIsNotHeardWhole(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	taken := e.SignUp(t, "ann")
	const burst = 30
	told := answeredAtOnce(t, burst, http.StatusConflict, func(int) int {
		return e.Do(t, "POST", "/v1/auth/sign-up", map[string]string{"email": taken.Email, "password": "123456789012", "name": "Probe"}).Status
	})
	if told > 6 {
		t.Fatalf("%d of %d concurrent probes were told the email is taken; the brake tells 5 free refusals and the sixth that starts the wait", told, burst)
	}
	// Nothing stays under way: once the wait is over, a sign-up is heard.
	e.Clock.Advance(5 * time.Minute)
	e.Do(t, "POST", "/v1/auth/sign-up", map[string]string{"email": "fresh@example.test", "password": "123456789012", "name": "Fresh"}).
		Expect(t, http.StatusCreated)
}

// TestSignUpIsSlowedDownPerAddress: each sign-up refused because the email is taken
// (which tells the caller it has an account) counts against the client's address: five
// are free, the sixth starts a wait, and then every sign-up from the address, taken email
// or not, answers 429 with Retry-After without looking; successes in between do not
// reset it; another address is not slowed; the wait ends.
func TestSignUpIsSlowedDownPerAddress(t *testing.T) {
	t.Parallel()
	e := apitest.NewWith(t, apitest.Options{TrustForwardedFor: true})
	taken := e.SignUp(t, "ann")
	from := func(addr string) apitest.Opt { return apitest.Header("X-Forwarded-For", addr) }
	probe := map[string]string{"email": taken.Email, "password": "123456789012", "name": "Probe"}
	fresh := func(i int) map[string]string {
		return map[string]string{"email": fmt.Sprintf("fresh%d@example.test", i), "password": "123456789012", "name": "Fresh"}
	}
	for i := range 5 {
		e.Do(t, "POST", "/v1/auth/sign-up", probe, from("192.0.2.7")).ExpectError(t, http.StatusConflict, "email_taken")
		if i == 2 {
			e.Do(t, "POST", "/v1/auth/sign-up", fresh(i), from("192.0.2.7")).Expect(t, http.StatusCreated)
		}
	}
	e.Do(t, "POST", "/v1/auth/sign-up", probe, from("192.0.2.7")).ExpectError(t, http.StatusConflict, "email_taken") // the sixth starts the wait
	for _, body := range []map[string]string{probe, fresh(99)} {
		r := e.Do(t, "POST", "/v1/auth/sign-up", body, from("192.0.2.7"))
		r.ExpectError(t, http.StatusTooManyRequests, "too_many_attempts")
		if r.Header.Get("Retry-After") == "" {
			t.Fatal("429 without Retry-After")
		}
	}
	if n := count(t, e, "users", "email_normalized = 'fresh99@example.test'"); n != 0 {
		t.Fatal("a throttled sign-up created the user")
	}
	// Another address is heard.
	e.Do(t, "POST", "/v1/auth/sign-up", probe, from("198.51.100.1")).ExpectError(t, http.StatusConflict, "email_taken")
	e.Clock.Advance(2 * time.Second)
	e.Do(t, "POST", "/v1/auth/sign-up", fresh(100), from("192.0.2.7")).Expect(t, http.StatusCreated)
}

// TestThrottlingKeysOnTheRightMostForwardedHop: with TOLLGATE_TRUST_FORWARDED_FOR the
// client address is X-Forwarded-For's right-most hop, the one the trusted proxy itself
// appended. Proxies that append (nginx's $proxy_add_x_forwarded_for, Envoy, ALB) keep
// what the client sent on the left: keyed on the first hop, one client forging a new
// one each time was never slowed down, and could put another client's address there.
func TestThrottlingKeysOnTheRightMostForwardedHop(t *testing.T) {
	t.Parallel()
	e := apitest.NewWith(t, apitest.Options{TrustForwardedFor: true})
	taken := e.SignUp(t, "victim")
	probe := map[string]string{"email": taken.Email, "password": apitest.Password, "name": "p"}
	from := func(xff string) apitest.Opt { return apitest.Header("X-Forwarded-For", xff) }
	for i := range 6 {
		// A forged first hop each time; the proxy appends the real peer, 198.51.100.7.
		e.Do(t, "POST", "/v1/auth/sign-up", probe, from(fmt.Sprintf("203.0.113.%d, 198.51.100.7", i+1))).
			ExpectError(t, http.StatusConflict, "email_taken")
	}
	e.Do(t, "POST", "/v1/auth/sign-up", probe, from("203.0.113.99,198.51.100.7")).
		ExpectError(t, http.StatusTooManyRequests, "too_many_attempts")
	// The same real address alone, or last of the last header line, is the one slowed down.
	e.Do(t, "POST", "/v1/auth/sign-up", probe, from("198.51.100.7")).ExpectError(t, http.StatusTooManyRequests, "too_many_attempts")
	second := func(r *http.Request) { r.Header.Add("X-Forwarded-For", "192.0.2.1, 198.51.100.7") } // a second header line
	e.Do(t, "POST", "/v1/auth/sign-up", probe, from("10.0.0.1"), second).
		ExpectError(t, http.StatusTooManyRequests, "too_many_attempts")
	// A client forging the slowed address on the left does not slow down another.
	e.Do(t, "POST", "/v1/auth/sign-up", probe, from("198.51.100.7, 192.0.2.44")).ExpectError(t, http.StatusConflict, "email_taken")
}

func TestCredentials(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	o := e.NewOrg(t, "Acme")
	key := e.APIKey(t, o)
	cases := []struct {
		name   string
		opts   []apitest.Opt
		status int
	}{
		{"no credential", nil, 401},
		{"session", []apitest.Opt{apitest.Session(o.Token)}, 200},
		{"raw api key", []apitest.Opt{apitest.Key(key)}, 200},
		{"bearer-prefixed api key refused", []apitest.Opt{apitest.Header("x-api-key", "Bearer "+key)}, 401},
		{"api key in authorization header refused", []apitest.Opt{apitest.Session(key)}, 401},
		{"unknown key", []apitest.Opt{apitest.Key("tgk_nope")}, 401},
		{"bad key wins over good session", []apitest.Opt{apitest.Key("tgk_nope"), apitest.Session(o.Token)}, 401},
		{"malformed authorization", []apitest.Opt{apitest.Header("Authorization", "Basic abc")}, 401},
		// RFC 9110: the scheme is case-insensitive, and may be followed by several spaces.
		{"lower-case bearer scheme", []apitest.Opt{apitest.Header("Authorization", "bearer "+o.Token)}, 200},
		{"upper-case bearer scheme", []apitest.Opt{apitest.Header("Authorization", "BEARER "+o.Token)}, 200},
		{"bearer and two spaces", []apitest.Opt{apitest.Header("Authorization", "Bearer  "+o.Token)}, 200},
		{"lower-case bearer-prefixed api key refused", []apitest.Opt{apitest.Header("x-api-key", "bearer "+key)}, 401},
		// Every credential present must be valid, whichever header comes first.
		{"good key with a bogus authorization", []apitest.Opt{apitest.Key(key), apitest.Header("Authorization", "Bearer bogus")}, 401},
		{"good key with a non-bearer authorization", []apitest.Opt{apitest.Key(key), apitest.Header("Authorization", "Basic abc")}, 401},
		{"good key with an empty authorization", []apitest.Opt{apitest.Key(key), apitest.Header("Authorization", "")}, 401},
		{"good key with an unknown session", []apitest.Opt{apitest.Key(key), apitest.Session("tgs_nope")}, 401},
		{"good key and good session", []apitest.Opt{apitest.Key(key), apitest.Session(o.Token)}, 200},
		{"good session with an empty api key", []apitest.Opt{apitest.Session(o.Token), apitest.Header("x-api-key", "")}, 401},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := e.Do(t, "GET", "/v1/me", nil, tc.opts...).Expect(t, tc.status)
			if tc.status == 401 && strings.TrimSpace(string(r.Body)) != `{"error":"unauthorized"}` {
				t.Fatalf("401 body %s", r.Body)
			}
		})
	}
}

func TestSessionExpires(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	u := e.SignUp(t, "ann")
	e.Clock.Advance(7*24*time.Hour - time.Second)
	e.Do(t, "GET", "/v1/me", nil, apitest.Session(u.Token)).Expect(t, http.StatusOK)
	e.Clock.Advance(time.Second)
	e.Do(t, "GET", "/v1/me", nil, apitest.Session(u.Token)).ExpectError(t, http.StatusUnauthorized, "unauthorized")
}

func TestMeAndActiveOrganization(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	a := e.NewOrg(t, "Acme")
	b := e.CreateOrg(t, a.User, "Beta")
	var me struct {
		ActiveOrganizationID string
		Memberships          []struct{ Organization struct{ ID string } }
	}
	e.Do(t, "GET", "/v1/me", nil, apitest.Session(a.Token)).Expect(t, 200).Decode(t, &me)
	if me.ActiveOrganizationID != a.OrgID || len(me.Memberships) != 2 {
		t.Fatalf("me: %+v", me)
	}
	e.Do(t, "PUT", "/v1/me/active-organization", map[string]string{"organizationId": b.OrgID}, apitest.Session(a.Token)).Expect(t, 200)
	e.Do(t, "GET", "/v1/me", nil, apitest.Session(a.Token)).Expect(t, 200).Decode(t, &me)
	if me.ActiveOrganizationID != b.OrgID {
		t.Fatalf("active organization not switched: %+v", me)
	}
	// Without X-Service-Org-Id the session acts in its active organization.
	var members struct {
		Members []struct{ OrganizationID string }
	}
	e.Do(t, "GET", "/v1/members", nil, apitest.Session(a.Token)).Expect(t, 200).Decode(t, &members)
	if members.Members[0].OrganizationID != b.OrgID {
		t.Fatalf("members of %s, want the active %s", members.Members[0].OrganizationID, b.OrgID)
	}

	other := e.NewOrg(t, "Other")
	e.Do(t, "PUT", "/v1/me/active-organization", map[string]string{"organizationId": other.OrgID}, apitest.Session(a.Token)).
		ExpectError(t, http.StatusNotFound, "organization_not_found")
	e.Do(t, "PUT", "/v1/me/active-organization", map[string]string{"organizationId": "org_x"}, apitest.Session(a.Token)).
		ExpectError(t, http.StatusBadRequest, "invalid_request")
	key := e.APIKey(t, a)
	e.Do(t, "PUT", "/v1/me/active-organization", map[string]string{"organizationId": b.OrgID}, apitest.Key(key)).
		ExpectError(t, http.StatusForbidden, "forbidden")
	// An API key sees only its own organization.
	e.Do(t, "GET", "/v1/me", nil, apitest.Key(key)).Expect(t, 200).Decode(t, &me)
	if me.ActiveOrganizationID != a.OrgID || len(me.Memberships) != 1 {
		t.Fatalf("key's me: %+v", me)
	}
	// A key cannot be pointed at another organization of its user.
	e.Do(t, "GET", "/v1/members", nil, apitest.Key(key), apitest.Org(b.OrgID)).ExpectError(t, http.StatusNotFound, "organization_not_found")
}

func TestUserWithoutOrganization(t *testing.T) {
	t.Parallel()
	e := apitest.New(t)
	u := e.SignUp(t, "loner")
	r := e.Do(t, "GET", "/v1/members", nil, apitest.Session(u.Token)).ExpectError(t, http.StatusNotFound, "organization_not_found")
	if !strings.Contains(r["message"].(string), "X-Service-Org-Id") {
		t.Fatalf("message does not say how to choose an organization: %v", r["message"])
	}
}

// answeredAtOnce sends n requests at once (send(i) answers the i-th's status) and counts
// those answered heard; the others must be the brake's 429.
func answeredAtOnce(t *testing.T, n, heard int, send func(i int) int) int {
	t.Helper()
	statuses := make(chan int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { statuses <- send(i) })
	}
	wg.Wait()
	close(statuses)
	count := 0
	for s := range statuses {
		switch s {
		case heard:
			count++
		case http.StatusTooManyRequests:
		default:
			t.Fatalf("a request sent at once answered %d", s)
		}
	}
	return count
}
