-- oldest-reader: 0
-- The input of the image model OpenAI's image generation tool ran for a receipt's request
-- (the Responses API's tool_usage.image_gen: the prompt the response's model wrote for it
-- and any image it edits, text and image tokens, its cache reads included) and the cached
-- part of it, billed at the image model's input prices apart from the response's usage
-- (docs/prices.md, "OpenAI's image generation tool"). 0 for every other request, for one
-- whose answer did not report them, and for the receipts written before this migration or
-- by a control plane older than it while an upgrade rolls out; constant defaults rewrite
-- no row.
ALTER TABLE usage_receipts ADD COLUMN image_tool_input_tokens bigint NOT NULL DEFAULT 0
        CHECK (image_tool_input_tokens >= 0),
    ADD COLUMN image_tool_cached_input_tokens bigint NOT NULL DEFAULT 0
        CHECK (image_tool_cached_input_tokens >= 0);
