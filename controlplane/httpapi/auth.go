package httpapi

import (
	"errors"
	"slices"
	"strings"

	"github.com/tollgate-dev/tollgate/controlplane/fault"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/pkg/credential"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
)

// Principal is an authenticated caller: a user, through either a session or an API key.
type Principal struct {
	User store.User
	// Session is set when the caller used a session token.
	Session *store.Session
	// APIKey and KeyMember are set when the caller used an API key: the key acts as the
	// member who created it, in that member's organization only.
	APIKey    *store.APIKey
	KeyMember *store.Member
}

// IsAPIKey tells whether the caller authenticated with an API key.
func (p *Principal) IsAPIKey() bool { return p.APIKey != nil }

// authenticate identifies the caller from x-api-key (tried first) or a bearer session.
// A present but bad credential is unauthorized even when another header would work:
// clients must not be able to probe keys by mixing headers.
func (c *Call) authenticate() (*Principal, error) {
	if raw, present := c.R.Header["X-Api-Key"]; present {
		key, ok := credential.APIKeyFromHeader(strings.Join(raw, ","))
		if !ok || len(raw) != 1 {
			return nil, fault.ErrUnauthorized
		}
		id, err := store.APIKeyByHash(c.Ctx, c.DB(), credential.Hash(key), c.now)
		if errors.Is(err, store.ErrNotFound) {
			return nil, fault.ErrUnauthorized
		}
		if err != nil {
			return nil, err
		}
		return &Principal{User: id.User, APIKey: &id.Key, KeyMember: &id.Member}, nil
	}
	if h := c.R.Header.Get("Authorization"); h != "" {
		tok, ok := credential.BearerFromHeader(h)
		if !ok {
			return nil, fault.ErrUnauthorized
		}
		sess, user, err := store.SessionByTokenHash(c.Ctx, c.DB(), credential.Hash(tok), c.now)
		if errors.Is(err, store.ErrNotFound) {
			return nil, fault.ErrUnauthorized
		}
		if err != nil {
			return nil, err
		}
		return &Principal{User: user, Session: &sess}, nil
	}
	return nil, fault.ErrUnauthorized
}

// orgHeader names the organization a session acts in; without it the session's active
// organization is used.
const orgHeader = "X-Service-Org-Id"

func errOrgNotFound() error {
	return fault.NotFoundf("organization_not_found", "Organization not found, or you are not a member of it.")
}

// resolveMember places the caller in the request's organization. An API key is bound to
// its own organization; a session picks one with X-Service-Org-Id or its active
// organization. A route that names the organization in its path (pathParam) takes it
// from there instead, for sessions and keys alike; a malformed id there is 400. Not
// being a member answers 404, so ids of other organizations never leak.
func (c *Call) resolveMember(pathParam string) (*store.Member, error) {
	p := c.Principal
	orgID := c.R.Header.Get(orgHeader)
	if pathParam != "" {
		orgID = c.Path(pathParam)
		if err := typeid.Check(orgID, typeid.Org); err != nil {
			return nil, fault.InvalidAt(err.Error(), pathParam)
		}
	}
	if p.IsAPIKey() {
		if orgID != "" && orgID != p.KeyMember.OrganizationID {
			return nil, errOrgNotFound()
		}
		return p.KeyMember, nil
	}
	if orgID == "" && p.User.ActiveOrganizationID != nil {
		orgID = *p.User.ActiveOrganizationID
	}
	if orgID == "" {
		return nil, fault.NotFoundf("organization_not_found",
			"No organization selected: send the %s header or set an active organization.", orgHeader)
	}
	m, err := store.ActiveMember(c.Ctx, c.DB(), orgID, p.User.ID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, errOrgNotFound()
	}
	return &m, err
}

// Role names.
const (
	RoleOwner  = "owner"
	RoleAdmin  = "admin"
	RoleMember = "member"
)

// managers may administer an organization.
var managers = []string{RoleOwner, RoleAdmin}

// IsManager tells whether a role may administer the organization.
func IsManager(role string) bool { return slices.Contains(managers, role) }

// normalizeEmail is the one comparison form of emails: trimmed and lower-cased.
func normalizeEmail(s string) string { return strings.ToLower(strings.TrimSpace(s)) }
