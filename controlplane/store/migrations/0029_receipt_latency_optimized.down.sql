-- The receipts priced at the latency-optimized tier keep their charges; their tier reads
-- as 'fast', the dear tier the older schema knows (their priority_tier is already true).
UPDATE usage_receipts SET service_tier = 'fast' WHERE service_tier = 'latency_optimized';
ALTER TABLE usage_receipts DROP CONSTRAINT usage_receipts_service_tier_check,
    ADD CONSTRAINT usage_receipts_service_tier_check
        CHECK (service_tier IN ('', 'fast', 'ultrafast'));
