// Package marketplace owns who may change a marketplace: the caller's rank on it (the
// best of their grants, or manager for owners and admins) against the rank a change
// needs, and the replacement of its access list, which locks the marketplace first so
// that the rank it reads cannot be revoked by a concurrent change of the same list
// before this one is written. Functions take the transaction (or a querier for reads),
// their inputs and the instant, and return typed errors (package fault).
package marketplace

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/fault"
	"github.com/tollgate-dev/tollgate/controlplane/store"
)

// ErrNotFound is the 404 of a marketplace the caller cannot find: missing, in another
// organization, or (on reads) without any grant reaching them.
func ErrNotFound() error {
	return fault.NotFoundf("marketplace_not_found", "No marketplace with this id in the organization, or you have no access to it.")
}

// ForWrite reads a marketplace of the organization and checks the viewer's rank on it:
// need is a store.Rank*, what names the change in the 403's message. A marketplace of
// the organization that the viewer may not change is 403 whatever their rank, none
// included: the specification's 404 is for a marketplace that does not exist in the
// caller's organization, its 403 for a caller who lacks the permission to edit. Ids of
// other organizations stay 404, indistinguishable from ids that name nothing.
func ForWrite(ctx context.Context, q store.Querier, orgID, id string, v store.Viewer, need int, what string) (store.Marketplace, error) {
	m, err := store.MarketplaceInOrg(ctx, q, orgID, id, v)
	if errors.Is(err, store.ErrNotFound) {
		return m, ErrNotFound()
	}
	if err != nil {
		return m, err
	}
	if m.Rank < need {
		return m, fault.Forbiddenf("%s needs the %s role on this marketplace.", what, store.RoleOfRank(need))
	}
	return m, nil
}

// ForPluginWrite is ForWrite for a change of the marketplace's plugins (add, remove). It
// first takes the marketplace's shared lock, which ReplaceAccess's lock excludes: a
// replacement of the grants that began before waits to commit and the rank is read
// after it, and one that begins later waits for this change. Without it an editor whose
// grant was being revoked could still add a plugin after the revocation began. viewer
// is asked for once that lock is held, as in ReplaceAccess: the caller's role is the one
// they have then (an admin demoted or removed while the write waited is refused).
func ForPluginWrite(ctx context.Context, tx pgx.Tx, orgID, id string, viewer func() (store.Viewer, error), need int, what string) (store.Marketplace, error) {
	if err := store.ShareMarketplace(ctx, tx, orgID, id); err != nil {
		return store.Marketplace{}, err
	}
	v, err := viewer()
	if err != nil {
		return store.Marketplace{}, err
	}
	if err := shareTeams(ctx, tx, v); err != nil {
		return store.Marketplace{}, err
	}
	return ForWrite(ctx, tx, orgID, id, v, need, what)
}

// shareTeams holds, for a member whose rank comes from grants, the team memberships
// those grants may reach them through (store.ShareMemberTeams), so that a removal from a
// team under way is waited for before the rank is read. Owners and admins need none.
func shareTeams(ctx context.Context, tx pgx.Tx, v store.Viewer) error {
	if v.All {
		return nil
	}
	return store.ShareMemberTeams(ctx, tx, v.MemberID)
}

// ReplaceAccess makes the marketplace's access list exactly grants, for a viewer who
// manages it. viewer is asked for once the marketplace is locked, so that the caller's
// role is the one they have then (a caller demoted or removed meanwhile can no longer
// hand out access), and may refuse. allowed runs after the rank check (the caller's own conditions, such as a
// fresh sign-in) and may refuse. Grants to members and teams that are not (or no longer)
// in the organization are 400 with their paths. It returns the list it replaced (the
// grants whose member or team still existed, as reads show them), read under the lock,
// for the caller's audit record.
func ReplaceAccess(ctx context.Context, tx pgx.Tx, orgID, id string, viewer func() (store.Viewer, error),
	grants []store.Grant, now time.Time, allowed func() error) (store.Marketplace, []store.Grant, error) {
	if err := store.LockMarketplace(ctx, tx, orgID, id); err != nil {
		return store.Marketplace{}, nil, err
	}
	v, err := viewer()
	if err != nil {
		return store.Marketplace{}, nil, err
	}
	if err := shareTeams(ctx, tx, v); err != nil {
		return store.Marketplace{}, nil, err
	}
	m, err := ForWrite(ctx, tx, orgID, id, v, store.RankManager, "Changing who may use a marketplace")
	if err != nil {
		return m, nil, err
	}
	if err := allowed(); err != nil {
		return m, nil, err
	}
	if err := CheckTargets(ctx, tx, orgID, grants); err != nil {
		return m, nil, err
	}
	before, err := store.MarketplaceGrants(ctx, tx, []string{m.ID})
	if err != nil {
		return m, nil, err
	}
	if err := store.ReplaceGrants(ctx, tx, m.ID, grants); err != nil {
		return m, nil, err
	}
	return m, before[m.ID], store.TouchMarketplace(ctx, tx, m.ID, now)
}

// CheckTargets refuses grants to members and teams that are not (or no longer) in the
// organization.
func CheckTargets(ctx context.Context, q store.Querier, orgID string, grants []store.Grant) error {
	var memberIDs, teamIDs []string
	for _, g := range grants {
		if g.MemberID != nil {
			memberIDs = append(memberIDs, *g.MemberID)
		}
		if g.TeamID != nil {
			teamIDs = append(teamIDs, *g.TeamID)
		}
	}
	members, err := store.ActiveMemberIDs(ctx, q, orgID, memberIDs)
	if err != nil {
		return err
	}
	teams, err := store.LiveTeamIDs(ctx, q, orgID, teamIDs)
	if err != nil {
		return err
	}
	var p fault.Problems
	for i, g := range grants {
		if g.MemberID != nil && !members[*g.MemberID] {
			p.Add("is not an active member of the organization", "grants", i, "memberId")
		}
		if g.TeamID != nil && !teams[*g.TeamID] {
			p.Add("is not a team of the organization", "grants", i, "teamId")
		}
	}
	return p.Err()
}
