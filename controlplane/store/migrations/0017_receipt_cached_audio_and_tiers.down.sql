-- The charges stay: only what a receipt was priced from goes.
ALTER TABLE usage_receipts DROP COLUMN cached_audio_input_tokens, DROP COLUMN priority_tier, DROP COLUMN regional_endpoint;
