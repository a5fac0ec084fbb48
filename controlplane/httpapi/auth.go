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

// authenticate identifies the caller from x-api-key or a bearer session. Every
// credential present must be valid: a bad one is unauthorized even when the other header
// would work, so that nobody probes keys or tokens by mixing headers, and a stray header
// never goes unnoticed. With both valid, the API key is the caller (API.md: it is tried
// first).
func (c *Call) authenticate() (*Principal, error) {
	var p *Principal
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
		p = &Principal{User: id.User, APIKey: &id.Key, KeyMember: &id.Member}
	}
	if raw, present := c.R.Header["Authorization"]; present {
		if len(raw) != 1 {
			return nil, fault.ErrUnauthorized
		}
		tok, ok := credential.BearerFromHeader(raw[0])
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
		if p == nil {
			p = &Principal{User: user, Session: &sess}
		}
	}
	if p == nil {
		return nil, fault.ErrUnauthorized
	}
	return p, nil
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
	} else if !storableText(orgID) {
		// Not an id Postgres could even compare: it names no organization.
		return nil, errOrgNotFound()
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
	m, err := store.ActiveMember(c.Ctx, c.DB(), orgID, p.User.ID, store.NoLock)
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
