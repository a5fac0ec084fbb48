-- The charges stay: only the duration a receipt was priced from goes.
ALTER TABLE usage_receipts DROP COLUMN audio_input_millis;
