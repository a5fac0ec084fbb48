-- The charges stay: only what a receipt's image model input was priced from goes.
ALTER TABLE usage_receipts DROP COLUMN image_tool_input_tokens, DROP COLUMN image_tool_cached_input_tokens;
