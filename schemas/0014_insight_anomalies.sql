-- Anomalies found by internal/insights (docs/insights.md, "Anomalies"):
-- one row per step of a tenant's series far from its seasonal baseline.
-- anomaly_id is deterministic (a hash of tenant, meter, SKU, step and
-- start), so a re-run of detection (late data, a restart) writes the same
-- key and ReplacingMergeTree keeps one row: read with FINAL. The id fixes
-- start, so every copy of a row lies in the same partition.
-- Amounts are in the series' unit (GPU-hours, or the tenant's currency for
-- spend), exact decimals.
CREATE TABLE IF NOT EXISTS insight_anomalies (
    anomaly_id String,
    tenant String,
    meter String,
    sku String,
    step_seconds UInt32,
    start DateTime('UTC'),
    end DateTime('UTC'),
    direction String,
    observed Decimal(38, 9),
    expected Decimal(38, 9),
    spread Decimal(38, 9),
    score Float64,
    history UInt32,
    detected_at DateTime('UTC')
) ENGINE = ReplacingMergeTree()
PARTITION BY toYYYYMM(start)
ORDER BY anomaly_id;
