-- oldest-reader: 0
-- The calls of OpenAI's image generation tool made for a request (Responses API output
-- items of type image_generation_call), each an image billed as its image model's output
-- tokens apart from the response's usage: the calls, the image model they ran, and the
-- image output tokens reported for them (0 with calls: each was charged the dearest
-- image, 6,240 tokens), so that a receipt says what its cost was priced from
-- (docs/prices.md, "OpenAI's image generation tool"). image_model is '' on a receipt
-- without calls. Receipts written before this migration, or by a control plane older
-- than it while an upgrade rolls out, read 0 and ''; adding the columns with constant
-- defaults rewrites no row.
ALTER TABLE usage_receipts ADD COLUMN image_generation_calls bigint NOT NULL DEFAULT 0
        CHECK (image_generation_calls >= 0),
    ADD COLUMN image_model text NOT NULL DEFAULT '',
    ADD COLUMN image_output_tokens bigint NOT NULL DEFAULT 0
        CHECK (image_output_tokens >= 0);
