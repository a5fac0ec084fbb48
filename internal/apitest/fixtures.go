package apitest

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
)

var seq atomic.Int64

// User is a signed-up user with a session.
type User struct {
	ID, Email, Name, Token string
}

// Member is a user's membership of an organization.
type Member struct {
	User
	MemberID, OrgID, Role string
}

// Password is the password of every fixture user.
const Password = "correct horse battery staple"

// SignUp creates a user with a unique email and returns it signed in.
func (e *Env) SignUp(t testing.TB, name string) User {
	t.Helper()
	email := fmt.Sprintf("%s.%d@example.test", name, seq.Add(1))
	var out struct {
		User  struct{ ID string }
		Token string
	}
	e.Do(t, "POST", "/v1/auth/sign-up", map[string]string{"email": email, "password": Password, "name": name}).
		Expect(t, http.StatusCreated).Decode(t, &out)
	return User{ID: out.User.ID, Email: email, Name: name, Token: out.Token}
}

// NewOrg signs up an owner and creates an organization.
func (e *Env) NewOrg(t testing.TB, name string) Member {
	t.Helper()
	u := e.SignUp(t, "owner")
	return e.CreateOrg(t, u, name)
}

// CreateOrg creates an organization owned by u.
func (e *Env) CreateOrg(t testing.TB, u User, name string) Member {
	t.Helper()
	var out struct {
		Organization struct{ ID string }
		Member       struct{ ID, Role string }
	}
	e.Do(t, "POST", "/v1/organizations", map[string]string{"name": name}, Session(u.Token)).
		Expect(t, http.StatusCreated).Decode(t, &out)
	return Member{User: u, MemberID: out.Member.ID, OrgID: out.Organization.ID, Role: out.Member.Role}
}

// AddMember signs up a new user and has them join by invitation with the given role.
func (e *Env) AddMember(t testing.TB, by Member, name, role string) Member {
	t.Helper()
	u := e.SignUp(t, name)
	return e.Join(t, by, u, role)
}

// Join invites an existing user and has them accept.
func (e *Env) Join(t testing.TB, by Member, u User, role string) Member {
	t.Helper()
	var inv struct{ Token string }
	e.Do(t, "POST", "/v1/invitations", map[string]string{"email": u.Email, "role": role}, Session(by.Token), Org(by.OrgID)).
		Expect(t, http.StatusCreated).Decode(t, &inv)
	var out struct {
		Member struct{ ID, Role string }
	}
	e.Do(t, "POST", "/v1/invitations/accept", map[string]string{"token": inv.Token}, Session(u.Token)).
		Expect(t, http.StatusOK).Decode(t, &out)
	return Member{User: u, MemberID: out.Member.ID, OrgID: by.OrgID, Role: out.Member.Role}
}

// APIKey mints an API key for m in m's organization.
func (e *Env) APIKey(t testing.TB, m Member) string {
	t.Helper()
	var out struct{ Key string }
	e.Do(t, "POST", "/v1/api-keys", map[string]string{"name": "test key"}, Session(m.Token), Org(m.OrgID)).
		Expect(t, http.StatusCreated).Decode(t, &out)
	return out.Key
}

// As authenticates as m (session) inside m's organization.
func (m Member) As() []Opt { return []Opt{Session(m.Token), Org(m.OrgID)} }

// SignIn opens a new session for u and returns it with the new token.
func (e *Env) SignIn(t testing.TB, u User) User {
	t.Helper()
	var out struct{ Token string }
	e.Do(t, "POST", "/v1/auth/sign-in", map[string]string{"email": u.Email, "password": Password}).
		Expect(t, http.StatusOK).Decode(t, &out)
	u.Token = out.Token
	return u
}
