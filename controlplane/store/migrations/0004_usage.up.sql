-- Gateway usage limits: policies and their limits, assignments, the member-period
-- counters ("buckets"), the member tracking rows (the capture fence), extension (reset)
-- requests and model prices. Money is integer micro-USD (bigint) everywhere; instants are
-- timestamptz. The rules are in ACCOUNTING.md.

CREATE TABLE usage_policies (
    id                  text PRIMARY KEY, -- ulp_ TypeID
    organization_id     text NOT NULL REFERENCES organizations (id),
    name                text NOT NULL,
    hard_limit          boolean NOT NULL,
    allow_request_reset boolean NOT NULL,
    -- starts at 1 and grows by one with every change of the policy itself (edit,
    -- archive, restore); 2^53-1 is the specification's bound, beyond it writes are refused
    revision            bigint NOT NULL CHECK (revision BETWEEN 1 AND 9007199254740991),
    created_at          timestamptz NOT NULL,
    updated_at          timestamptz NOT NULL,
    -- null while active; archived policies never win and cannot be edited or assigned
    archived_at         timestamptz
);
CREATE INDEX usage_policies_org ON usage_policies (organization_id, created_at, id);

CREATE TABLE usage_policy_limits (
    policy_id            text NOT NULL REFERENCES usage_policies (id) ON DELETE CASCADE,
    timeframe            text NOT NULL CHECK (timeframe IN ('day', 'week', 'month')),
    -- the base allowance; the bound keeps base + ceil(base/4) a safe JSON integer
    cost_limit_micro_usd bigint NOT NULL CHECK (cost_limit_micro_usd BETWEEN 0 AND 4503599627370495),
    PRIMARY KEY (policy_id, timeframe)
);

CREATE TABLE usage_policy_assignments (
    id              text PRIMARY KEY, -- ula_ TypeID
    organization_id text NOT NULL REFERENCES organizations (id),
    policy_id       text NOT NULL REFERENCES usage_policies (id) ON DELETE CASCADE,
    member_id       text REFERENCES members (id),
    team_id         text REFERENCES teams (id),
    organization    boolean NOT NULL DEFAULT false,
    created_at      timestamptz NOT NULL,
    -- exactly one target: a member, a team, or the whole organization
    CONSTRAINT usage_policy_assignments_one_target
        CHECK (num_nonnulls(member_id, team_id, nullif(organization, false)) = 1)
);
-- assigning the same target twice is a no-op: one row per (policy, target)
CREATE UNIQUE INDEX usage_policy_assignments_member ON usage_policy_assignments (policy_id, member_id) WHERE member_id IS NOT NULL;
CREATE UNIQUE INDEX usage_policy_assignments_team ON usage_policy_assignments (policy_id, team_id) WHERE team_id IS NOT NULL;
CREATE UNIQUE INDEX usage_policy_assignments_org ON usage_policy_assignments (policy_id) WHERE organization;
CREATE INDEX usage_policy_assignments_by_member ON usage_policy_assignments (member_id) WHERE member_id IS NOT NULL;
CREATE INDEX usage_policy_assignments_by_team ON usage_policy_assignments (team_id) WHERE team_id IS NOT NULL;

-- One member's counter for one window of one timeframe. The id is the deterministic
-- bucket id (lowercase hex SHA-256 of org/member/timeframe/windowStart), so every writer
-- agrees on it before the row exists. A missing row reads as zero.
CREATE TABLE usage_buckets (
    id                   text PRIMARY KEY CHECK (id ~ '^[0-9a-f]{64}$'),
    organization_id      text NOT NULL REFERENCES organizations (id),
    member_id            text NOT NULL REFERENCES members (id),
    timeframe            text NOT NULL CHECK (timeframe IN ('day', 'week', 'month')),
    window_start         timestamptz NOT NULL,
    window_end           timestamptz NOT NULL CHECK (window_end > window_start),
    -- settled spend charged to this window; never cleared by approvals or fences
    used_micro_usd       bigint NOT NULL DEFAULT 0 CHECK (used_micro_usd >= 0),
    -- the bucket's one granted extension (ceil(base/4)); 0 when none. The entitlement
    -- fence sets it back to 0 when the member's winner for the timeframe changes.
    extension_micro_usd  bigint NOT NULL DEFAULT 0 CHECK (extension_micro_usd >= 0),
    -- the approved request that granted the extension, and the winner it was granted under
    extension_request_id text,
    extension_policy_id  text,
    extension_policy_revision bigint,
    -- receipts of this window settled without a price, or without complete usage
    unpriced_requests    bigint NOT NULL DEFAULT 0 CHECK (unpriced_requests >= 0),
    incomplete_requests  bigint NOT NULL DEFAULT 0 CHECK (incomplete_requests >= 0),
    -- a counter carried over from a writer without durable tracking: its history is unknown
    legacy               boolean NOT NULL DEFAULT false,
    created_at           timestamptz NOT NULL,
    updated_at           timestamptz NOT NULL,
    UNIQUE (organization_id, member_id, timeframe, window_start)
);
CREATE INDEX usage_buckets_member ON usage_buckets (member_id, timeframe, window_start);

