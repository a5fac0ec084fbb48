-- Every charge stays: a reconciled receipt becomes a settled one of an upstream cost
-- (the closest kind before 0011), and a pruned snapshot an empty object.
ALTER TABLE usage_request_starts DROP CONSTRAINT usage_request_starts_pending_snapshot;
UPDATE usage_request_starts SET snapshot = '{}'::jsonb WHERE snapshot IS NULL;
ALTER TABLE usage_request_starts ALTER COLUMN snapshot SET NOT NULL;

UPDATE usage_receipts SET cost_source = 'upstream', cost_basis = 'upstream_cost', outcome = 'settled'
WHERE outcome = 'reconciled' OR cost_source = 'reconciled';
ALTER TABLE usage_receipts
    DROP COLUMN detail_pruned_at,
    DROP CONSTRAINT usage_receipts_outcome_check,
    ADD CONSTRAINT usage_receipts_outcome_check CHECK (outcome IN ('settled', 'recovered')),
    DROP CONSTRAINT usage_receipts_cost_basis_check,
    ADD CONSTRAINT usage_receipts_cost_basis_check CHECK (cost_basis IN ('upstream_cost', 'reported_usage', 'estimate', 'none')),
    DROP CONSTRAINT usage_receipts_cost_source_check,
    ADD CONSTRAINT usage_receipts_cost_source_check
        CHECK (cost_source IN ('upstream', 'catalog_estimate', 'fallback', 'unknown'));

DROP INDEX usage_quarantined_settlements_org;
ALTER TABLE usage_quarantined_settlements
    DROP CONSTRAINT usage_quarantined_settlements_reviewed,
    DROP COLUMN proven_cost_micro_usd,
    DROP COLUMN proven_member_id,
    DROP COLUMN proven_admitted_at,
    DROP COLUMN review_reference,
    DROP COLUMN reconciled_at;
