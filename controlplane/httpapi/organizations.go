package httpapi

import (
	"errors"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/fault"
	"github.com/tollgate-dev/tollgate/controlplane/jsonx"
	"github.com/tollgate-dev/tollgate/controlplane/orgslug"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/pkg/credential"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
)

// invitationTTL is how long an invitation token can be accepted.
const invitationTTL = 7 * 24 * time.Hour

func (s *Server) createOrganization(c *Call) error {
	var in struct {
		Name *string `json:"name"`
		// Absent: derived from the name; null is refused (the OpenAPI type is string).
		Slug jsonx.Optional[string] `json:"slug"`
	}
	if err := c.Decode(&in); err != nil {
		return err
	}
	var p fault.Problems
	name := nameText(&p, in.Name, 1, 120, "name")
	explicitSlug := in.Slug.Set
	slug := ""
	if in.Slug.Null {
		p.Add("must be a string", "slug")
	} else if explicitSlug {
		slug = in.Slug.Value
		if err := orgslug.Check(slug); err != nil {
			p.Add(err.Error(), "slug")
		}
	}
	if err := p.Err(); err != nil {
		return err
	}
	if !explicitSlug {
		slug = orgslug.FromName(name)
	}
	org := store.Organization{ID: newID(typeid.Org), Name: name, Slug: slug, CreatedAt: c.now}
	owner := store.Member{ID: newID(typeid.Member), OrganizationID: org.ID, UserID: c.Principal.User.ID, Role: RoleOwner,
		CreatedAt: c.now, Name: c.Principal.User.Name, Email: c.Principal.User.Email}
	err := c.Tx(func(tx pgx.Tx) error {
		var err error
		org.Slug, err = orgslug.Claim(slug, !explicitSlug, func(slug string) error {
			o := org
			o.Slug = slug
			return store.CreateOrganization(c.Ctx, tx, o)
		})
		if err != nil {
			return err
		}
		if err := store.CreateMember(c.Ctx, tx, owner); err != nil {
			return err
		}
		// As acceptInvitation: on the user's row as it is now.
		if set, err := store.SetActiveOrganizationIfNone(c.Ctx, tx, owner.UserID, org.ID, c.now); err != nil {
			return err
		} else if set {
			s.activeOrganizationChanged(c, owner.UserID)
		}
		c.Member = &owner
		return c.Audit(tx, "organization.create", org.ID, map[string]any{"name": name, "slug": org.Slug})
	})
	if errors.Is(err, orgslug.ErrTaken) {
		return fault.Conflictf("slug_taken", "Another organization already uses this slug.")
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, map[string]any{"organization": viewOrganization(org), "member": viewMember(owner)})
}

func (s *Server) listOrganizations(c *Call) error {
	p := c.Principal
	var orgs []organizationView
	if p.IsAPIKey() {
		org, err := store.OrganizationByID(c.Ctx, c.DB(), p.KeyMember.OrganizationID)
		if err != nil {
			return err
		}
		orgs = []organizationView{viewOrganization(org)}
	} else {
		ms, err := store.MembershipsOfUser(c.Ctx, c.DB(), p.User.ID)
		if err != nil {
			return err
		}
		orgs = make([]organizationView, len(ms))
		for i, m := range ms {
			orgs[i] = viewOrganization(m.Organization)
		}
	}
	return c.JSON(http.StatusOK, map[string]any{"organizations": orgs})
}

