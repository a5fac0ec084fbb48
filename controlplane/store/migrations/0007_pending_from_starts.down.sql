ALTER TABLE usage_receipts ADD CONSTRAINT usage_receipts_request_id_fkey FOREIGN KEY (request_id) REFERENCES usage_request_starts (request_id);
ALTER TABLE usage_request_starts ADD CONSTRAINT usage_request_starts_member_id_fkey FOREIGN KEY (member_id) REFERENCES members (id);
ALTER TABLE usage_member_tracking ADD COLUMN pending_requests bigint NOT NULL DEFAULT 0 CHECK (pending_requests >= 0);
UPDATE usage_member_tracking t SET pending_requests = s.n
FROM (SELECT member_id, count(*) AS n FROM usage_request_starts WHERE state = 'pending' GROUP BY member_id) s
WHERE s.member_id = t.member_id;
DROP INDEX usage_request_starts_pending_member;
