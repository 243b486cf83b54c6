-- Quota admissions (internal/quota, docs/ha.md): each part of an admission
-- the leader holds, written within 100 ms of the decision, and written
-- again at version 2 with released = 1 when its work shows up in the
-- measured usage. A new leader rebuilds the parts neither released nor
-- expired before its first decision. Rows past expires_at are never read.
CREATE TABLE IF NOT EXISTS quota_admissions (
    admission_id String,
    part UInt16,
    tenant String,
    department String,
    gpu_model String,
    gpus Decimal(38, 18),
    gpu_hours Decimal(38, 18),
    spend Decimal(38, 18),
    expires_at DateTime('UTC'),
    released UInt8,
    version UInt64
) ENGINE = ReplacingMergeTree(version)
ORDER BY (admission_id, part);
