-- min_server: 24.1
-- Newer servers only: 18.16 skips this migration (LowCardinality needs
-- allow_experimental_low_cardinality_type there, and it cannot alter the
-- type of a sorting-key column), and it applies after an upgrade. Each
-- feature used here exists since ClickHouse 20.x, but altering sorting-key
-- columns (tenant, department, sku) to LowCardinality is checked only on
-- 26.x (internal/chdbcheck); 24.1 is the oldest release the project
-- supports (DESIGN.md: production runs 24.x or newer).
--
-- Only storage changes: the same values, and every reader gets the same
-- results (LowCardinality(String) reads as String; internal/chdbcheck
-- compares the store's statements on this schema with 18.16's). Each
-- MODIFY COLUMN rewrites that column in every part (a mutation): on a
-- large table, run it off-peak.
--
-- Measured on the simulated DGX fleet (docs/operations.md, "Sizing"):
-- - strings whose values repeat become dictionaries: host, model, MIG
--   profile and UUID, SKU, tenant, department, and the GPU UUID and
--   workload (a GPU's workload changes with its jobs, not per sample);
-- - times: start is sorted within a tenant and end = start + interval, so
--   DoubleDelta leaves almost nothing for ZSTD; inserted_at keeps its
--   DEFAULT;
-- - counters: plain ZSTD(1). T64 before ZSTD, the usual advice for
--   integers, stored most of them in 6-55% more bytes here (meters vary
--   sample to sample), and ZSTD(3) saved about 2% more at a higher insert
--   cost;
-- - sample_id is a hash: no codec shrinks it, it keeps LZ4.
--
-- No TTL on usage_samples or usage_hourly, here or in any migration: a raw
-- month may be dropped only after it was invoiced (closed_periods), and
-- only by retention (internal/store/retention.go, docs/invoices.md), which
-- first records it in raw_dropped_months so that the rollup never
-- recomputes its hours from nothing. A TTL would drop uninvoiced usage
-- without that record. The hourly rollups are kept: invoices and their
-- corrections are derived from them.
ALTER TABLE usage_samples MODIFY COLUMN host LowCardinality(String);
ALTER TABLE usage_samples MODIFY COLUMN gpu_uuid LowCardinality(String);
ALTER TABLE usage_samples MODIFY COLUMN gpu_model LowCardinality(String);
ALTER TABLE usage_samples MODIFY COLUMN mig_uuid LowCardinality(String);
ALTER TABLE usage_samples MODIFY COLUMN mig_profile LowCardinality(String);
ALTER TABLE usage_samples MODIFY COLUMN sku LowCardinality(String);
ALTER TABLE usage_samples MODIFY COLUMN tenant LowCardinality(String);
ALTER TABLE usage_samples MODIFY COLUMN department LowCardinality(String);
ALTER TABLE usage_samples MODIFY COLUMN workload LowCardinality(String);
ALTER TABLE usage_samples MODIFY COLUMN start DateTime('UTC') CODEC(DoubleDelta, ZSTD(1));
ALTER TABLE usage_samples MODIFY COLUMN end DateTime('UTC') CODEC(DoubleDelta, ZSTD(1));
ALTER TABLE usage_samples MODIFY COLUMN inserted_at DateTime('UTC') DEFAULT now() CODEC(DoubleDelta, ZSTD(1));
ALTER TABLE usage_samples MODIFY COLUMN gpu_microseconds UInt64 CODEC(ZSTD(1));
ALTER TABLE usage_samples MODIFY COLUMN sm_active_microseconds UInt64 CODEC(ZSTD(1));
ALTER TABLE usage_samples MODIFY COLUMN mem_mib_seconds UInt64 CODEC(ZSTD(1));
ALTER TABLE usage_samples MODIFY COLUMN mem_peak_bytes UInt64 CODEC(ZSTD(1));
ALTER TABLE usage_samples MODIFY COLUMN energy_millijoules UInt64 CODEC(ZSTD(1));
ALTER TABLE usage_samples MODIFY COLUMN pcie_tx_bytes UInt64 CODEC(ZSTD(1));
ALTER TABLE usage_samples MODIFY COLUMN pcie_rx_bytes UInt64 CODEC(ZSTD(1));
ALTER TABLE usage_samples MODIFY COLUMN nvlink_tx_bytes UInt64 CODEC(ZSTD(1));
ALTER TABLE usage_samples MODIFY COLUMN nvlink_rx_bytes UInt64 CODEC(ZSTD(1));
ALTER TABLE usage_hourly MODIFY COLUMN tenant LowCardinality(String);
ALTER TABLE usage_hourly MODIFY COLUMN department LowCardinality(String);
ALTER TABLE usage_hourly MODIFY COLUMN sku LowCardinality(String);
ALTER TABLE usage_hourly MODIFY COLUMN hour DateTime('UTC') CODEC(DoubleDelta, ZSTD(1));
