-- oldest-reader: 0
-- A receipt that records a front door's own refusal (SettleItem.refused: the enforcer
-- answered the request itself, settled at a known 0) and not an answer. A proxy may not
-- apply the refusal (Envoy's request-body filter, failure_mode_allow, past its
-- message_timeout) and send the request upstream: the settlement of its answer then
-- promotes the receipt once (accounting.Decide), which clears the flag. Existing rows
-- are answers or refusals already final: false.
ALTER TABLE usage_receipts ADD COLUMN refused boolean NOT NULL DEFAULT false;
