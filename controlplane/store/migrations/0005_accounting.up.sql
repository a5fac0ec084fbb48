-- Accounting: durable write-ahead starts, receipts with their per-bucket charges,
-- quarantined settlements and the per-member version of the Redis mirror record. Money
-- is integer micro-USD (bigint); instants are timestamptz. The rules are in
-- ACCOUNTING.md; docs/accounting.md says how this schema implements them.
--
-- Lock order (every writer follows it, so batches never deadlock one another):
-- usage_request_starts (by request_id) -> usage_member_tracking (by member_id) ->
-- usage_buckets (by id) -> usage_mirror_versions (by member_id).

-- One row per admitted request, written before the request is forwarded (or, for a
-- settlement that arrives without a start, when it arrives). The admission snapshot is
-- kept whole: settlement charges its windows, never the windows of the settlement time.
CREATE TABLE usage_request_starts (
    request_id       text PRIMARY KEY,
    organization_id  text NOT NULL REFERENCES organizations (id),
    member_id        text NOT NULL REFERENCES members (id),
    -- the capture epoch the enforcer admitted under (0: before the tracking row existed)
    tracking_version bigint NOT NULL CHECK (tracking_version >= 0),
    admitted_at      timestamptz NOT NULL,
    -- version-2 snapshot: {"version", "admittedAtUnixMs", "trackingVersion", "buckets": [...]}
    snapshot         jsonb NOT NULL,
    -- pending: durable and counted in usage_member_tracking.pending_requests;
    -- settled: a receipt closed it; recovered: abandonment recovery closed it
    state            text NOT NULL CHECK (state IN ('pending', 'settled', 'recovered')),
    -- counted: the start was counted pending (false for events created by a settlement)
    counted          boolean NOT NULL,
    created_at       timestamptz NOT NULL,
    closed_at        timestamptz,
    CHECK ((state = 'pending') = (closed_at IS NULL)),
    CHECK (state <> 'pending' OR counted)
);
-- abandonment recovery lists pending starts by admission time; retention must see them
CREATE INDEX usage_request_starts_pending ON usage_request_starts (organization_id, admitted_at, request_id)
    WHERE state = 'pending';

-- One receipt per request: what was charged and why.
CREATE TABLE usage_receipts (
    request_id          text PRIMARY KEY REFERENCES usage_request_starts (request_id),
    organization_id     text NOT NULL REFERENCES organizations (id),
    member_id           text NOT NULL REFERENCES members (id),
    -- the cost charged in total (absolute), and where it came from
    cost_micro_usd      bigint NOT NULL CHECK (cost_micro_usd >= 0),
    cost_source         text NOT NULL CHECK (cost_source IN ('upstream', 'catalog_estimate', 'unknown')),
    model               text NOT NULL DEFAULT '',
    input_tokens        bigint NOT NULL DEFAULT 0 CHECK (input_tokens >= 0),
    output_tokens       bigint NOT NULL DEFAULT 0 CHECK (output_tokens >= 0),
    cached_input_tokens bigint NOT NULL DEFAULT 0 CHECK (cached_input_tokens >= 0),
    upstream_status     integer NOT NULL DEFAULT 0,
    -- complete: the response reported its full usage
    complete            boolean NOT NULL,
    -- settled: closed by a settlement; recovered: closed by abandonment recovery
    outcome             text NOT NULL CHECK (outcome IN ('settled', 'recovered')),
    -- set when a later known cost replaced an unknown or incomplete one (once)
    promoted_at         timestamptz,
    -- the operator's reference for a recovered receipt
    review_reference    text,
    finished_at         timestamptz,
    settled_at          timestamptz NOT NULL,
    updated_at          timestamptz NOT NULL
);
CREATE INDEX usage_receipts_member ON usage_receipts (member_id, settled_at);

-- What each receipt charged to each of its buckets, as an absolute amount: settling the
-- same request again compares against it, so a repeat charges nothing, a promotion
-- charges only the difference, and a reduction is refused.
CREATE TABLE usage_receipt_charges (
    request_id        text NOT NULL REFERENCES usage_receipts (request_id) ON DELETE CASCADE,
    bucket_id         text NOT NULL CHECK (bucket_id ~ '^[0-9a-f]{64}$'),
    timeframe         text NOT NULL CHECK (timeframe IN ('day', 'week', 'month')),
    window_start      timestamptz NOT NULL,
    charged_micro_usd bigint NOT NULL CHECK (charged_micro_usd >= 0),
    PRIMARY KEY (request_id, bucket_id)
);
CREATE INDEX usage_receipt_charges_bucket ON usage_receipt_charges (bucket_id);

-- Settlements that may not be charged: no durable start and no snapshot (rule 12), or a
-- snapshot from a capture epoch that was fenced off. Kept for an operator's reviewed
-- reconciliation; never charged.
CREATE TABLE usage_quarantined_settlements (
    request_id       text NOT NULL,
    reason           text NOT NULL CHECK (reason IN ('no_snapshot', 'epoch_changed', 'capture_suspended')),
    -- as the enforcer claimed them: not verified, not foreign keys
    organization_id  text NOT NULL,
    member_id        text NOT NULL,
    payload          jsonb NOT NULL,
    first_seen_at    timestamptz NOT NULL,
    last_seen_at     timestamptz NOT NULL,
    repeats          bigint NOT NULL DEFAULT 1,
    PRIMARY KEY (request_id, reason)
);

-- The version of a member's Redis record: bumped in the transaction of every change the
-- record reflects, read there, and written with the record after commit, so Redis never
-- lets an older state replace a newer one.
CREATE TABLE usage_mirror_versions (
    member_id text PRIMARY KEY REFERENCES members (id),
    version   bigint NOT NULL CHECK (version >= 1)
);
