-- Where raw-sample retention has dropped data: hours before dropped_before
-- no longer have their raw samples, so the rollup must never recompute them
-- (a late sample there would replace a whole hour with a sliver).
CREATE TABLE IF NOT EXISTS raw_retention (
    table_name String,
    dropped_before DateTime('UTC'),
    version UInt64
) ENGINE = ReplacingMergeTree(version)
ORDER BY table_name;
