package httpapi

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate-dev/tollgate/controlplane/entitlement"
	"github.com/tollgate-dev/tollgate/controlplane/store"
)

// The entitlement fence is package entitlement's; these run it inside a handler's
// transaction and, after commit, tell the enforcers (Events.EntitlementChanged).

// fenceChange runs change inside the fence (the caller holds the usage lock).
func (s *Server) fenceChange(c *Call, tx pgx.Tx, trigger string, change func() error) error {
	members, err := entitlement.Change(c.Ctx, tx, c, c.OrgID(), trigger, c.now, change)
	return s.entitlementChanged(c, tx, c.OrgID(), members, err)
}

// fenceTeamChange fences a member's team membership change, already written in tx.
func (s *Server) fenceTeamChange(c *Call, tx pgx.Tx, teamID, memberID string) error {
	if err := c.lockUsage(tx); err != nil { // TeamChange takes it too; the fence is decided now
		return err
	}
	members, err := entitlement.TeamChange(c.Ctx, tx, c, c.OrgID(), teamID, memberID, c.now)
	return s.entitlementChanged(c, tx, c.OrgID(), members, err)
}

// fenceMemberRemoved fences a member's removal, in its transaction.
func (s *Server) fenceMemberRemoved(c *Call, tx pgx.Tx, m store.Member) error {
	if err := c.lockUsage(tx); err != nil { // MemberRemoved takes it too; the fence is decided now
		return err
	}
	members, err := entitlement.MemberRemoved(c.Ctx, tx, c, m, c.now)
	return s.entitlementChanged(c, tx, m.OrganizationID, members, err)
}

// entitlementChanged schedules, unless err, the enforcer notification for members after
// the transaction commits. The members are also marked for a mirror repair in the
// transaction (store.MarkMirrorRepairs): the notification rewrites their records and
// clears the marks, and when it never comes (this process ends between the commit and
// the rewrite) a control plane's next maintenance round rewrites them from Postgres.
// Until 2026-12-07 nothing did: an approved extension, a policy edit or a removal
// reached the enforcers only with the member's next change, or the next day's records.
func (s *Server) entitlementChanged(c *Call, tx pgx.Tx, orgID string, members []string, err error) error {
	if err != nil || len(members) == 0 {
		return err
	}
	if err := store.MarkMirrorRepairs(c.Ctx, tx, store.AnyVersion(members)); err != nil {
		return err
	}
	ctx := context.WithoutCancel(c.Ctx)
	c.AfterCommit(func() { s.events.EntitlementChanged(ctx, orgID, members) })
	return nil
}
