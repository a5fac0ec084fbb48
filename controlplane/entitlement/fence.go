// Package entitlement owns the entitlement fence: every change that can change who wins
// a member's timeframe (policy edit, archive, restore, assign, unassign, team membership
// change, member removal) runs in one transaction that, for each member and timeframe
// whose winner changed or whose winning policy was edited, expires the member's pending
// extension requests for that timeframe and removes the current bucket's extension
// (never its spend), unless the same policy still wins with the same base
// (limits.Change.KeepExtension). All of it
// happens under the organization's usage lock (Lock), which extension submits and
// reviews take too (package extension), so a review can never act on a winner that a
// concurrent change is replacing.
//
// Functions take the transaction, their inputs and the instant; they record their audit
// event through the caller's Auditor and return the members whose entitlement changed.
// The caller tells the enforcers after commit (httpapi's Events.EntitlementChanged):
// notifying is not part of the transaction.
package entitlement

import (
	"context"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/limits"
	"github.com/tollgate-dev/tollgate/controlplane/store"
	"github.com/tollgate-dev/tollgate/pkg/window"
)

// Auditor records an audit event of the caller inside tx.
type Auditor interface {
	Audit(tx pgx.Tx, action, targetID string, details any) error
}

// Lock takes the organization's usage lock until tx ends. Every writer that reads
// winners and then writes based on them takes it first.
func Lock(ctx context.Context, tx pgx.Tx, orgID string) error { return store.LockUsage(ctx, tx, orgID) }

// Change runs change between two readings of the organization's entitlements and fences
// every active member whose winner changed. The caller holds the usage lock (Lock).
func Change(ctx context.Context, tx pgx.Tx, a Auditor, orgID, trigger string, now time.Time, change func() error) ([]string, error) {
	before, err := store.LoadUsageOrg(ctx, tx, orgID)
	if err != nil {
		return nil, err
	}
	if err := change(); err != nil {
		return nil, err
	}
	after, err := store.LoadUsageOrg(ctx, tx, orgID)
	if err != nil {
		return nil, err
	}
	// Policy and assignment changes leave team memberships alone, so the members read
	// after the change are the subjects of both readings.
	return apply(ctx, tx, a, orgID, trigger, limits.DiffAll(after.Members, before.Model, after.Model), now)
}

// TeamChange fences after a member joined or left a team (or the team was deleted),
// inside that transaction; it takes the usage lock. The change is already written, so
// the state before it is rebuilt by toggling the team in the member's current team list.
func TeamChange(ctx context.Context, tx pgx.Tx, a Auditor, orgID, teamID, memberID string, now time.Time) ([]string, error) {
	if err := Lock(ctx, tx, orgID); err != nil {
		return nil, err
	}
	active, err := store.ActiveMemberExists(ctx, tx, orgID, memberID)
	if err != nil || !active {
		return nil, err
	}
	model, cur, err := store.LoadUsageMember(ctx, tx, orgID, memberID, teamID)
	if err != nil {
		return nil, err
	}
	was := limits.Subject{MemberID: memberID}
	if slices.Contains(cur.TeamIDs, teamID) {
		was.TeamIDs = slices.DeleteFunc(slices.Clone(cur.TeamIDs), func(t string) bool { return t == teamID })
	} else {
		was.TeamIDs = append(slices.Clone(cur.TeamIDs), teamID)
	}
	return apply(ctx, tx, a, orgID, "team.change", limits.Diff(memberID, model.Winners(was), model.Winners(cur)), now)
}

// MemberRemoved fences in the transaction that removes a member (it takes the usage
// lock): whatever they had pending can no longer be approved, and their current buckets
// lose any extension.
func MemberRemoved(ctx context.Context, tx pgx.Tx, a Auditor, m store.Member, now time.Time) ([]string, error) {
	if err := Lock(ctx, tx, m.OrganizationID); err != nil {
		return nil, err
	}
	changes := make([]limits.Change, 0, len(window.Timeframes))
	for _, tf := range window.Timeframes {
		changes = append(changes, limits.Change{MemberID: m.ID, Timeframe: tf, Reason: limits.MemberRemoved})
	}
	return apply(ctx, tx, a, m.OrganizationID, "member.remove", changes, now)
}

// maxAuditMembers bounds the member ids copied into one fence audit record; an
// organization-wide change may touch thousands, and the count is always recorded.
const maxAuditMembers = 100

// apply expires pending requests for the changed (member, timeframe) pairs and removes
// their current-bucket extensions unless the change keeps them, records what it did,
// and returns the members touched (sorted): all of them, since the enforcers' records
// carry the winning policy's name, revision and flags, which changed even where the
// extension stays.
func apply(ctx context.Context, tx pgx.Tx, a Auditor, orgID, trigger string, changes []limits.Change, now time.Time) ([]string, error) {
	if len(changes) == 0 {
		return nil, nil
	}
	bucketIDs := make([]string, 0, len(changes))
	members := make([]string, 0, len(changes))
	for _, ch := range changes {
		if !ch.KeepExtension {
			bucketIDs = append(bucketIDs, window.BucketID(orgID, ch.MemberID, ch.Timeframe, window.Of(ch.Timeframe, now).Start))
		}
		members = append(members, ch.MemberID)
	}
	members = slices.Compact(slices.Sorted(slices.Values(members)))
	expired, err := store.ExpireUsageRequests(ctx, tx, orgID, changes, now)
	if err != nil {
		return nil, err
	}
	var cleared []string
	if len(bucketIDs) > 0 {
		if cleared, err = store.ClearUsageExtensions(ctx, tx, bucketIDs, now); err != nil {
			return nil, err
		}
	}
	listed := members
	if len(listed) > maxAuditMembers {
		listed = listed[:maxAuditMembers]
	}
	err = a.Audit(tx, "usage.fence", orgID, map[string]any{
		"trigger": trigger, "memberCount": len(members), "memberIds": listed, "changes": len(changes),
		"expiredRequestIds": nonNil(expired), "clearedExtensionBucketIds": nonNil(cleared),
	})
	if err != nil {
		return nil, err
	}
	return members, nil
}

func nonNil(ids []string) []string {
	if ids == nil {
		return []string{}
	}
	return ids
}
