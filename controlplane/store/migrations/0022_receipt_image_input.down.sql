-- The charges stay: only the counts a receipt was priced from go.
ALTER TABLE usage_receipts DROP COLUMN image_input_tokens, DROP COLUMN cached_image_input_tokens;
