DROP FUNCTION usage_saturating_add(bigint, bigint);
ALTER TABLE usage_member_tracking DROP COLUMN last_settlement_cost_basis, DROP COLUMN estimated_requests;

-- A fallback-priced receipt was unpriced and charged; before 0008 an unpriced receipt
-- is 'unknown' (its charge stays: spend never goes down, and the up file recognises it
-- by its cost). Estimated receipts become plain ones, their basis is not kept.
UPDATE usage_receipts SET cost_source = 'unknown' WHERE cost_source = 'fallback';
ALTER TABLE usage_receipts
    DROP COLUMN cache_creation_input_tokens,
    DROP COLUMN price_source,
    DROP COLUMN cost_basis,
    DROP CONSTRAINT usage_receipts_cost_source_check,
    ADD CONSTRAINT usage_receipts_cost_source_check CHECK (cost_source IN ('upstream', 'catalog_estimate', 'unknown'));

DROP TABLE usage_fallback_prices;

DROP INDEX usage_model_prices_key;
ALTER TABLE usage_model_prices DROP COLUMN match_key, DROP COLUMN cache_write_micro_usd_per_million;
