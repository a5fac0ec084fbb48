DROP INDEX audit_events_platform;
DROP INDEX audit_events_org_action;
DROP INDEX audit_events_user;
DROP INDEX audit_events_org_member;
DROP INDEX audit_events_org;
CREATE INDEX audit_events_org ON audit_events (organization_id, occurred_at DESC);
