-- Which speed tier a receipt's cost was priced at (docs/prices.md, "Service tiers"):
-- '' standard, 'fast' (OpenAI's priority or fast tier, Anthropic's fast mode, Google's
-- and Bedrock's priority) or 'ultrafast' (OpenAI's), each at its model's own percent of
-- the standard price since this migration. priority_tier stays, true for either dear
-- tier. The receipts priced at the priority tier before it (priority_tier true) were
-- priced as 'fast' is. No check ties the two columns: while an upgrade rolls out, a
-- control plane older than this one still writes priority_tier alone (service_tier ''),
-- which reads as 'fast'.
ALTER TABLE usage_receipts ADD COLUMN service_tier text NOT NULL DEFAULT ''
    CHECK (service_tier IN ('', 'fast', 'ultrafast'));
UPDATE usage_receipts SET service_tier = 'fast' WHERE priority_tier;
