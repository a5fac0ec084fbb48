-- oldest-reader: 0
-- The host a receipt's request went to (api.groq.com), where the enforcer knew it: a model
-- several hosts serve at different prices is charged its host's own catalog price where
-- the catalog has one (docs/prices.md, "Groq, Cerebras, Together and Fireworks"), so that
-- a receipt says what its cost was priced from. NULL: not known (receipts written before
-- this migration, or by a control plane older than it while an upgrade rolls out, read
-- NULL too). A nullable column without a default rewrites no row.
ALTER TABLE usage_receipts ADD COLUMN upstream_host text CHECK (length(upstream_host) BETWEEN 1 AND 253);
