-- oldest-reader: 0
-- A receipt's cost may be priced at the tier below standard (docs/prices.md, "Service
-- tiers"): service_tier 'flex', OpenAI's flex processing and Google's Flex PayGo and flex
-- inference, half the standard prices. Its priority_tier is false: it is no dear tier.
-- Only the check widens: no row is rewritten, and an older build writes what it wrote.
ALTER TABLE usage_receipts DROP CONSTRAINT usage_receipts_service_tier_check,
    ADD CONSTRAINT usage_receipts_service_tier_check
        CHECK (service_tier IN ('', 'fast', 'ultrafast', 'latency_optimized', 'flex'));
