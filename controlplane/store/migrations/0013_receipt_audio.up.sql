-- Input audio billed by duration (OpenAI's whisper-1: usage {"type": "duration",
-- "seconds"}), in milliseconds, so that a receipt of such a request says what its cost
-- was priced from, like its token counts (docs/prices.md, "Audio billed by the minute").
ALTER TABLE usage_receipts ADD COLUMN audio_input_millis bigint NOT NULL DEFAULT 0
    CHECK (audio_input_millis >= 0);
