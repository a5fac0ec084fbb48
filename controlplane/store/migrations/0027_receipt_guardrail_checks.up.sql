-- oldest-reader: 0
-- What a receipt's request's Amazon Bedrock detect-only guardrail checks assessed
-- (InvokeGuardrailChecks: no guardrail and no model), by check: the text units (up to
-- 1,000 characters each) of its content filter, prompt attack and sensitive-information
-- checks. They are billed at the checks' own prices in the catalog, apart from a
-- guardrail's policies (migration 0026), whatever priced the tokens (docs/prices.md,
-- "Amazon Bedrock's guardrails"); a call of the checks counts them and no token. 0 for
-- every other request, and for the receipts written before this migration or by a
-- control plane older than it while an upgrade rolls out; constant defaults rewrite no
-- row.
ALTER TABLE usage_receipts ADD COLUMN guardrail_checks_content_filter_units bigint NOT NULL DEFAULT 0
        CHECK (guardrail_checks_content_filter_units >= 0),
    ADD COLUMN guardrail_checks_prompt_attack_units bigint NOT NULL DEFAULT 0
        CHECK (guardrail_checks_prompt_attack_units >= 0),
    ADD COLUMN guardrail_checks_sensitive_information_units bigint NOT NULL DEFAULT 0
        CHECK (guardrail_checks_sensitive_information_units >= 0);
