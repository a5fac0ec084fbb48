-- The in-flight guard of a usage policy (docs/usage-limits.md, "Bounded overshoot"):
-- reserve_in_flight makes admission count the reserved cost of the member's requests still
-- in flight next to settled spend, each reserved reservation_micro_usd unless the enforcer
-- knows its worst case; max_in_flight caps the member's requests in flight (null: no cap).
-- Both are checked by the control plane inside the durable start's transaction.
ALTER TABLE usage_policies
    ADD COLUMN reserve_in_flight     boolean NOT NULL DEFAULT false,
    ADD COLUMN reservation_micro_usd bigint  NOT NULL DEFAULT 0
        CHECK (reservation_micro_usd BETWEEN 0 AND 4503599627370495),
    ADD COLUMN max_in_flight         integer CHECK (max_in_flight BETWEEN 1 AND 100000);

-- What a pending start holds against its member's limits while in flight; it stops
-- counting when the start is settled or recovered (state leaves 'pending').
ALTER TABLE usage_request_starts
    ADD COLUMN reserved_micro_usd bigint NOT NULL DEFAULT 0 CHECK (reserved_micro_usd >= 0);
