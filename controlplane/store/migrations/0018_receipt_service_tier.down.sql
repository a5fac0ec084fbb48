ALTER TABLE usage_receipts DROP COLUMN service_tier;
