-- The charges stay: only what a receipt's advisor was priced from goes.
ALTER TABLE usage_receipts DROP COLUMN advisor_model, DROP COLUMN advisor_input_tokens,
    DROP COLUMN advisor_output_tokens, DROP COLUMN advisor_cached_input_tokens,
    DROP COLUMN advisor_cache_creation_input_tokens;