-- A member's durable tracking state: the capture fence (version, enabled) and what the
-- settlement pipeline has seen. Created by the first durable start (accounting); no row
-- means tracking has not started (coverage: version 0, capture on, pending null).
CREATE TABLE usage_member_tracking (
    member_id                  text PRIMARY KEY REFERENCES members (id),
    organization_id            text NOT NULL REFERENCES organizations (id),
    tracking_version           bigint NOT NULL CHECK (tracking_version >= 1),
    capture_enabled            boolean NOT NULL DEFAULT true,
    -- durable starts not yet settled
    pending_requests           bigint NOT NULL DEFAULT 0 CHECK (pending_requests >= 0),
    -- the durable tracking epoch: periods starting before it are historical-unknown
    tracking_started_at        timestamptz NOT NULL,
    last_settlement_at         timestamptz,
    last_settlement_request_id text,
    -- tracked settled receipts without a price / without complete usage
    unpriced_requests          bigint NOT NULL DEFAULT 0 CHECK (unpriced_requests >= 0),
    incomplete_requests        bigint NOT NULL DEFAULT 0 CHECK (incomplete_requests >= 0),
    created_at                 timestamptz NOT NULL,
    updated_at                 timestamptz NOT NULL
);
CREATE INDEX usage_member_tracking_org ON usage_member_tracking (organization_id);

-- Extension (reset) requests. The winner the member had when asking is copied in, so an
-- approval can tell whether it went stale.
CREATE TABLE usage_reset_requests (
    id                       text PRIMARY KEY, -- urr_ TypeID
    organization_id          text NOT NULL REFERENCES organizations (id),
    member_id                text NOT NULL REFERENCES members (id),
    bucket_id                text NOT NULL,
    timeframe                text NOT NULL CHECK (timeframe IN ('day', 'week', 'month')),
    window_start             timestamptz NOT NULL,
    window_end               timestamptz NOT NULL,
    policy_id                text NOT NULL REFERENCES usage_policies (id),
    policy_revision          bigint NOT NULL,
    base_allowance_micro_usd bigint NOT NULL CHECK (base_allowance_micro_usd > 0),
    -- ceil(base/4): what an approval grants
    extension_micro_usd      bigint NOT NULL CHECK (extension_micro_usd > 0),
    used_micro_usd           bigint NOT NULL CHECK (used_micro_usd >= 0),
    reason                   text NOT NULL,
    status                   text NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'expired')),
    created_at               timestamptz NOT NULL,
    decided_at               timestamptz,
    decided_by_member_id     text REFERENCES members (id),
    note                     text,
    -- why an expired request expired: window_ended, member_removed, winner_changed,
    -- policy_revision_changed
    expired_reason           text,
    CHECK ((status = 'pending') = (decided_at IS NULL))
);
-- at most one pending request per bucket: concurrent submits converge on one row
CREATE UNIQUE INDEX usage_reset_requests_one_pending ON usage_reset_requests (bucket_id) WHERE status = 'pending';
CREATE INDEX usage_reset_requests_org ON usage_reset_requests (organization_id, created_at, id);
CREATE INDEX usage_reset_requests_member ON usage_reset_requests (member_id, created_at, id);
CREATE INDEX usage_reset_requests_bucket ON usage_reset_requests (bucket_id, created_at);

-- Per-organization catalog prices used to estimate a cost when the upstream reports none.
CREATE TABLE usage_model_prices (
    organization_id                       text NOT NULL REFERENCES organizations (id),
    model                                 text NOT NULL,
    input_micro_usd_per_million           bigint NOT NULL CHECK (input_micro_usd_per_million >= 0),
    output_micro_usd_per_million          bigint NOT NULL CHECK (output_micro_usd_per_million >= 0),
    cached_input_micro_usd_per_million    bigint NOT NULL CHECK (cached_input_micro_usd_per_million >= 0),
    created_at                            timestamptz NOT NULL,
    updated_at                            timestamptz NOT NULL,
    PRIMARY KEY (organization_id, model)
);
