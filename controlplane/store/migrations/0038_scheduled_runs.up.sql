-- oldest-reader: 0
-- When a scheduled job of serve (retention: TOLLGATE_RETENTION_INTERVAL) last began a
-- run, for every control plane of the deployment: a run is due once its interval has
-- passed since the last one began, whichever control plane began it and however often
-- they restarted since, and of the control planes that find it due at once one claims it
-- (docs/accounting.md, "Retention"). Until 2026-12-07 each control plane ran retention
-- one interval after it started and every interval after: one restarted more often than
-- the interval (a rollout, a rescheduled or autoscaled pod) never ran it, and N replicas
-- ran it N times per interval. A table builds that do not know it never read.
CREATE TABLE scheduled_runs (
    job        text PRIMARY KEY,
    started_at timestamptz NOT NULL
);
