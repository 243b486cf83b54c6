-- Bookkeeping of the hourly rollup job: hours before closed_through have
-- been rolled up at least once; samples inserted at or after watermark
-- (server time) have not been looked at yet. The row with the highest
-- version is current.
CREATE TABLE IF NOT EXISTS rollup_state (
    job String,
    closed_through DateTime('UTC'),
    watermark DateTime('UTC'),
    version UInt64
) ENGINE = ReplacingMergeTree(version)
ORDER BY job;

-- Billing periods that have been invoiced (closed). Raw-sample retention
-- never drops a month that is not in here. The invoice run writes it.
CREATE TABLE IF NOT EXISTS closed_periods (
    period_start Date,
    closed_at DateTime
) ENGINE = ReplacingMergeTree()
ORDER BY period_start;
