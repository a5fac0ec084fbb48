package httpapi

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/fault"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/pkg/typeid"
)

func errMemberNotFound() error {
	return fault.NotFoundf("member_not_found", "No active member with this id in the organization.")
}

// listMembers answers the organization's active members: all of them, oldest first, or
// one page when the call asks for one (orgListPage).
func (s *Server) listMembers(c *Call) error {
	want := resetCursor{List: "members", Org: c.OrgID()}
	page, err := orgListPage(c, want)
	if err != nil {
		return err
	}
	if page != nil {
		ms, err := store.ListMembersPage(c.Ctx, c.DB(), c.OrgID(), *page)
		if err != nil {
			return err
		}
		return answerPage(c, "members", ms, page, want, func(m store.Member) (time.Time, string) { return m.CreatedAt, m.ID }, viewMember)
	}
	ms, err := store.ListMembers(c.Ctx, c.DB(), c.OrgID())
	if err != nil {
		return err
	}
	views := make([]memberView, len(ms))
	for i, m := range ms {
		views[i] = viewMember(m)
	}
	return c.JSON(http.StatusOK, map[string]any{"members": views})
}

// targetMember reads the member named in the path, locked for the transaction. The
// organization is locked first: a change of an owner locks every owner (CountOwners),
// and two changes each holding their own target could otherwise wait on each other's.
// Under that lock the caller's own membership is read again (managerNow).
func (c *Call) targetMember(tx pgx.Tx) (store.Member, error) {
	id, err := c.pathID("memberId", typeid.Member)
	if err != nil {
		return store.Member{}, err
	}
	if err := store.LockOrganization(c.Ctx, tx, c.OrgID()); err != nil {
		return store.Member{}, err
	}
	if err := c.managerNow(tx, store.NoLock); err != nil {
		return store.Member{}, err
	}
	m, err := store.MemberInOrg(c.Ctx, tx, c.OrgID(), id, store.ForNoKeyUpdate)
	if errors.Is(err, store.ErrNotFound) {
		return m, errMemberNotFound()
	}
	return m, err
}

// managerNow reads the caller's membership again inside tx, with lock (refreshCaller), and
// refuses them unless they are an owner or admin now. Authentication read it before,
// unlocked: a role change or removal may have committed in between. A role change or
// removal calls it once it holds the organization's lock, which every role change and
// removal takes first (targetMember), so what it reads holds until tx ends; without it an
// owner demoted (or removed) while their request waited for the lock still made someone
// an owner, changed roles or removed members with the authority they had just lost.
func (c *Call) managerNow(tx pgx.Tx, lock store.Lock) error {
	if err := c.refreshCaller(tx, lock); err != nil {
		return err
	}
	return c.requireManager()
}

// refreshCaller reads the caller's membership again inside tx, with lock, and holds them
// to the role they have now (c.Member.Role); a caller removed meanwhile is refused as at
// authentication. The writes that give lasting access (a marketplace's grants, a place in
// a team) read it FOR SHARE once they hold their own lock: a demotion or removal under
// way waits for them, or committed first and is seen here, so a demoted admin's request
// in flight cannot hand out access they no longer have the role to give.
func (c *Call) refreshCaller(tx pgx.Tx, lock store.Lock) error {
	m, err := store.MemberInOrg(c.Ctx, tx, c.OrgID(), c.Member.ID, lock)
	if errors.Is(err, store.ErrNotFound) {
		return errOrgNotFound()
	}
	if err != nil {
		return err
	}
	c.Member.Role = m.Role
	return nil
}

// requireManager refuses a caller who is not an owner or admin, as the route table's
// roles do.
func (c *Call) requireManager() error {
	if !IsManager(c.Member.Role) {
		return fault.Forbiddenf("Your role in this organization does not allow this action.")
	}
	return nil
}

// lockCaller reads the caller's membership again inside tx, FOR SHARE, for a handler
// that stores a row naming the caller which a removal cleans up. Authentication found
// the caller active outside any transaction; a removal may have committed since. Under
// the lock, a removal still to come waits for this transaction and then cleans up its
// row, and a removed caller is refused as at authentication.
func (c *Call) lockCaller(tx pgx.Tx) error {
	_, err := store.MemberInOrg(c.Ctx, tx, c.OrgID(), c.Member.ID, store.ForShare)
	if errors.Is(err, store.ErrNotFound) {
		return errOrgNotFound()
	}
	return err
}

