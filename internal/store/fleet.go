package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpumeter/gpumeter/internal/migprofile"
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
// fleetFromRows, so the read skips FINAL.
func (q FleetQuery) toSQL(since time.Time) (string, []any) {
	return "SELECT host, gpu_uuid, gpu_model, mig_uuid, mig_profile, tenant FROM usage_samples" +
			" WHERE start >= ? AND (gpu_uuid, start) IN" +
			" (SELECT gpu_uuid, max(start) FROM usage_samples WHERE start >= ? GROUP BY gpu_uuid)" +
			" ORDER BY gpu_uuid, mig_uuid, tenant",
		[]any{since.UTC(), since.UTC()}
}

type fleetRow struct {
	host, gpu, model, mig, profile, tenant string
}

// Fleet reads the current fleet. Samples carry no placements, so every
// instance comes back with an unknown start for the planner to infer. GPUs
// of models outside the MIG tables are left out. A MIG GPU with no
// instances at all reports like a whole GPU and comes back MIG-disabled.
func (s *Store) Fleet(ctx context.Context, q FleetQuery) (partition.Fleet, error) {
	if err := q.Validate(); err != nil {
		return partition.Fleet{}, fmt.Errorf("fleet query: %w", err)
	}
	var newest time.Time
	if err := s.conn.QueryRow(ctx, "SELECT max(start) FROM usage_samples").Scan(&newest); err != nil {
		return partition.Fleet{}, fmt.Errorf("fleet query: newest sample: %w", err)
	}
	sql, args := q.toSQL(newest.Add(-q.Window))
	rows, err := s.conn.Query(ctx, sql, args...)
	if err != nil {
		return partition.Fleet{}, fmt.Errorf("fleet query: %w", err)
	}
	defer rows.Close()
	var rs []fleetRow
	for rows.Next() {
		var r fleetRow
		if err := rows.Scan(&r.host, &r.gpu, &r.model, &r.mig, &r.profile, &r.tenant); err != nil {
			return partition.Fleet{}, fmt.Errorf("fleet query: scan: %w", err)
		}
		rs = append(rs, r)
	}
	if err := rows.Err(); err != nil {
		return partition.Fleet{}, fmt.Errorf("fleet query: %w", err)
	}
	fleet, skipped := fleetFromRows(rs)
	if skipped > 0 {
		s.logger.Debug("fleet: GPUs of models without MIG tables left out", "gpus", skipped)
	}
	return fleet, nil
}

// fleetFromRows assembles GPUs from rows ordered by GPU and MIG UUID. An
// instance any tenant holds is busy: a pod or job has it, so the planner
// must not take it away. It returns how many GPUs it left out.
func fleetFromRows(rows []fleetRow) (partition.Fleet, int) {
	var (
		fleet   partition.Fleet
		skipped int
	)
	for i := 0; i < len(rows); {
		j := i
		for j < len(rows) && rows[j].gpu == rows[i].gpu {
			j++
		}
		group := rows[i:j]
		i = j
		if _, ok := migprofile.LookupModel(group[0].model); !ok {
			skipped++
			continue
		}
		g := partition.GPU{Host: group[0].host, UUID: group[0].gpu, Model: group[0].model, MIGDisabled: true}
		for _, r := range group {
			if r.mig == "" {
				continue // the whole GPU, or a MIG GPU's unpartitioned slices
			}
			g.MIGDisabled = false
			n := len(g.Instances)
			if n == 0 || g.Instances[n-1].UUID != r.mig {
				g.Instances = append(g.Instances, partition.Instance{Profile: r.profile, UUID: r.mig})
				n++
			}
			in := &g.Instances[n-1]
			if r.tenant != "" {
				// Rows are ordered by tenant: the first is kept, and an
				// instance shared by several tenants stays busy either way.
				if in.Tenant == "" {
					in.Tenant = r.tenant
				}
				in.Busy = true
			}
		}
		fleet.GPUs = append(fleet.GPUs, g)
	}
	return fleet, skipped
}
