-- oldest-reader: 0
-- The organization's lists read their live rows in (created_at, id) order: GET
-- /v1/api-keys whole or in keyset pages (store.ListAPIKeys, ListAPIKeysPage). api_keys
-- had only api_keys_member (member_id), so the owners' and admins' list scanned every
-- key of every organization, revoked ones included (they are never deleted). An index
-- only: builds that do not know it read the table as before.
CREATE INDEX api_keys_org_live ON api_keys (organization_id, created_at, id) WHERE revoked_at IS NULL;
