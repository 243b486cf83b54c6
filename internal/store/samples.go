package store

import (
	"context"
	"fmt"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
)

// sampleColumns is the explicit column list of every usage_samples INSERT;
// inserted_at is left to its DEFAULT.
const sampleColumns = "sample_id, host, gpu_uuid, gpu_model, mig_uuid, mig_profile, sku, " +
	"tenant, department, workload, start, end, " +
	"gpu_microseconds, sm_active_microseconds, mem_mib_seconds, mem_peak_bytes, energy_millijoules, " +
	"pcie_tx_bytes, pcie_rx_bytes, nvlink_tx_bytes, nvlink_rx_bytes"

// MaxInsertRows caps one INSERT; larger calls are split.
const MaxInsertRows = 100_000

// InsertSamples writes samples in batches over the native protocol. Every
// sample is validated first; one bad sample rejects the call and nothing is
// sent. Inserting a sample twice is harmless: reads deduplicate by sample_id.
func (s *Store) InsertSamples(ctx context.Context, samples []collectors.Sample) error {
	for i := range samples {
		if err := samples[i].Validate(); err != nil {
			return fmt.Errorf("insert samples: sample %d (id %d): %w", i, samples[i].ID, err)
		}
	}
	for lo := 0; lo < len(samples); lo += MaxInsertRows {
		hi := min(lo+MaxInsertRows, len(samples))
		if err := s.insertBatch(ctx, samples[lo:hi]); err != nil {
			return fmt.Errorf("insert samples %d..%d of %d: %w", lo, hi, len(samples), err)
		}
	}
	return nil
}

func (s *Store) insertBatch(ctx context.Context, samples []collectors.Sample) error {
	batch, err := s.conn.PrepareBatch(ctx, "INSERT INTO usage_samples ("+sampleColumns+")")
	if err != nil {
		return fmt.Errorf("prepare batch: %w", err)
	}
	// Column-wise append: one slice per column is several times faster than
	// row-wise Append with its per-value reflection.
	n := len(samples)
	var (
		ids                                       = make([]uint64, n)
		hosts, gpus, models, migs, profiles, skus = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		tenants, depts, workloads                 = make([]string, n), make([]string, n), make([]string, n)
		starts, ends                              = make([]time.Time, n), make([]time.Time, n)
		gpuUS, smUS, memMiBs, memPeak, energy     = make([]uint64, n), make([]uint64, n), make([]uint64, n), make([]uint64, n), make([]uint64, n)
		pcieTx, pcieRx, nvlTx, nvlRx              = make([]uint64, n), make([]uint64, n), make([]uint64, n), make([]uint64, n)
	)
	for i := range samples {
		x := &samples[i]
		ids[i] = x.ID
		hosts[i], gpus[i], models[i], migs[i], profiles[i], skus[i] = x.Host, x.GPUUUID, x.GPUModel, x.MIGUUID, x.MIGProfile, x.SKU
		tenants[i], depts[i], workloads[i] = x.Tenant, x.Department, x.Workload
		starts[i], ends[i] = x.Start.UTC(), x.End.UTC()
		gpuUS[i], smUS[i], memMiBs[i], memPeak[i], energy[i] = x.GPUMicroseconds, x.SMActiveMicroseconds, x.MemMiBSeconds, x.MemPeakBytes, x.EnergyMillijoules
		pcieTx[i], pcieRx[i], nvlTx[i], nvlRx[i] = x.PCIeTxBytes, x.PCIeRxBytes, x.NVLinkTxBytes, x.NVLinkRxBytes
	}
	cols := []any{ids, hosts, gpus, models, migs, profiles, skus, tenants, depts, workloads, starts, ends,
		gpuUS, smUS, memMiBs, memPeak, energy, pcieTx, pcieRx, nvlTx, nvlRx}
	for i, col := range cols {
		if err := batch.Column(i).Append(col); err != nil {
			batch.Abort()
			return fmt.Errorf("append column %d: %w", i, err)
		}
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("send batch of %d rows: %w", n, err)
	}
	return nil
}
