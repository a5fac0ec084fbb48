-- Which speed tier a receipt's cost was priced at (docs/prices.md, "Service tiers"):
-- '' standard, 'fast' (OpenAI's priority or fast tier, Anthropic's fast mode) or
-- 'ultrafast' (OpenAI's), each at its model's own percent of the standard price since
-- this migration. priority_tier stays, true for either dear tier. The receipts priced at
-- the priority tier before it (priority_tier true) were priced as 'fast' is.
ALTER TABLE usage_receipts ADD COLUMN service_tier text NOT NULL DEFAULT ''
    CHECK (service_tier IN ('', 'fast', 'ultrafast'));
UPDATE usage_receipts SET service_tier = 'fast' WHERE priority_tier;
ALTER TABLE usage_receipts ADD CONSTRAINT usage_receipts_tier_flag CHECK (priority_tier = (service_tier <> ''));
