-- The receipts priced at the flex tier keep their charges; their tier reads as '',
-- standard, which the older schema knows (their priority_tier is already false).
UPDATE usage_receipts SET service_tier = '' WHERE service_tier = 'flex';
ALTER TABLE usage_receipts DROP CONSTRAINT usage_receipts_service_tier_check,
    ADD CONSTRAINT usage_receipts_service_tier_check
        CHECK (service_tier IN ('', 'fast', 'ultrafast', 'latency_optimized'));
