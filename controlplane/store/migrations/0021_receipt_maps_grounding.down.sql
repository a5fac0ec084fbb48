-- The charges stay: only the count a receipt was priced from goes.
ALTER TABLE usage_receipts DROP COLUMN maps_grounded_prompts;
