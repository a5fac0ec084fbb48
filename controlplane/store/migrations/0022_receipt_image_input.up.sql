-- oldest-reader: 0
-- The image parts of a receipt's input and cached input tokens, where the upstream
-- reported them (the Realtime API's input_token_details.image_tokens and
-- cached_tokens_details.image_tokens): a model whose catalog entry prices image input
-- apart (gpt-realtime, gpt-realtime-mini) charges that part at the image price and the
-- rest at the text price, so that a receipt says what its cost was priced from
-- (docs/accounting.md, "Image input tokens"). NULL: not reported (the split unknown: what
-- the reported parts leave priced at the dearer of text and image); receipts written before this
-- migration, or by a control plane older than it while an upgrade rolls out, read NULL.
-- Nullable columns without a default rewrite no row.
ALTER TABLE usage_receipts ADD COLUMN image_input_tokens bigint CHECK (image_input_tokens >= 0),
    ADD COLUMN cached_image_input_tokens bigint CHECK (cached_image_input_tokens >= 0);
