package httpapi

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/fault"
	"github.com/tollgate-dev/tollgate/controlplane/jsonx"
	"github.com/tollgate-dev/tollgate/controlplane/password"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/pkg/credential"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
)

type sessionAnswer struct {
	User      userView   `json:"user"`
	Token     string     `json:"token"`
	ExpiresAt jsonx.Time `json:"expiresAt"`
}

// maxPasswordLength bounds the work of one password hash.
const maxPasswordLength = password.MaxLength

func (s *Server) signUp(c *Call) error {
	var in struct {
		Email    *string `json:"email"`
		Password *string `json:"password"`
		Name     *string `json:"name"`
	}
	if err := c.Decode(&in); err != nil {
		return err
	}
	var p fault.Problems
	email := requiredEmail(&p, in.Email, "email")
	if in.Password == nil {
		p.Add("is required", "password")
	} else if n := utf8.RuneCountInString(*in.Password); n < password.MinLength || n > maxPasswordLength {
		p.Add("must be 12 to 1024 characters", "password")
	}
	name := nameText(&p, in.Name, 1, 255, "name")
	if err := p.Err(); err != nil {
		return err
	}
	// A refused sign-up (email taken or reserved) tells its caller that the email has an
	// account: per client address, a few are free, then each waits twice as long as the
	// last, as failed sign-ins do. Successes do not reset it (a prober could otherwise
	// interleave throwaway accounts). docs/security.md says what is still disclosed.
	addr := []string{"addr:" + s.clientAddress(c.R)}
	// Begin, not Wait: a sign-up under way counts as refused until it is known not to
	// be, so that a burst of probes sent at once is not heard whole.
	if wait := s.signUps.Begin(addr...); wait > 0 {
		return &fault.Error{Kind: fault.TooMany, Code: "too_many_attempts",
			Message: "Too many refused sign-ups from this address; wait before trying again.", RetryAfter: wait}
	}
	defer s.signUps.End(addr...)
	// Administrators are provisioned by an operator (bootstrap-admin); nobody may claim an
	// allowlisted email by signing up first. Checked before the password's hash (cheap
	// refusal), and again under the email's lock with the account's insert, so that an
	// allowlisting of this email either committed before (refused here) or waits for the
	// account and refuses itself (409 user_exists).
	reserved := func(q store.Querier) error {
		admin, err := store.IsPlatformAdmin(c.Ctx, q, email)
		if err != nil || !admin {
			return err
		}
		s.signUps.Fail(addr...)
		return fault.Forbiddenf("This email is reserved for a platform administrator; ask your operator for an account.")
	}
	if err := reserved(c.DB()); err != nil {
		return err
	}
	hash, err := password.Hash(*in.Password)
	if err != nil {
		return err
	}
	u := store.User{ID: newID(typeid.User), Email: strings.TrimSpace(*in.Email), EmailNormalized: email, Name: name,
		PasswordHash: hash, CreatedAt: c.now}
	var ans sessionAnswer
	err = c.Tx(func(tx pgx.Tx) error {
		if err := store.LockAccountEmail(c.Ctx, tx, email); err != nil {
			return err
		}
		if err := reserved(tx); err != nil {
			return err
		}
		if err := store.CreateUser(c.Ctx, tx, u); err != nil {
			return err
		}
		ans, err = s.openSession(c, tx, u)
		return err
	})
	if errors.Is(err, store.ErrEmailTaken) {
		s.signUps.Fail(addr...)
		return fault.Conflictf("email_taken", "An account with this email already exists; sign in instead.")
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, ans)
}

// openSession mints a session token for u inside tx.
func (s *Server) openSession(c *Call, tx pgx.Tx, u store.User) (sessionAnswer, error) {
	token, hash := credential.New(credential.SessionPrefix)
	sess := store.Session{ID: newID(typeid.Session), UserID: u.ID, TokenHash: hash, AuthenticatedAt: c.now,
		CreatedAt: c.now, ExpiresAt: c.now.Add(s.deps.SessionTTL)}
	if err := store.CreateSession(c.Ctx, tx, sess); err != nil {
		return sessionAnswer{}, err
	}
	return sessionAnswer{User: viewUser(u), Token: token, ExpiresAt: jsonx.Time(sess.ExpiresAt)}, nil
}

