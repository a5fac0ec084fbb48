-- The charges stay: only the counts a receipt was priced from go.
ALTER TABLE usage_receipts DROP COLUMN audio_input_tokens, DROP COLUMN audio_output_tokens;
