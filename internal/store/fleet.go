package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpumeter/gpumeter/internal/partition"
)

// FleetQuery reads the fleet's current MIG layout for the partition
// planner from the newest usage samples: each GPU's newest interval lists
// its MIG instances (mig_uuid, mig_profile) and who holds them (tenant).
type FleetQuery struct {
	// Window bounds how stale a GPU may be: a GPU belongs to the fleet when
	// its newest sample starts at most Window before the newest sample of
	// all. GPUs that stopped reporting drop out.
	Window time.Duration
}

// Validate reports every problem with the query.
func (q FleetQuery) Validate() error {
	if q.Window <= 0 {
		return errors.New("window: must be positive")
	}
	return nil
}

// toSQL selects the samples of every GPU's newest interval since since.
// Duplicates (at-least-once delivery) are harmless here and collapse in
// partition.FleetFromSamples, so the read skips FINAL. GLOBAL IN: on a
// cluster, a GPU's samples lie on every shard and its newest interval is
// the cluster's, computed once on the initiator (a plain IN over two
// Distributed tables is refused).
func (q FleetQuery) toSQL(since time.Time) (string, []any) {
	return "SELECT host, gpu_uuid, gpu_model, mig_uuid, mig_profile, tenant FROM usage_samples" +
			" WHERE start >= ? AND (gpu_uuid, start) GLOBAL IN" +
			" (SELECT gpu_uuid, max(start) FROM usage_samples WHERE start >= ? GROUP BY gpu_uuid)" +
			" ORDER BY gpu_uuid, mig_uuid, tenant",
		[]any{since.UTC(), since.UTC()}
}

// FleetSamples reads what the partition planner builds the fleet from
// (partition.FleetFromSamples): the samples of every GPU's newest interval
// within the window. The planner's rules (busy when held, models with MIG
// tables only) live there; the store only loads rows.
func (s *Store) FleetSamples(ctx context.Context, q FleetQuery) ([]partition.DeviceSample, error) {
	if err := q.Validate(); err != nil {
		return nil, fmt.Errorf("fleet query: %w", err)
	}
	var newest time.Time
	if err := s.conn.QueryRow(ctx, "SELECT max(start) FROM usage_samples").Scan(&newest); err != nil {
		return nil, fmt.Errorf("fleet query: newest sample: %w", err)
	}
	sql, args := q.toSQL(newest.Add(-q.Window))
	return queryAll(ctx, s, "fleet query", sql, args, func(scan scanFunc) (partition.DeviceSample, error) {
		var r partition.DeviceSample
		err := scan(&r.Host, &r.GPUUUID, &r.GPUModel, &r.MIGUUID, &r.MIGProfile, &r.Tenant)
		return r, err
	})
}
