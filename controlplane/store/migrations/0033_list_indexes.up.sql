-- oldest-reader: 0
-- The organization's lists read their live rows in (created_at, id) order, whole or in
-- keyset pages. GET /v1/api-keys (store.ListAPIKeys, ListAPIKeysPage): api_keys had
-- only api_keys_member (member_id), so the owners' and admins' list scanned every key
-- of every organization, revoked ones included (they are never deleted). GET
-- /v1/members and GET /v1/teams (store.ListMembersPage, ListTeamsPage): a page of a
-- large organization reads its own rows only. Indexes only: builds that do not know
-- them read the tables as before. Created in the migration's transaction (not
-- CONCURRENTLY): they lock writes of their table while they build, which takes well
-- under a second at tens of thousands of rows.
CREATE INDEX api_keys_org_live ON api_keys (organization_id, created_at, id) WHERE revoked_at IS NULL;
CREATE INDEX members_org_live ON members (organization_id, created_at, id) WHERE removed_at IS NULL;
CREATE INDEX teams_org_live ON teams (organization_id, created_at, id) WHERE deleted_at IS NULL;
