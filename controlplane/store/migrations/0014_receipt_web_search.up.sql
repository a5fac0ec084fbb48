-- Web searches a provider's server tool made for a request (Anthropic's
-- usage.server_tool_use.web_search_requests), billed apiece on top of the tokens, so that
-- a receipt says what its cost was priced from (docs/prices.md, "Web searches").
ALTER TABLE usage_receipts ADD COLUMN web_search_requests bigint NOT NULL DEFAULT 0
    CHECK (web_search_requests >= 0);
