-- oldest-reader: 0
-- The minutes of the containers a receipt's request's code tools ran in (OpenAI's code
-- interpreter and hosted shell, Anthropic's code execution tool) that no earlier request
-- was charged, and the kind of container they were priced as (openai-1g ... openai-64g,
-- anthropic: the catalog's containers), billed by the time a container lives at the
-- catalog's price per hour whatever priced the tokens (docs/prices.md, "Containers").
-- container_kind is '' without minutes, or when the settlement named no kind the
-- control plane could read (they were then charged the catalog's dearest container).
-- Receipts written before this migration, or by a control plane older than it while an
-- upgrade rolls out, read '' and 0; constant defaults rewrite no row.
ALTER TABLE usage_receipts ADD COLUMN container_kind text NOT NULL DEFAULT ''
        CHECK (length(container_kind) <= 64),
    ADD COLUMN container_minutes bigint NOT NULL DEFAULT 0
        CHECK (container_minutes >= 0);
