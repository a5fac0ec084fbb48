-- Identities, organizations, membership, teams, API keys, the platform-admin allowlist
-- and the audit trail. Every id is a TypeID string; every instant a timestamptz.

CREATE TABLE users (
    id                     text PRIMARY KEY,
    email                  text NOT NULL,
    -- trimmed and lower-cased; the identity used for sign-in, invitations and the allowlist
    email_normalized       text NOT NULL UNIQUE,
    name                   text NOT NULL,
    password_hash          text NOT NULL,
    active_organization_id text,
    created_at             timestamptz NOT NULL,
    updated_at             timestamptz NOT NULL
);

CREATE TABLE sessions (
    id            text PRIMARY KEY,
    user_id       text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    -- SHA-256 of the token; the token itself is shown once and never stored
    token_hash    bytea NOT NULL UNIQUE,
    -- when the user last proved their password: marketplace writes need a fresh one
    authenticated_at timestamptz NOT NULL,
    created_at    timestamptz NOT NULL,
    expires_at    timestamptz NOT NULL,
    revoked_at    timestamptz
);
CREATE INDEX sessions_user ON sessions (user_id);

CREATE TABLE organizations (
    id         text PRIMARY KEY,
    name       text NOT NULL,
    slug       text NOT NULL UNIQUE,
    created_at timestamptz NOT NULL
);

CREATE TABLE members (
    id              text PRIMARY KEY,
    organization_id text NOT NULL REFERENCES organizations (id),
    user_id         text NOT NULL REFERENCES users (id),
    role            text NOT NULL CHECK (role IN ('owner', 'admin', 'member')),
    created_at      timestamptz NOT NULL,
    -- removal keeps the row (audit, provenance) and ends the membership
    removed_at      timestamptz
);
CREATE UNIQUE INDEX members_one_active_per_user ON members (organization_id, user_id) WHERE removed_at IS NULL;
CREATE INDEX members_user ON members (user_id) WHERE removed_at IS NULL;
CREATE INDEX members_organization ON members (organization_id) WHERE removed_at IS NULL;

CREATE TABLE invitations (
    id                 text PRIMARY KEY,
    organization_id    text NOT NULL REFERENCES organizations (id),
    email_normalized   text NOT NULL,
    role               text NOT NULL CHECK (role IN ('admin', 'member')),
    token_hash         bytea NOT NULL UNIQUE,
    invited_by_member_id text NOT NULL REFERENCES members (id),
    created_at         timestamptz NOT NULL,
    expires_at         timestamptz NOT NULL,
    accepted_at        timestamptz,
    accepted_member_id text REFERENCES members (id)
);

CREATE TABLE teams (
    id              text PRIMARY KEY,
    organization_id text NOT NULL REFERENCES organizations (id),
    name            text NOT NULL,
    created_at      timestamptz NOT NULL,
    -- deletion keeps the row so that audit records and provenance keep a name
    deleted_at      timestamptz
);
CREATE UNIQUE INDEX teams_name_per_org ON teams (organization_id, lower(name)) WHERE deleted_at IS NULL;

CREATE TABLE team_members (
    team_id    text NOT NULL REFERENCES teams (id),
    member_id  text NOT NULL REFERENCES members (id),
    created_at timestamptz NOT NULL,
    PRIMARY KEY (team_id, member_id)
);
CREATE INDEX team_members_member ON team_members (member_id);

CREATE TABLE api_keys (
    id              text PRIMARY KEY,
    organization_id text NOT NULL REFERENCES organizations (id),
    member_id       text NOT NULL REFERENCES members (id),
    user_id         text NOT NULL REFERENCES users (id),
    name            text NOT NULL,
    key_hash        bytea NOT NULL UNIQUE,
    -- the first characters of the key, shown so people can tell their keys apart
    start           text NOT NULL,
    created_at      timestamptz NOT NULL,
    expires_at      timestamptz,
    revoked_at      timestamptz
);
CREATE INDEX api_keys_member ON api_keys (member_id);

CREATE TABLE platform_admins (
    email_normalized text PRIMARY KEY,
    created_at       timestamptz NOT NULL,
    -- user id of who added it, or 'environment' / 'bootstrap'
    added_by         text NOT NULL
);

CREATE TABLE audit_events (
    id              text PRIMARY KEY,
    occurred_at     timestamptz NOT NULL,
    actor_user_id   text,
    actor_member_id text,
    organization_id text,
    action          text NOT NULL,
    target_id       text,
    details         jsonb NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX audit_events_org ON audit_events (organization_id, occurred_at DESC);
