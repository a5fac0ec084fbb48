DROP TABLE usage_voided_requests;
