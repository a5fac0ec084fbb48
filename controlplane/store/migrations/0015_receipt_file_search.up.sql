-- Calls of a provider's file search tool made for a request (OpenAI's Responses API
-- output items of type file_search_call), billed apiece on top of the tokens, so that a
-- receipt says what its cost was priced from (docs/prices.md, "File searches").
ALTER TABLE usage_receipts ADD COLUMN file_search_calls bigint NOT NULL DEFAULT 0
    CHECK (file_search_calls >= 0);