func (s *Server) createInvitation(c *Call) error {
	var in struct {
		Email *string `json:"email"`
		Role  *string `json:"role"`
	}
	if err := c.Decode(&in); err != nil {
		return err
	}
	var p fault.Problems
	email := requiredEmail(&p, in.Email, "email")
	if in.Role == nil {
		p.Add("is required", "role")
	} else if *in.Role != RoleAdmin && *in.Role != RoleMember {
		p.Add("must be admin or member", "role")
	}
	if err := p.Err(); err != nil {
		return err
	}
	token, hash := credential.New("tgi_")
	inv := store.Invitation{ID: newID(typeid.Invitation), OrganizationID: c.OrgID(), EmailNormalized: email, Role: *in.Role,
		TokenHash: hash, InvitedByMemberID: c.Member.ID, CreatedAt: c.now, ExpiresAt: c.now.Add(invitationTTL)}
	err := c.Tx(func(tx pgx.Tx) error {
		if u, err := store.UserByEmail(c.Ctx, tx, email); err == nil {
			if _, err := store.ActiveMember(c.Ctx, tx, inv.OrganizationID, u.ID, store.NoLock); err == nil {
				return fault.Conflictf("already_member", "This person is already a member of the organization.")
			}
		}
		if err := store.CreateInvitation(c.Ctx, tx, inv); err != nil {
			return err
		}
		return c.Audit(tx, "invitation.create", inv.ID, map[string]any{"email": email, "role": inv.Role})
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, map[string]any{"invitation": invitationView{ID: inv.ID, OrganizationID: inv.OrganizationID,
		Email: email, Role: inv.Role, CreatedAt: jsonx.Time(inv.CreatedAt), ExpiresAt: jsonx.Time(inv.ExpiresAt)}, "token": token})
}

func errInvitationExpired() error {
	return fault.Conflictf("invitation_expired", "This invitation has expired; ask for a new one.")
}

// mayInvite tells whether a member of inviterRole may invite someone as role: owners
// and admins invite admins and members (POST /v1/invitations); only an owner could make
// an owner, and invitations never do.
func mayInvite(inviterRole, role string) bool {
	if role == RoleOwner {
		return inviterRole == RoleOwner
	}
	return IsManager(inviterRole)
}

// inviterStillMayInvite refuses an invitation whose inviter is no longer an active
// member whose role may invite its role (removed, or demoted below it): an invitation
// carries its inviter's authority, which ends with it. The answer is the expired
// invitation's, as for any invitation that can no longer be used. The inviter's row is
// read FOR SHARE, so a removal or demotion under way waits for the acceptance (and the
// new member is then theirs to remove), or commits first and is seen here.
func (c *Call) inviterStillMayInvite(tx pgx.Tx, inv store.Invitation) error {
	inviter, err := store.MemberInOrg(c.Ctx, tx, inv.OrganizationID, inv.InvitedByMemberID, store.ForShare)
	if errors.Is(err, store.ErrNotFound) || (err == nil && !mayInvite(inviter.Role, inv.Role)) {
		return errInvitationExpired()
	}
	return err
}

func errAlreadyMember() error {
	return fault.Conflictf("already_member", "You are already a member of this organization.")
}

func (s *Server) acceptInvitation(c *Call) error {
	var in struct {
		Token *string `json:"token"`
	}
	if err := c.Decode(&in); err != nil {
		return err
	}
	if in.Token == nil || *in.Token == "" {
		return fault.InvalidAt("is required", "token")
	}
	user := c.Principal.User
	var org store.Organization
	var member store.Member
	err := c.Tx(func(tx pgx.Tx) error {
		inv, err := store.InvitationByTokenHash(c.Ctx, tx, credential.Hash(*in.Token))
		if errors.Is(err, store.ErrNotFound) {
			return fault.NotFoundf("invitation_not_found", "No invitation matches this token.")
		}
		if err != nil {
			return err
		}
		switch {
		case inv.AcceptedAt != nil:
			return fault.Conflictf("invitation_used", "This invitation was already accepted.")
		case !c.now.Before(inv.ExpiresAt):
			return errInvitationExpired()
		}
		if err := c.inviterStillMayInvite(tx, inv); err != nil {
			return err
		}
		if inv.EmailNormalized != user.EmailNormalized {
			return fault.Forbiddenf("This invitation was sent to another email address.")
		}
		if _, err := store.ActiveMember(c.Ctx, tx, inv.OrganizationID, user.ID, store.NoLock); err == nil {
			return errAlreadyMember()
		}
		// A removal ends the invitations to the removed person issued before it: a
		// leftover one (a resend, or a second inviter's) would otherwise bring back,
		// uninvited, someone an owner or admin had just removed.
		if removed, err := store.RemovedSince(c.Ctx, tx, inv.OrganizationID, user.ID, inv.CreatedAt); err != nil {
			return err
		} else if removed {
			return errInvitationExpired()
		}
		if org, err = store.OrganizationByID(c.Ctx, tx, inv.OrganizationID); err != nil {
			return err
		}
		member = store.Member{ID: newID(typeid.Member), OrganizationID: org.ID, UserID: user.ID, Role: inv.Role,
			CreatedAt: c.now, Name: user.Name, Email: user.Email}
		// A concurrent acceptance of another invitation of this user may have joined
		// after the check above; the refusal rolls back, so this invitation stays unused.
		if err := store.CreateMember(c.Ctx, tx, member); errors.Is(err, store.ErrAlreadyMember) {
			return errAlreadyMember()
		} else if err != nil {
			return err
		}
		if err := store.AcceptInvitation(c.Ctx, tx, inv.ID, member.ID, c.now); err != nil {
			return err
		}
		// On the user's row as it is now, not as authentication read it: a removal from
		// their active organization committing meanwhile leaves them none, and this join
		// is then the one they act in.
		if set, err := store.SetActiveOrganizationIfNone(c.Ctx, tx, user.ID, org.ID, c.now); err != nil {
			return err
		} else if set {
			s.activeOrganizationChanged(c, user.ID)
		}
		c.Member = &member
		return c.Audit(tx, "invitation.accept", inv.ID, nil)
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"organization": viewOrganization(org), "member": viewMember(member)})
}
