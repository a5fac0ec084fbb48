package httpapi

import (
	"context"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/controlplane/usage"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// The entitlement fence. Every change that can change who wins a member's timeframe
// (policy edit, archive, restore, assign, unassign, team membership change, member
// removal) runs in one transaction that, for each member and timeframe whose winner
// changed, expires the member's pending extension requests for that timeframe and
// removes the current bucket's extension (never its spend). After commit the enforcers
// are told (Events.EntitlementChanged). All of it happens under the organization's usage
// lock (store.LockUsage), which approvals and submits take too, so a review can never
// act on a winner that a concurrent change is replacing.

// fenceChange runs change between two readings of the organization's entitlements and
// fences every active member whose winner changed. The caller holds the usage lock.
func (s *Server) fenceChange(c *Call, tx pgx.Tx, trigger string, change func() error) error {
	orgID := c.OrgID()
	before, err := store.LoadUsageOrg(c.Ctx, tx, orgID)
	if err != nil {
		return err
	}
	if err := change(); err != nil {
		return err
	}
	after, err := store.LoadUsageOrg(c.Ctx, tx, orgID)
	if err != nil {
		return err
	}
	// Policy and assignment changes leave team memberships alone, so the members read
	// after the change are the subjects of both readings.
	return s.applyFence(c, tx, orgID, trigger, usage.DiffAll(after.Members, before.Model, after.Model))
}

// fenceTeamChange runs after a member joined or left a team (or the team was deleted),
// inside that transaction. The change is already written, so the state before it is
// rebuilt by toggling the team in the member's current team list.
func (s *Server) fenceTeamChange(c *Call, tx pgx.Tx, teamID, memberID string) error {
	orgID := c.OrgID()
	if err := store.LockUsage(c.Ctx, tx, orgID); err != nil {
		return err
	}
	active, err := store.ActiveMemberExists(c.Ctx, tx, orgID, memberID)
	if err != nil || !active {
		return err
	}
	model, cur, err := store.LoadUsageMember(c.Ctx, tx, orgID, memberID, teamID)
	if err != nil {
		return err
	}
	was := usage.Subject{MemberID: memberID}
	if slices.Contains(cur.TeamIDs, teamID) {
		was.TeamIDs = slices.DeleteFunc(slices.Clone(cur.TeamIDs), func(t string) bool { return t == teamID })
	} else {
		was.TeamIDs = append(slices.Clone(cur.TeamIDs), teamID)
	}
	changes := usage.Diff(memberID, model.Winners(was), model.Winners(cur))
	return s.applyFence(c, tx, orgID, "team.change", changes)
}

// fenceMemberRemoved runs in the transaction that removes a member: whatever they had
// pending can no longer be approved, and their current buckets lose any extension.
func (s *Server) fenceMemberRemoved(c *Call, tx pgx.Tx, m store.Member) error {
	if err := store.LockUsage(c.Ctx, tx, m.OrganizationID); err != nil {
		return err
	}
	changes := make([]usage.Change, 0, len(window.Timeframes))
	for _, tf := range window.Timeframes {
		changes = append(changes, usage.Change{MemberID: m.ID, Timeframe: tf, Reason: usage.MemberRemoved})
	}
	return s.applyFence(c, tx, m.OrganizationID, "member.remove", changes)
}

// maxAuditMembers bounds the member ids copied into one fence audit record; an
// organization-wide change may touch thousands, and the count is always recorded.
const maxAuditMembers = 100

// applyFence expires pending requests and removes current-bucket extensions for the
// changed (member, timeframe) pairs, records what it did, and schedules the enforcer
// notification for after commit.
func (s *Server) applyFence(c *Call, tx pgx.Tx, orgID, trigger string, changes []usage.Change) error {
	if len(changes) == 0 {
		return nil
	}
	bucketIDs := make([]string, len(changes))
	var members []string
	for i, ch := range changes {
		bucketIDs[i] = window.BucketID(orgID, ch.MemberID, ch.Timeframe, window.Of(ch.Timeframe, c.now).Start)
		if len(members) == 0 || members[len(members)-1] != ch.MemberID {
			members = append(members, ch.MemberID)
		}
	}
	members = slices.Compact(slices.Sorted(slices.Values(members)))
	expired, err := store.ExpireUsageRequests(c.Ctx, tx, orgID, changes, c.now)
	if err != nil {
		return err
	}
	cleared, err := store.ClearUsageExtensions(c.Ctx, tx, bucketIDs, c.now)
	if err != nil {
		return err
	}
	listed := members
	if len(listed) > maxAuditMembers {
		listed = listed[:maxAuditMembers]
	}
	err = c.Audit(tx, "usage.fence", orgID, map[string]any{
		"trigger": trigger, "memberCount": len(members), "memberIds": listed, "changes": len(changes),
		"expiredRequestIds": nonNil(expired), "clearedExtensionBucketIds": nonNil(cleared),
	})
	if err != nil {
		return err
	}
	ctx := context.WithoutCancel(c.Ctx)
	c.AfterCommit(func() { s.events.EntitlementChanged(ctx, orgID, members) })
	return nil
}

func nonNil(ids []string) []string {
	if ids == nil {
		return []string{}
	}
	return ids
}
