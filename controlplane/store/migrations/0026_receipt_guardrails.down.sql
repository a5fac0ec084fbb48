-- The charges stay: only the guardrail units a receipt was priced for go.
ALTER TABLE usage_receipts DROP COLUMN guardrail_content_text_units, DROP COLUMN guardrail_denied_topic_units,
    DROP COLUMN guardrail_sensitive_information_units, DROP COLUMN guardrail_contextual_grounding_units,
    DROP COLUMN guardrail_automated_reasoning_units, DROP COLUMN guardrail_content_images;
