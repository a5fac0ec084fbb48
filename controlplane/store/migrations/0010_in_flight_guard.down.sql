ALTER TABLE usage_request_starts DROP COLUMN reserved_micro_usd;
ALTER TABLE usage_policies
    DROP COLUMN max_in_flight,
    DROP COLUMN reservation_micro_usd,
    DROP COLUMN reserve_in_flight;
