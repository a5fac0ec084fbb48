-- What else a receipt's cost was priced from: the audio part of its cached input tokens,
-- where the upstream reported it (Gemini's cacheTokensDetails, the Realtime API's
-- cached_tokens_details.audio_tokens; NULL: not reported, and the cached tokens of a model
-- that prices cached audio apart were all priced at the dearer of the two), and whether
-- the upstream ran it at its priority tier or on a cloud's regional endpoint, each of
-- which raises a catalog price (docs/accounting.md, "Audio tokens"; docs/prices.md). The
-- flags read false on receipts written before this migration, and adding them with a
-- constant default rewrites no row.
ALTER TABLE usage_receipts ADD COLUMN cached_audio_input_tokens bigint CHECK (cached_audio_input_tokens >= 0),
    ADD COLUMN priority_tier boolean NOT NULL DEFAULT false,
    ADD COLUMN regional_endpoint boolean NOT NULL DEFAULT false;
