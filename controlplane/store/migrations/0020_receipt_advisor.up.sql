-- oldest-reader: 0
-- The sub-inferences of Anthropic's advisor tool made for a request (the response's
-- usage.iterations[] entries of type advisor_message), left out of the response's
-- top-level counts and billed at the advisor model's prices: the advisor model and the
-- advisor's input tokens (its cache reads and writes included, as input_tokens is the
-- response's), output tokens, cache reads and cache writes, so that a receipt says what
-- its cost was priced from (docs/prices.md, "Anthropic's advisor tool").
-- advisor_model is '' on a receipt without them, or when the settlement did not name it
-- (they were then priced at the response's model's price). Receipts written before this
-- migration, or by a control plane older than it while an upgrade rolls out, read 0 and
-- ''; adding the columns with constant defaults rewrites no row.
ALTER TABLE usage_receipts ADD COLUMN advisor_model text NOT NULL DEFAULT '',
    ADD COLUMN advisor_input_tokens bigint NOT NULL DEFAULT 0
        CHECK (advisor_input_tokens >= 0),
    ADD COLUMN advisor_output_tokens bigint NOT NULL DEFAULT 0
        CHECK (advisor_output_tokens >= 0),
    ADD COLUMN advisor_cached_input_tokens bigint NOT NULL DEFAULT 0
        CHECK (advisor_cached_input_tokens >= 0),
    ADD COLUMN advisor_cache_creation_input_tokens bigint NOT NULL DEFAULT 0
        CHECK (advisor_cache_creation_input_tokens >= 0);
