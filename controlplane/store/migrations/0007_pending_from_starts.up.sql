-- A member's pending requests are its starts in state 'pending', counted when read,
-- instead of a counter on its tracking row. Every start batch and every settlement
-- batch updated that row for each member in it, so a start batch waited for the
-- commit (and WAL flush) of any settlement batch sharing a member, and the reverse:
-- 1.5 ms per batch with 32 busy members. Starts now write nothing to the tracking row;
-- they only lock it against fence changes (KEY SHARE, see store.trackingLock). The
-- count cannot drift from the starts it counts, so "pending counted exactly once"
-- holds by construction. This index serves the count.
--
-- The counter is dropped only where the starts account for all of it (rule 15: a legacy
-- pending marker is never discarded before it is durably transferred). A counter above
-- its member's pending starts holds requests a legacy writer counted pending without a
-- durable start: the migration refuses, naming the members, until an operator has dealt
-- with them (settled them, or after review set the counter to the count of the
-- member's pending starts). Until 2026-12-07 it dropped the counter whatever it held.
DO $$
DECLARE
    marked text;
BEGIN
    SELECT string_agg(format('%s (%s counted, %s started)', t.member_id, t.pending_requests, coalesce(s.n, 0)), ', ' ORDER BY t.member_id)
    INTO marked
    FROM usage_member_tracking t
    LEFT JOIN (SELECT member_id, count(*) AS n FROM usage_request_starts WHERE state = 'pending' GROUP BY member_id) s
        ON s.member_id = t.member_id
    WHERE t.pending_requests > coalesce(s.n, 0);
    IF marked IS NOT NULL THEN
        RAISE EXCEPTION 'usage_member_tracking.pending_requests counts requests pending without a durable start (legacy pending markers), not dropped: %', marked
            USING HINT = 'Settle those requests, or after review set pending_requests to the count of the member''s pending starts, then migrate again (docs/accounting.md, "Retention").';
    END IF;
END
$$;
CREATE INDEX usage_request_starts_pending_member ON usage_request_starts (member_id) WHERE state = 'pending';
ALTER TABLE usage_member_tracking DROP COLUMN pending_requests;

-- The last two foreign keys on rows written for every request, which prove nothing the
-- writer has not already proven in the same transaction: a start is inserted only for an
-- active member of its organization (the insert checks it, and members are never
-- deleted), and a receipt is written only for a start the settlement holds locked (FOR
-- UPDATE; a start is deleted only while it has no receipt). Each cost a query per row
-- written. accountingtest.Check verifies both.
ALTER TABLE usage_request_starts DROP CONSTRAINT usage_request_starts_member_id_fkey;
ALTER TABLE usage_receipts DROP CONSTRAINT usage_receipts_request_id_fkey;
