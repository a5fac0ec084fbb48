-- Members whose Redis record could not be written (Redis refused the write, or could not
-- be reached): the record there may be older than Postgres and must be rewritten before
-- the enforcers can trust it again. A row is written only when a record write fails (never
-- on the settlement path otherwise), and removed once a record at least as new as
-- `version` (the failed record's) is in Redis. Kept in Postgres, not in the control
-- plane's memory, so that a restarted control plane, or another one, repairs it
-- (docs/accounting.md, "The Redis mirror"). Number 0030 is skipped: it was a migration
-- since removed, and databases that applied it record version 30.
CREATE TABLE usage_mirror_repairs (
    member_id text PRIMARY KEY REFERENCES members (id),
    version   bigint NOT NULL
);
