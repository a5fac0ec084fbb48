-- The charges stay: only the count a receipt was priced from goes.
ALTER TABLE usage_receipts DROP COLUMN file_search_calls;
