-- The pages an OCR model read for a receipt's request (Mistral's OCR: its answer's
-- usage_info.pages_processed), billed by the page at the catalog's price
-- (docs/prices.md, "OCR billed by the page"). 0 for every other request, and for the
-- receipts written before this migration. A constant default rewrites no row.
ALTER TABLE usage_receipts ADD COLUMN ocr_pages bigint NOT NULL DEFAULT 0
    CHECK (ocr_pages >= 0);
