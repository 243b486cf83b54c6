-- "Not supported is not zero": which meters the hardware did not report for
-- a sample (bit 1 SM activity, 2 energy, 4 PCIe, 8 NVLink; see
-- collectors.Unmeasured). Rollups keep, per meter, the GPU time that went
-- unmeasured, so a report can say how much of a total is real coverage.
ALTER TABLE usage_samples ADD COLUMN unmeasured UInt8 DEFAULT 0;
ALTER TABLE usage_hourly ADD COLUMN sm_unmeasured_microseconds UInt64 DEFAULT 0;
ALTER TABLE usage_hourly ADD COLUMN energy_unmeasured_microseconds UInt64 DEFAULT 0;
ALTER TABLE usage_hourly ADD COLUMN pcie_unmeasured_microseconds UInt64 DEFAULT 0;
ALTER TABLE usage_hourly ADD COLUMN nvlink_unmeasured_microseconds UInt64 DEFAULT 0;
