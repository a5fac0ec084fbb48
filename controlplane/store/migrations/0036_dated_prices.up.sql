-- oldest-reader: 0
-- An organization's own prices are dated: a request is charged at the prices in effect
-- when it finished, not when its settlement commits (a spool replayed after an outage, an
-- estimate promoted by its complete report, an identical report sent again after an
-- edit). The current prices stay in usage_model_prices and usage_fallback_prices (a
-- row's updated_at is when its prices took effect: it moves only when they change);
-- these tables keep the versions an edit replaced or removed, each in effect from
-- valid_from (null: since before prices were dated) until valid_until, the edit's time.
-- Settlement reads the version whose span holds the request's finish time; none (the
-- model was not priced by the organization then): the catalog's price, as for any
-- model the organization does not price. Rows are never deleted: they are a few per
-- price edit, and a settlement may come days late.
CREATE TABLE usage_model_price_versions (
    organization_id                    text NOT NULL REFERENCES organizations (id),
    model                              text NOT NULL,
    match_key                          text NOT NULL,
    input_micro_usd_per_million        bigint NOT NULL CHECK (input_micro_usd_per_million >= 0),
    output_micro_usd_per_million       bigint NOT NULL CHECK (output_micro_usd_per_million >= 0),
    cached_input_micro_usd_per_million bigint NOT NULL CHECK (cached_input_micro_usd_per_million >= 0),
    cache_write_micro_usd_per_million  bigint CHECK (cache_write_micro_usd_per_million >= 0),
    valid_from                         timestamptz,
    valid_until                        timestamptz NOT NULL,
    CHECK (valid_from < valid_until),
    PRIMARY KEY (organization_id, model, valid_until)
);
CREATE INDEX usage_model_price_versions_key ON usage_model_price_versions (organization_id, match_key);

CREATE TABLE usage_fallback_price_versions (
    organization_id                    text NOT NULL REFERENCES organizations (id),
    input_micro_usd_per_million        bigint NOT NULL CHECK (input_micro_usd_per_million >= 0),
    output_micro_usd_per_million       bigint NOT NULL CHECK (output_micro_usd_per_million >= 0),
    cached_input_micro_usd_per_million bigint NOT NULL CHECK (cached_input_micro_usd_per_million >= 0),
    cache_write_micro_usd_per_million  bigint CHECK (cache_write_micro_usd_per_million >= 0),
    valid_from                         timestamptz,
    valid_until                        timestamptz NOT NULL,
    CHECK (valid_from < valid_until),
    PRIMARY KEY (organization_id, valid_until)
);

-- What was in effect before a current row's last change is not known: until now every
-- request was charged the current price whenever it finished, and a request finished
-- before that change and settled from here on still is (a version with no start).
INSERT INTO usage_model_price_versions (organization_id, model, match_key, input_micro_usd_per_million,
        output_micro_usd_per_million, cached_input_micro_usd_per_million, cache_write_micro_usd_per_million,
        valid_from, valid_until)
    SELECT organization_id, model, match_key, input_micro_usd_per_million, output_micro_usd_per_million,
        cached_input_micro_usd_per_million, cache_write_micro_usd_per_million, NULL, updated_at
    FROM usage_model_prices;
INSERT INTO usage_fallback_price_versions (organization_id, input_micro_usd_per_million, output_micro_usd_per_million,
        cached_input_micro_usd_per_million, cache_write_micro_usd_per_million, valid_from, valid_until)
    SELECT organization_id, input_micro_usd_per_million, output_micro_usd_per_million,
        cached_input_micro_usd_per_million, cache_write_micro_usd_per_million, NULL, updated_at
    FROM usage_fallback_prices;
