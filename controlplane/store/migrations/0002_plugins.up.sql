-- Plugins, marketplaces, who may use a marketplace (grants), and which plugins a
-- marketplace distributes (memberships). Rows are never deleted: plugins are marked
-- deleted and memberships removed, so ids, creators and creation times survive.

CREATE TABLE plugins (
    id                    text PRIMARY KEY,
    organization_id       text NOT NULL REFERENCES organizations (id),
    name                  text NOT NULL,
    description           text,
    source_repository_url text,
    source_format         text CHECK (source_format IN ('agent-plugin', 'service-builtin',
        'service-extension-manifest', 'partner-a-plugin', 'partner-b-plugin', 'mcp-directory', 'manual')),
    source_schema_version text,
    status                text NOT NULL CHECK (status IN ('active', 'inactive', 'deleted', 'archived')),
    -- the extension manifest as the client sent it, unknown properties included; NULL when none
    manifest              jsonb CHECK (manifest IS NULL OR jsonb_typeof(manifest) = 'object'),
    created_by_member_id  text NOT NULL REFERENCES members (id),
    created_at            timestamptz NOT NULL,
    updated_at            timestamptz NOT NULL,
    deleted_at            timestamptz,
    -- deletion is the only way into (and there is no way out of) the deleted status
    CHECK ((status = 'deleted') = (deleted_at IS NOT NULL))
);
CREATE INDEX plugins_organization ON plugins (organization_id, created_at, id);

CREATE TABLE marketplaces (
    id                   text PRIMARY KEY,
    organization_id      text NOT NULL REFERENCES organizations (id),
    name                 text NOT NULL,
    created_by_member_id text NOT NULL REFERENCES members (id),
    created_at           timestamptz NOT NULL,
    updated_at           timestamptz NOT NULL
);
CREATE INDEX marketplaces_organization ON marketplaces (organization_id, created_at, id);

-- A grant gives a role on one marketplace to exactly one of: a member, a team, or every
-- member of the organization. Owners and admins need none: they manage every marketplace.
CREATE TABLE marketplace_grants (
    marketplace_id text NOT NULL REFERENCES marketplaces (id),
    member_id      text REFERENCES members (id),
    team_id        text REFERENCES teams (id),
    organization   boolean NOT NULL DEFAULT false,
    role           text NOT NULL CHECK (role IN ('viewer', 'editor', 'manager')),
    created_at     timestamptz NOT NULL,
    CHECK (num_nonnulls(member_id, team_id) + organization::int = 1)
);
CREATE UNIQUE INDEX marketplace_grants_one_per_member ON marketplace_grants (marketplace_id, member_id) WHERE member_id IS NOT NULL;
CREATE UNIQUE INDEX marketplace_grants_one_per_team ON marketplace_grants (marketplace_id, team_id) WHERE team_id IS NOT NULL;
CREATE UNIQUE INDEX marketplace_grants_one_organization ON marketplace_grants (marketplace_id) WHERE organization;
CREATE INDEX marketplace_grants_member ON marketplace_grants (member_id) WHERE member_id IS NOT NULL;
CREATE INDEX marketplace_grants_team ON marketplace_grants (team_id) WHERE team_id IS NOT NULL;

-- One row per (marketplace, plugin) for ever: removing sets removed_at, adding again
-- clears it, so the membership keeps its id and creation time. The unique constraint is
-- the conflict target of the add upsert.
CREATE TABLE marketplace_plugins (
    id                   text PRIMARY KEY,
    marketplace_id       text NOT NULL REFERENCES marketplaces (id),
    plugin_id            text NOT NULL REFERENCES plugins (id),
    membership_source    text NOT NULL CHECK (membership_source IN ('manual', 'connector', 'api', 'system')),
    created_by_member_id text REFERENCES members (id),
    created_at           timestamptz NOT NULL,
    removed_at           timestamptz,
    CONSTRAINT marketplace_plugins_pair UNIQUE (marketplace_id, plugin_id)
);
CREATE INDEX marketplace_plugins_plugin ON marketplace_plugins (plugin_id) WHERE removed_at IS NULL;
