-- Retention and reviewed reconciliation (issue 22; docs/accounting.md, "Retention" and
-- "Reviewed reconciliation").
--
-- Reconciliation: a quarantined settlement (no snapshot, a fenced-off epoch, a fail-open
-- admission refused by the fence) stays in usage_quarantined_settlements for good; an
-- operator's reviewed reconciliation marks it (when, under which review reference, what
-- was proven) and charges the request once, through the settlement code, with a receipt
-- of its own kind: cost_source 'reconciled', cost_basis 'reviewed', outcome 'reconciled'.
ALTER TABLE usage_quarantined_settlements
    ADD COLUMN reconciled_at          timestamptz,
    ADD COLUMN review_reference       text,
    -- the proof the charge rests on: admission instant, member and charge
    ADD COLUMN proven_admitted_at     timestamptz,
    ADD COLUMN proven_member_id       text,
    ADD COLUMN proven_cost_micro_usd  bigint CHECK (proven_cost_micro_usd >= 0),
    ADD CONSTRAINT usage_quarantined_settlements_reviewed
        CHECK ((reconciled_at IS NULL) = (review_reference IS NULL));
-- the review list pages an organization's records oldest first
CREATE INDEX usage_quarantined_settlements_org ON usage_quarantined_settlements (organization_id, first_seen_at, request_id, reason);

ALTER TABLE usage_receipts
    DROP CONSTRAINT usage_receipts_cost_source_check,
    ADD CONSTRAINT usage_receipts_cost_source_check
        CHECK (cost_source IN ('upstream', 'catalog_estimate', 'fallback', 'unknown', 'reconciled')),
    DROP CONSTRAINT usage_receipts_cost_basis_check,
    ADD CONSTRAINT usage_receipts_cost_basis_check
        CHECK (cost_basis IN ('upstream_cost', 'reported_usage', 'estimate', 'none', 'reviewed')),
    DROP CONSTRAINT usage_receipts_outcome_check,
    ADD CONSTRAINT usage_receipts_outcome_check CHECK (outcome IN ('settled', 'recovered', 'reconciled')),
    -- retention cleared the receipt's raw detail (model name, token counts, upstream
    -- status, finished_at); its cost, sources, charges and review reference stay
    ADD COLUMN detail_pruned_at timestamptz;

-- Retention drops the raw admission snapshot of a start closed long ago (settlement
-- derives the charged windows from admitted_at, which stays); a pending start always
-- keeps it (recovery lists its windows).
ALTER TABLE usage_request_starts
    ALTER COLUMN snapshot DROP NOT NULL,
    ADD CONSTRAINT usage_request_starts_pending_snapshot CHECK (state <> 'pending' OR snapshot IS NOT NULL);
