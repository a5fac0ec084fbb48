-- The charges stay: only what a receipt's images were priced from goes.
ALTER TABLE usage_receipts DROP COLUMN image_generation_calls, DROP COLUMN image_model,
    DROP COLUMN image_output_tokens;
