-- A receipt's cost may be priced at Amazon Bedrock's latency-optimized inference
-- (performanceConfig.latency "optimized", its answer's say), a quarter above the standard
-- prices (docs/prices.md, "Service tiers"): service_tier 'latency_optimized'. Its
-- priority_tier is true, as for every dear tier. Only the check widens: no row is
-- rewritten.
ALTER TABLE usage_receipts DROP CONSTRAINT usage_receipts_service_tier_check,
    ADD CONSTRAINT usage_receipts_service_tier_check
        CHECK (service_tier IN ('', 'fast', 'ultrafast', 'latency_optimized'));