// guardOwners refuses changes that only owners may make or that would leave the
// organization without an owner.
func (c *Call) guardOwners(tx pgx.Tx, target store.Member, newRole string) error {
	touchesOwner := target.Role == RoleOwner || newRole == RoleOwner
	if touchesOwner && c.Member.Role != RoleOwner {
		return fault.Forbiddenf("Only owners can grant, change or remove the owner role.")
	}
	if target.Role == RoleOwner && newRole != RoleOwner {
		n, err := store.CountOwners(c.Ctx, tx, c.OrgID())
		if err != nil {
			return err
		}
		if n <= 1 {
			return fault.Conflictf("last_owner", "An organization needs at least one owner; make someone else an owner first.")
		}
	}
	return nil
}

func (s *Server) updateMember(c *Call) error {
	var in struct {
		Role *string `json:"role"`
	}
	if err := c.Decode(&in); err != nil {
		return err
	}
	if in.Role == nil {
		return fault.InvalidAt("is required", "role")
	}
	if *in.Role != RoleOwner && *in.Role != RoleAdmin && *in.Role != RoleMember {
		return fault.InvalidAt("must be owner, admin or member", "role")
	}
	var target store.Member
	err := c.Tx(func(tx pgx.Tx) error {
		var err error
		if target, err = c.targetMember(tx); err != nil {
			return err
		}
		// The owner rule first, also for a PATCH that changes nothing: an admin who
		// sends an owner's own role touches the owner role too, and is refused as for
		// any other role (before, such a PATCH answered 200 as if it were allowed).
		if err := c.guardOwners(tx, target, *in.Role); err != nil {
			return err
		}
		if target.Role == *in.Role {
			return nil
		}
		if err := store.SetMemberRole(c.Ctx, tx, target.ID, *in.Role); err != nil {
			return err
		}
		from := target.Role
		target.Role = *in.Role
		return c.Audit(tx, "member.role", target.ID, map[string]any{"from": from, "to": target.Role})
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, viewMember(target))
}

func (s *Server) removeMember(c *Call) error {
	var target store.Member
	err := c.Tx(func(tx pgx.Tx) error {
		var err error
		if target, err = c.targetMember(tx); err != nil {
			return err
		}
		if err := c.guardOwners(tx, target, ""); err != nil {
			return err
		}
		removed, err := store.RemoveMember(c.Ctx, tx, target.ID, c.now)
		if err != nil {
			return err
		}
		if err := s.onMemberRemoved(c, tx, target); err != nil {
			return err
		}
		// A removed member drops out of every list: the event says who it was and what
		// the removal ended with them.
		return c.Audit(tx, "member.remove", target.ID, map[string]any{"userId": target.UserID, "name": target.Name,
			"email": target.Email, "role": target.Role, "revokedApiKeys": nonNil(removed.APIKeys), "teams": nonNil(removed.Teams)})
	})
	if err != nil {
		return err
	}
	// Not the request's context: a client that hangs up must not cancel the invalidation.
	s.events.CredentialsRevoked(context.WithoutCancel(c.Ctx), []string{target.ID}, nil)
	return c.NoContent()
}

// onMemberRemoved clears the removed user's active organization when it was this one,
// and runs the usage-limit entitlement fence (their pending extension requests expire,
// their current buckets lose any extension), all in the removal's transaction.
func (s *Server) onMemberRemoved(c *Call, tx pgx.Tx, target store.Member) error {
	// Only while it still names this organization, on the user's row as it is when the
	// update runs: a switch elsewhere committing after a read of it stays.
	if cleared, err := store.ClearActiveOrganization(c.Ctx, tx, target.UserID, target.OrganizationID, c.now); err != nil {
		return err
	} else if cleared {
		// The member invalidation covers the sessions cached as this member; this one
		// covers any cached otherwise (they now resolve to nobody).
		s.activeOrganizationChanged(c, target.UserID)
	}
	return s.fenceMemberRemoved(c, tx, target)
}

// nonNil is ids, or an empty list for none (a JSON [] rather than null).
func nonNil(ids []string) []string {
	if ids == nil {
		return []string{}
	}
	return ids
}
