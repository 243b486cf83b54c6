-- Hourly rollup of deduplicated raw samples, written by the rollup job with
-- INSERT ... SELECT ... FROM usage_samples FINAL. A re-run writes the same
-- keys with a higher version, so reads with FINAL see the latest run.
CREATE TABLE IF NOT EXISTS usage_hourly (
    hour DateTime('UTC'),
    tenant String,
    department String,
    sku String,
    samples UInt64,
    gpu_microseconds UInt64,
    sm_active_microseconds UInt64,
    mem_mib_seconds UInt64,
    mem_peak_bytes UInt64,
    energy_millijoules UInt64,
    pcie_tx_bytes UInt64,
    pcie_rx_bytes UInt64,
    nvlink_tx_bytes UInt64,
    nvlink_rx_bytes UInt64,
    version UInt64
) ENGINE = ReplacingMergeTree(version)
PARTITION BY toYYYYMM(hour)
ORDER BY (tenant, hour, department, sku);
