-- The charges stay: only the host a receipt was priced for goes.
ALTER TABLE usage_receipts DROP COLUMN upstream_host;
