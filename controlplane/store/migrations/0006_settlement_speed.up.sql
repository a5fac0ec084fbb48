-- Settlement speed. A settlement used to write a receipt plus one usage_receipt_charges
-- row per bucket, each row evaluating a 64-character regular expression and a foreign key
-- query; those alone took about a third of Postgres's time under load
-- (docs/accounting.md, "Speed"). The rules do not change: every receipt still keeps the
-- absolute amount it charged each of its buckets, now as two parallel arrays on the
-- receipt itself (in the snapshot's order: day, week, month), rewritten with the receipt
-- in the same statement.

ALTER TABLE usage_receipts
    ADD COLUMN charge_bucket_ids text[] NOT NULL DEFAULT '{}',
    ADD COLUMN charge_amounts_micro_usd bigint[] NOT NULL DEFAULT '{}',
    ADD CONSTRAINT usage_receipts_charges_paired
        CHECK (cardinality(charge_bucket_ids) = cardinality(charge_amounts_micro_usd)),
    ADD CONSTRAINT usage_receipts_charges_not_negative
        CHECK (0 <= ALL (charge_amounts_micro_usd));

UPDATE usage_receipts r SET charge_bucket_ids = c.ids, charge_amounts_micro_usd = c.amounts
FROM (SELECT request_id,
        array_agg(bucket_id ORDER BY array_position(ARRAY['day', 'week', 'month'], timeframe)) AS ids,
        array_agg(charged_micro_usd ORDER BY array_position(ARRAY['day', 'week', 'month'], timeframe)) AS amounts
    FROM usage_receipt_charges GROUP BY request_id) c
WHERE c.request_id = r.request_id;

DROP TABLE usage_receipt_charges;

-- The same rule as before (64 lower-case hex digits) without the bounded-repetition
-- regular expression, which costs about 15 us per row and is evaluated on every counter
-- update, not only on insert.
ALTER TABLE usage_buckets
    DROP CONSTRAINT usage_buckets_id_check,
    ADD CONSTRAINT usage_buckets_id_check CHECK (octet_length(id) = 64 AND id !~ '[^0-9a-f]');

-- Foreign keys that prove nothing new on the two append-heavy tables: a start is inserted
-- only when its member is an active member of its organization (the insert checks it;
-- members.organization_id references organizations and members are never deleted), and
-- a receipt references its start, which carries its organization and member. Each of
-- these cost a query and a KEY SHARE row lock on the organization's row per row written.
ALTER TABLE usage_request_starts DROP CONSTRAINT usage_request_starts_organization_id_fkey;
ALTER TABLE usage_receipts
    DROP CONSTRAINT usage_receipts_organization_id_fkey,
    DROP CONSTRAINT usage_receipts_member_id_fkey;

-- Rows updated by every batch keep room on their page, so the update stays on the page
-- (a HOT update: no index entries, less WAL).
ALTER TABLE usage_buckets SET (fillfactor = 70);
ALTER TABLE usage_member_tracking SET (fillfactor = 70);
ALTER TABLE usage_mirror_versions SET (fillfactor = 70);
