-- Platform administration: the organization page's search and ordering indexes, and
-- per-organization capability overrides.

-- Substring search (ILIKE '%term%') can only use an index through trigrams. pg_trgm is a
-- trusted extension, so a database owner without superuser rights may create it.
CREATE EXTENSION IF NOT EXISTS pg_trgm;

-- search_key is what the admin page's search looks in: name, slug and id, lower-cased, one
-- per line. Keeping it as a stored column (rather than repeating an expression in the
-- index and in the query) means the query cannot drift away from the index and silently
-- stop using it, and a sequential scan reads it instead of lower-casing every row. The
-- query re-checks each column on its own, so a match spanning the line breaks never
-- counts.
ALTER TABLE organizations
    ADD COLUMN search_key text GENERATED ALWAYS AS (lower(name || E'\n' || slug || E'\n' || id)) STORED;
CREATE INDEX organizations_search_key_trgm ON organizations USING gin (search_key gin_trgm_ops);

-- The page is newest first with the id breaking ties. This index serves the order and
-- deep offsets as an index-only scan, and carries search_key so that a search can walk
-- it in page order and test each entry without visiting the table: whether the matches
-- are recent or old, finding a page costs at most one pass over the index.
CREATE INDEX organizations_newest ON organizations (created_at DESC, id DESC) INCLUDE (search_key);

-- A stored override wins over the capability's default; no row means the default. The
-- name is not checked against a list here: the catalogue (live and retired names) lives in
-- Go, and rows of names this release does not know must survive a rollback.
CREATE TABLE organization_capability_overrides (
    organization_id text NOT NULL REFERENCES organizations (id),
    capability      text NOT NULL,
    value           boolean NOT NULL,
    updated_at      timestamptz NOT NULL,
    -- user id of the platform administrator who last changed it
    updated_by      text NOT NULL,
    PRIMARY KEY (organization_id, capability)
);
