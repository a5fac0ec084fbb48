-- The charges stay: only the container minutes a receipt was priced for, and their kind, go.
ALTER TABLE usage_receipts DROP COLUMN container_kind, DROP COLUMN container_minutes;
