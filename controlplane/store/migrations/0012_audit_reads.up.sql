-- The audit trail is read (GET /v1/organizations/{id}/audit-events, GET
-- /v1/admin/audit-events) newest first in pages ordered by (occurred_at, id), with
-- optional filters on the actor and the exact action. Each read shape gets an index
-- that serves its order, so a page costs its own rows whatever the trail's length:
-- the organization's trail (replacing the index without the id tie-break), by member,
-- by user (platform administrators and API keys act as users), by action, and the
-- platform's trail (events recorded without a member: platform administration).
DROP INDEX audit_events_org;
CREATE INDEX audit_events_org ON audit_events (organization_id, occurred_at DESC, id DESC);
CREATE INDEX audit_events_org_member ON audit_events (organization_id, actor_member_id, occurred_at DESC, id DESC)
    WHERE actor_member_id IS NOT NULL;
CREATE INDEX audit_events_user ON audit_events (actor_user_id, occurred_at DESC, id DESC)
    WHERE actor_user_id IS NOT NULL;
CREATE INDEX audit_events_org_action ON audit_events (organization_id, action, occurred_at DESC, id DESC);
CREATE INDEX audit_events_platform ON audit_events (occurred_at DESC, id DESC)
    WHERE actor_member_id IS NULL;
