ALTER TABLE usage_receipts DROP COLUMN refused;
