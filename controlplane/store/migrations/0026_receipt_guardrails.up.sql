-- oldest-reader: 0
-- What a receipt's request's Amazon Bedrock guardrails assessed, by billed policy: the
-- text units (up to 1,000 characters each) of its content filters, denied topics,
-- sensitive-information filters, contextual grounding checks and automated reasoning
-- checks, and the images of its image content filter. They are billed apart from the
-- model they guard, at the catalog's guardrail prices whatever priced the tokens
-- (docs/prices.md, "Amazon Bedrock's guardrails"); a request its guardrail blocked before
-- the model ran counts them and no token. 0 for every other request, and for the
-- receipts written before this migration or by a control plane older than it while an
-- upgrade rolls out; constant defaults rewrite no row.
ALTER TABLE usage_receipts ADD COLUMN guardrail_content_text_units bigint NOT NULL DEFAULT 0
        CHECK (guardrail_content_text_units >= 0),
    ADD COLUMN guardrail_denied_topic_units bigint NOT NULL DEFAULT 0
        CHECK (guardrail_denied_topic_units >= 0),
    ADD COLUMN guardrail_sensitive_information_units bigint NOT NULL DEFAULT 0
        CHECK (guardrail_sensitive_information_units >= 0),
    ADD COLUMN guardrail_contextual_grounding_units bigint NOT NULL DEFAULT 0
        CHECK (guardrail_contextual_grounding_units >= 0),
    ADD COLUMN guardrail_automated_reasoning_units bigint NOT NULL DEFAULT 0
        CHECK (guardrail_automated_reasoning_units >= 0),
    ADD COLUMN guardrail_content_images bigint NOT NULL DEFAULT 0
        CHECK (guardrail_content_images >= 0);
