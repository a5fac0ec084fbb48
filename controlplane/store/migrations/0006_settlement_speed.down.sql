ALTER TABLE usage_mirror_versions RESET (fillfactor);
ALTER TABLE usage_member_tracking RESET (fillfactor);
ALTER TABLE usage_buckets RESET (fillfactor);

ALTER TABLE usage_receipts
    ADD CONSTRAINT usage_receipts_organization_id_fkey FOREIGN KEY (organization_id) REFERENCES organizations (id),
    ADD CONSTRAINT usage_receipts_member_id_fkey FOREIGN KEY (member_id) REFERENCES members (id);
ALTER TABLE usage_request_starts
    ADD CONSTRAINT usage_request_starts_organization_id_fkey FOREIGN KEY (organization_id) REFERENCES organizations (id);

ALTER TABLE usage_buckets
    DROP CONSTRAINT usage_buckets_id_check,
    ADD CONSTRAINT usage_buckets_id_check CHECK (id ~ '^[0-9a-f]{64}$');

CREATE TABLE usage_receipt_charges (
    request_id        text NOT NULL REFERENCES usage_receipts (request_id) ON DELETE CASCADE,
    bucket_id         text NOT NULL CHECK (bucket_id ~ '^[0-9a-f]{64}$'),
    timeframe         text NOT NULL CHECK (timeframe IN ('day', 'week', 'month')),
    window_start      timestamptz NOT NULL,
    charged_micro_usd bigint NOT NULL CHECK (charged_micro_usd >= 0),
    PRIMARY KEY (request_id, bucket_id)
);
CREATE INDEX usage_receipt_charges_bucket ON usage_receipt_charges (bucket_id);

-- Every charged bucket has its counter row, which knows its timeframe and window.
INSERT INTO usage_receipt_charges (request_id, bucket_id, timeframe, window_start, charged_micro_usd)
SELECT r.request_id, c.bucket_id, b.timeframe, b.window_start, c.amount
FROM usage_receipts r
CROSS JOIN LATERAL unnest(r.charge_bucket_ids, r.charge_amounts_micro_usd) AS c(bucket_id, amount)
JOIN usage_buckets b ON b.id = c.bucket_id;

ALTER TABLE usage_receipts
    DROP COLUMN charge_bucket_ids,
    DROP COLUMN charge_amounts_micro_usd;
