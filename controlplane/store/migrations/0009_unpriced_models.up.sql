-- What an organization does with models nobody priced (neither its own prices nor the
-- shipped catalog): 'charge' them the fallback price (no row: the default), or 'refuse'
-- them where the model is known at admission (the enforcer's request-body hook reads it
-- from the request). The enforcer learns the rule, and the organization's own price keys,
-- from the member records of the Redis mirror.
CREATE TABLE usage_unpriced_model_rules (
    organization_id text PRIMARY KEY REFERENCES organizations (id),
    action          text NOT NULL CHECK (action IN ('charge', 'refuse')),
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL
);
