-- oldest-reader: 0
-- A marketplace's grants (store.MarketplaceGrants: every read of a marketplace and every
-- page of the list) are read by marketplace. marketplace_grants had only partial indexes,
-- one per kind of grant, none of which serves that read, so it scanned every grant of
-- every organization: 31-37 ms for a marketplace of one grant among 100,000. An index
-- only: builds that do not know it read as before. Created in the migration's
-- transaction (not CONCURRENTLY; the runner runs each migration in one): it holds off
-- writes of grants (rare, admins' changes) while it builds, well under a second at
-- 100,000 grants.
CREATE INDEX marketplace_grants_marketplace ON marketplace_grants (marketplace_id);
