-- The charges stay: only the guardrail checks' units a receipt was priced for go.
ALTER TABLE usage_receipts DROP COLUMN guardrail_checks_content_filter_units,
    DROP COLUMN guardrail_checks_prompt_attack_units, DROP COLUMN guardrail_checks_sensitive_information_units;
