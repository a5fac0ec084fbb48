package httpapi

import (
	"github.com/tollgate-dev/tollgate/controlplane/jsonx"
	"github.com/tollgate-dev/tollgate/controlplane/store"
)

// The JSON shapes of the accounts resources, one constructor each, so every route
// renders a resource the same way.

type userView struct {
	ID        string     `json:"id"`
	Email     string     `json:"email"`
	Name      string     `json:"name"`
	CreatedAt jsonx.Time `json:"createdAt"`
}

func viewUser(u store.User) userView {
	return userView{ID: u.ID, Email: u.Email, Name: u.Name, CreatedAt: jsonx.Time(u.CreatedAt)}
}

type organizationView struct {
	ID        string     `json:"id"`
	Name      string     `json:"name"`
	Slug      string     `json:"slug"`
	CreatedAt jsonx.Time `json:"createdAt"`
}

func viewOrganization(o store.Organization) organizationView {
	return organizationView{ID: o.ID, Name: o.Name, Slug: o.Slug, CreatedAt: jsonx.Time(o.CreatedAt)}
}

type memberView struct {
	ID             string     `json:"id"`
	OrganizationID string     `json:"organizationId"`
	UserID         string     `json:"userId"`
	Name           string     `json:"name"`
	Email          string     `json:"email"`
	Role           string     `json:"role"`
	CreatedAt      jsonx.Time `json:"createdAt"`
}

func viewMember(m store.Member) memberView {
	return memberView{ID: m.ID, OrganizationID: m.OrganizationID, UserID: m.UserID, Name: m.Name, Email: m.Email,
		Role: m.Role, CreatedAt: jsonx.Time(m.CreatedAt)}
}

type membershipView struct {
	Organization organizationView `json:"organization"`
	Member       memberView       `json:"member"`
}

type teamView struct {
	ID        string     `json:"id"`
	Name      string     `json:"name"`
	MemberIDs []string   `json:"memberIds"`
	CreatedAt jsonx.Time `json:"createdAt"`
}

func viewTeam(t store.Team) teamView {
	ids := t.MemberIDs
	if ids == nil {
		ids = []string{}
	}
	return teamView{ID: t.ID, Name: t.Name, MemberIDs: ids, CreatedAt: jsonx.Time(t.CreatedAt)}
}

type apiKeyView struct {
	ID        string      `json:"id"`
	Name      string      `json:"name"`
	Start     string      `json:"start"`
	MemberID  string      `json:"memberId"`
	CreatedAt jsonx.Time  `json:"createdAt"`
	ExpiresAt *jsonx.Time `json:"expiresAt"`
}

func viewAPIKey(k store.APIKey) apiKeyView {
	return apiKeyView{ID: k.ID, Name: k.Name, Start: k.Start, MemberID: k.MemberID, CreatedAt: jsonx.Time(k.CreatedAt),
		ExpiresAt: jsonx.TimePtr(k.ExpiresAt)}
}

type invitationView struct {
	ID             string     `json:"id"`
	OrganizationID string     `json:"organizationId"`
	Email          string     `json:"email"`
	Role           string     `json:"role"`
	CreatedAt      jsonx.Time `json:"createdAt"`
	ExpiresAt      jsonx.Time `json:"expiresAt"`
}
