-- oldest-reader: 0
-- Prompts grounded with Google Maps made for a request (Gemini's googleMaps tool: 1 when
-- a candidate's groundingMetadata.groundingChunks[] held a maps source, however many,
-- else 0), billed apiece on top of the tokens and of any web searches, so that a receipt
-- says what its cost was priced from (docs/prices.md, "Grounding with Google Maps").
-- Receipts written before this migration, or by a control plane older than it while an
-- upgrade rolls out, read 0; adding the column with a constant default rewrites no row.
ALTER TABLE usage_receipts ADD COLUMN maps_grounded_prompts bigint NOT NULL DEFAULT 0
    CHECK (maps_grounded_prompts >= 0);
