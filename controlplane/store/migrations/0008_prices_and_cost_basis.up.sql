-- Every request is charged (issue 17). Prices: an organization's price may name a
-- cache-write price, and is matched by key (pricecatalog.Key: lower-case ASCII, without
-- any prefix up to a '/'), so "openai/GPT-4o" priced by an organization matches
-- "gpt-4o-2024-08-06" answered by an upstream the way the shipped catalog does. A model
-- nobody priced is charged at the organization's fallback price (a row here, else the
-- catalog's highest price of each token class). Receipts say how their cost was known
-- (cost_basis) and which price was used (price_source); fallback-priced receipts have
-- cost_source 'fallback' and count as unpriced.

ALTER TABLE usage_model_prices
    ADD COLUMN cache_write_micro_usd_per_million bigint CHECK (cache_write_micro_usd_per_million >= 0),
    ADD COLUMN match_key text;
-- The same key as pricecatalog.Key for names of at most 256 bytes (every stored name is
-- at most 200); later writes compute it in Go (store.ReplaceModelPrices).
UPDATE usage_model_prices
SET match_key = translate(regexp_replace(model, '^.*/', ''), 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz');
ALTER TABLE usage_model_prices ALTER COLUMN match_key SET NOT NULL;
CREATE INDEX usage_model_prices_key ON usage_model_prices (organization_id, match_key);

-- The price of tokens of models nobody priced, per organization; no row: the shipped
-- catalog's highest price of each token class. A null cache-write price prices cache
-- writes as input.
CREATE TABLE usage_fallback_prices (
    organization_id                    text PRIMARY KEY REFERENCES organizations (id),
    input_micro_usd_per_million        bigint NOT NULL CHECK (input_micro_usd_per_million >= 0),
    output_micro_usd_per_million       bigint NOT NULL CHECK (output_micro_usd_per_million >= 0),
    cached_input_micro_usd_per_million bigint NOT NULL CHECK (cached_input_micro_usd_per_million >= 0),
    cache_write_micro_usd_per_million  bigint CHECK (cache_write_micro_usd_per_million >= 0),
    created_at                         timestamptz NOT NULL,
    updated_at                         timestamptz NOT NULL
);

ALTER TABLE usage_receipts
    DROP CONSTRAINT usage_receipts_cost_source_check,
    ADD CONSTRAINT usage_receipts_cost_source_check
        CHECK (cost_source IN ('upstream', 'catalog_estimate', 'fallback', 'unknown')),
    -- how the cost was known: an upstream cost, token counts the upstream reported, token
    -- counts the enforcer estimated from the bytes it saw, or nothing (cost 0)
    ADD COLUMN cost_basis text NOT NULL DEFAULT 'none'
        CHECK (cost_basis IN ('upstream_cost', 'reported_usage', 'estimate', 'none')),
    -- the price the tokens were priced at; '' when none was used
    ADD COLUMN price_source text NOT NULL DEFAULT ''
        CHECK (price_source IN ('organization', 'catalog', 'fallback', '')),
    -- the part of input_tokens written to a prompt cache
    ADD COLUMN cache_creation_input_tokens bigint NOT NULL DEFAULT 0 CHECK (cache_creation_input_tokens >= 0);
-- Before this migration only an organization's own prices existed. An unknown receipt
-- with a cost was fallback-priced under this migration and came back down through its
-- down file (nothing else gives an unknown receipt a cost): it is fallback again.
UPDATE usage_receipts SET cost_basis = 'upstream_cost' WHERE cost_source = 'upstream';
UPDATE usage_receipts SET cost_basis = 'reported_usage', price_source = 'organization' WHERE cost_source = 'catalog_estimate';
UPDATE usage_receipts SET cost_source = 'fallback', cost_basis = 'reported_usage', price_source = 'fallback'
WHERE cost_source = 'unknown' AND cost_micro_usd > 0;

ALTER TABLE usage_member_tracking
    -- tracked settled receipts whose tokens were estimated by the enforcer
    ADD COLUMN estimated_requests bigint NOT NULL DEFAULT 0 CHECK (estimated_requests >= 0),
    -- the cost basis of the receipt named by last_settlement_request_id
    ADD COLUMN last_settlement_cost_basis text;
UPDATE usage_member_tracking t SET last_settlement_cost_basis = r.cost_basis
FROM usage_receipts r WHERE r.request_id = t.last_settlement_request_id;

-- Counter additions saturate instead of failing the statement: a settlement batch is
-- never refused because a counter would overflow (the ledger bounds every cost, so
-- reaching the bound takes absurd inputs; refusing would leave requests uncharged). A
-- sum above 2^63-1 stays there; a count never goes below 0.
CREATE FUNCTION usage_saturating_add(a bigint, d bigint) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN CASE WHEN d > 0 AND a > 9223372036854775807 - d THEN 9223372036854775807 ELSE greatest(a + d, 0) END;
