-- The audio parts of a receipt's input and output tokens, where the upstream reported
-- them (OpenAI's audio_tokens, Gemini's AUDIO modality): a model whose catalog entry
-- prices audio tokens apart charges that part at the audio price and the rest at the
-- text price, so that a receipt says what its cost was priced from (docs/accounting.md,
-- "Audio tokens"). NULL: not reported (the split unknown, the whole class priced at the
-- dearer of the two); receipts written before this migration read NULL.
ALTER TABLE usage_receipts ADD COLUMN audio_input_tokens bigint CHECK (audio_input_tokens >= 0),
    ADD COLUMN audio_output_tokens bigint CHECK (audio_output_tokens >= 0);
