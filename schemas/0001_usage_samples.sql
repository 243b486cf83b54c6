-- Raw usage samples, one row per consumer per GPU or MIG instance per
-- interval. ReplacingMergeTree over (tenant, start, sample_id): a sample
-- delivered twice (at-least-once shipping, replayed imports) collapses to one
-- row on merge, and every read that feeds money uses FINAL.
-- Sorting key holds plain columns only: 18.16 breaks FINAL on expressions.
-- Quantities are integers in fixed units so shares add up exactly:
-- GPU-microseconds, MiB-seconds, millijoules, bytes.
-- Times are DateTime('UTC') so that partitions (toYYYYMM) and hour/day
-- buckets are UTC months and hours whatever the server's time zone.
CREATE TABLE IF NOT EXISTS usage_samples (
    sample_id UInt64,
    host String,
    gpu_uuid String,
    gpu_model String,
    mig_uuid String,
    mig_profile String,
    sku String,
    tenant String,
    department String,
    workload String,
    start DateTime('UTC'),
    end DateTime('UTC'),
    gpu_microseconds UInt64,
    sm_active_microseconds UInt64,
    mem_mib_seconds UInt64,
    mem_peak_bytes UInt64,
    energy_millijoules UInt64,
    pcie_tx_bytes UInt64,
    pcie_rx_bytes UInt64,
    nvlink_tx_bytes UInt64,
    nvlink_rx_bytes UInt64,
    inserted_at DateTime('UTC') DEFAULT now()
) ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMM(start)
ORDER BY (tenant, start, sample_id);
