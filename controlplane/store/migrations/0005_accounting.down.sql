DROP TABLE usage_mirror_versions;
DROP TABLE usage_quarantined_settlements;
DROP TABLE usage_receipt_charges;
DROP TABLE usage_receipts;
DROP TABLE usage_request_starts;
