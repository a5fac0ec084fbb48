ALTER TABLE usage_receipts DROP CONSTRAINT usage_receipts_tier_flag;
ALTER TABLE usage_receipts DROP COLUMN service_tier;
