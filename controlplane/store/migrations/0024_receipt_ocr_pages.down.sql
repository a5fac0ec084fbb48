-- The charges stay: only the pages a receipt was priced for go.
ALTER TABLE usage_receipts DROP COLUMN ocr_pages;
