-- oldest-reader: 0
-- A void that found no start of its request (SettleItem.voided: the enforcer voids a
-- guarded start whose call failed) leaves a row here, so that the start, if its batch
-- writes it only afterwards (it waited for a connection, ran again after losing one, or
-- runs on another control plane), is removed as it is written instead of staying pending
-- with its reservation and its place under the member's cap until abandonment recovery
-- (docs/accounting.md, "Voided starts"). A void that found its start leaves none.
-- Retention deletes the rows voided before its cutoff. A table builds that do not know it
-- never read: they void as before.
CREATE TABLE usage_voided_requests (
    request_id      text PRIMARY KEY,
    organization_id text NOT NULL,
    member_id       text NOT NULL,
    voided_at       timestamptz NOT NULL
);
