-- The raw-sample months retention dropped, as a set. Months are dropped out
-- of order (March invoiced and dropped while February is still open), so the
-- single high-water mark raw_retention.dropped_before also fenced off months
-- whose raw samples are all there. Retention records a month here before it
-- drops it; the rollup never recomputes an hour of a month in here.
CREATE TABLE IF NOT EXISTS raw_dropped_months (
    table_name String,
    month Date,
    recorded_at DateTime('UTC')
) ENGINE = ReplacingMergeTree()
ORDER BY (table_name, month);

-- Existing deployments, 1: retention raised raw_retention.dropped_before to
-- the end of every month it dropped, and it only ever dropped invoiced
-- months (closed_periods). So the months it may have dropped are the
-- invoiced months before that mark; a month before it that was never
-- invoiced still has all its raw samples and stays recomputable.
INSERT INTO raw_dropped_months (table_name, month, recorded_at)
SELECT DISTINCT 'usage_samples', toStartOfMonth(period_start), now()
FROM closed_periods
WHERE toStartOfMonth(period_start) < (
    SELECT toDate(max(dropped_before)) FROM raw_retention WHERE table_name = 'usage_samples');

-- Existing deployments, 2: retention before raw_retention existed recorded
-- nothing. A month with hourly rows but no raw partition lost its raw
-- samples, so it is recorded too.
INSERT INTO raw_dropped_months (table_name, month, recorded_at)
SELECT DISTINCT 'usage_samples', toStartOfMonth(hour), now()
FROM usage_hourly
WHERE toYYYYMM(hour) NOT IN (
    SELECT toUInt32(partition) FROM system.parts
    WHERE database = currentDatabase() AND table = 'usage_samples' AND active);