func (s *Server) signIn(c *Call) error {
	var in struct {
		Email    *string `json:"email"`
		Password *string `json:"password"`
	}
	if err := c.Decode(&in); err != nil {
		return err
	}
	var p fault.Problems
	if in.Email == nil {
		p.Add("is required", "email")
	}
	if in.Password == nil {
		p.Add("is required", "password")
	} else if len(*in.Password) > maxPasswordLength*4 {
		p.Add("is too long", "password")
	}
	if err := p.Err(); err != nil {
		return err
	}
	email := normalizeEmail(*in.Email)
	keys := []string{"email:" + email, "addr:" + s.clientAddress(c.R)}
	// Begin, not Wait: a sign-in under way counts as a failure until it is known not to
	// be one, so that a burst of guesses sent at once is not heard whole.
	if wait := s.signIns.Begin(keys...); wait > 0 {
		return &fault.Error{Kind: fault.TooMany, Code: "too_many_attempts",
			Message: "Too many failed sign-ins; wait before trying again.", RetryAfter: wait}
	}
	defer s.signIns.End(keys...)
	u, err := store.UserByEmail(c.Ctx, c.DB(), email)
	if errors.Is(err, store.ErrNotFound) {
		password.CheckMissing(*in.Password)
		s.signIns.Fail(keys...)
		return fault.ErrUnauthorized
	}
	if err != nil {
		return err
	}
	if ok, _ := password.Check(u.PasswordHash, *in.Password); !ok {
		s.signIns.Fail(keys...)
		return fault.ErrUnauthorized
	}
	// The email's count starts over: its owner proved the password. The address's does
	// not: anyone may sign in to an account of their own, and between guesses at other
	// emails that would clear the brake on the address; it decays after a quiet quarter
	// of an hour, as sign-up's does.
	s.signIns.Succeed(keys[0])
	var ans sessionAnswer
	err = c.Tx(func(tx pgx.Tx) error {
		// The password checked must still be the account's: a reset (bootstrap-admin)
		// that committed while it was hashed changed it, and one under way waits for
		// this session and then ends it with the others.
		if still, err := store.PasswordStill(c.Ctx, tx, u.ID, u.PasswordHash); err != nil {
			return err
		} else if !still {
			return fault.ErrUnauthorized
		}
		ans, err = s.openSession(c, tx, u)
		return err
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ans)
}

// clientAddress is the address sign-in and sign-up throttling key on: the connection's
// peer, or, when the deployment says a trusted proxy sets X-Forwarded-For, its right-most
// hop (of the last such header): the address that proxy itself saw. Proxies that append
// (nginx's $proxy_add_x_forwarded_for, Envoy, AWS ALB) keep whatever the client sent on
// the left, so the first hop is the client's to choose. Behind several proxies the
// right-most is the nearest proxy's view (the one before it), one address for all the
// clients behind it.
func (s *Server) clientAddress(r *http.Request) string {
	if s.deps.TrustForwardedFor {
		if xff := r.Header.Values("X-Forwarded-For"); len(xff) > 0 {
			hops := strings.Split(xff[len(xff)-1], ",")
			if last := strings.TrimSpace(hops[len(hops)-1]); last != "" {
				return last
			}
		}
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func (s *Server) signOut(c *Call) error {
	hash, err := store.RevokeSession(c.Ctx, c.DB(), c.Principal.Session.ID, c.now)
	if err != nil {
		return err
	}
	if hash != nil {
		// Enforcers refuse the session at once (not when their identity cache expires),
		// even if the client hung up on this answer.
		s.events.SessionsRevoked(context.WithoutCancel(c.Ctx), [][]byte{hash})
	}
	return c.NoContent()
}

func (s *Server) me(c *Call) error {
	p := c.Principal
	var memberships []store.Membership
	var active *string
	if p.IsAPIKey() {
		// A key acts in its own organization only, so that is all it sees.
		org, err := store.OrganizationByID(c.Ctx, c.DB(), p.KeyMember.OrganizationID)
		if err != nil {
			return err
		}
		memberships = []store.Membership{{Organization: org, Member: *p.KeyMember}}
		active = &org.ID
	} else {
		var err error
		memberships, err = store.MembershipsOfUser(c.Ctx, c.DB(), p.User.ID)
		if err != nil {
			return err
		}
		active = p.User.ActiveOrganizationID
	}
	views := make([]membershipView, len(memberships))
	for i, m := range memberships {
		views[i] = membershipView{Organization: viewOrganization(m.Organization), Member: viewMember(m.Member)}
	}
	return c.JSON(http.StatusOK, map[string]any{
		"user":                 viewUser(p.User),
		"activeOrganizationId": active,
		"memberships":          views,
	})
}

func (s *Server) setActiveOrganization(c *Call) error {
	var in struct {
		OrganizationID *string `json:"organizationId"`
	}
	if err := c.Decode(&in); err != nil {
		return err
	}
	if in.OrganizationID == nil {
		return fault.InvalidAt("is required", "organizationId")
	}
	if err := typeid.Check(*in.OrganizationID, typeid.Org); err != nil {
		return fault.InvalidAt(err.Error(), "organizationId")
	}
	err := c.Tx(func(tx pgx.Tx) error {
		// FOR SHARE: a concurrent removal from the organization waits for this switch
		// (and then clears it), or, when it committed first, the membership is not found.
		if _, err := store.ActiveMember(c.Ctx, tx, *in.OrganizationID, c.Principal.User.ID, store.ForShare); errors.Is(err, store.ErrNotFound) {
			return errOrgNotFound()
		} else if err != nil {
			return err
		}
		if err := store.SetActiveOrganization(c.Ctx, tx, c.Principal.User.ID, in.OrganizationID, c.now); err != nil {
			return err
		}
		s.activeOrganizationChanged(c, c.Principal.User.ID)
		return nil
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"activeOrganizationId": *in.OrganizationID})
}

// activeOrganizationChanged tells enforcers, once the transaction commits, to forget the
// user's sessions: a session acts as the user's member in their active organization, and
// an enforcer would go on charging the old one's member from its identity cache.
func (s *Server) activeOrganizationChanged(c *Call, userID string) {
	ctx := context.WithoutCancel(c.Ctx)
	c.AfterCommit(func() { s.events.UserSessionsChanged(ctx, userID) })
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
