DROP TABLE organization_capability_overrides;
DROP INDEX organizations_newest;
DROP INDEX organizations_search_key_trgm;
ALTER TABLE organizations DROP COLUMN search_key;
-- pg_trgm stays: an extension is database-wide, other schemas may use it, and keeping it
-- is harmless (the up migration creates it only if missing).
