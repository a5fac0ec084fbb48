DROP TABLE usage_model_prices;
DROP TABLE usage_reset_requests;
DROP TABLE usage_member_tracking;
DROP TABLE usage_buckets;
DROP TABLE usage_policy_assignments;
DROP TABLE usage_policy_limits;
DROP TABLE usage_policies;
