-- min_server: 24.1
-- Newer servers only (18.16 skips this migration; see 0012 for the
-- version): the operational logs expire by TTL. No billing invariant rests
-- on them:
-- - api_audit, every use of an API key, is kept 400 days (13 months: a
--   year's audit plus a month to run it);
-- - webhook_attempts, the delivery log, is kept 90 days: the dispatcher
--   looks back 7 days for undelivered events (internal/webhook), so an
--   attempt older than that never decides a delivery again.
-- ttl_only_drop_parts: rows are not rewritten out of a part; a part goes
-- when all its rows expired, so a row may stay up to a month (a monthly
-- partition) longer, and expiry costs no merge.
-- Never a TTL on usage_samples or usage_hourly (see 0012).
ALTER TABLE api_audit MODIFY SETTING ttl_only_drop_parts = 1;
ALTER TABLE api_audit MODIFY TTL at + INTERVAL 400 DAY;
ALTER TABLE webhook_attempts MODIFY SETTING ttl_only_drop_parts = 1;
ALTER TABLE webhook_attempts MODIFY TTL at + INTERVAL 90 DAY;
