package store

import (
	"context"
	"time"

	"github.com/gpumeter/gpumeter/internal/quota"
)

const admissionColumns = "admission_id, part, tenant, department, gpu_model, gpus, gpu_hours, spend, expires_at, released"

// The statements of this file (internal/chdbcheck runs them on chDB too).
const (
	insertAdmissionSQL = "INSERT INTO quota_admissions (" + admissionColumns + ", version)"
	heldAdmissionsSQL  = "SELECT " + admissionColumns + " FROM quota_admissions FINAL WHERE released = 0 AND expires_at > ? ORDER BY expires_at, admission_id, part"
)

var _ quota.AdmissionLog = (*Store)(nil)

// SaveAdmissions writes admission parts: held at version 1, released at 2.
func (s *Store) SaveAdmissions(ctx context.Context, as []quota.Admitted) error {
	rows := make([][]any, len(as))
	for i, a := range as {
		rows[i] = admissionRow(a)
	}
	return s.insert(ctx, "save quota admissions", insertAdmissionSQL, rows, nil)
}

func admissionRow(a quota.Admitted) []any {
	var released uint8
	version := uint64(1)
	if a.Released {
		released, version = 1, 2
	}
	// Seconds: an expiry rounded up never drops a held admission early.
	expires := a.Expires.UTC().Truncate(time.Second)
	if expires.Before(a.Expires) {
		expires = expires.Add(time.Second)
	}
	return []any{a.ID, uint16(a.Part), a.Tenant, a.Department, a.GPUModel, a.Demand.GPUs.Round(18), a.Demand.GPUHours.Round(18),
		a.Demand.Spend.Round(18), expires, released, version}
}

// HeldAdmissions lists the parts neither released nor expired at now.
func (s *Store) HeldAdmissions(ctx context.Context, now time.Time) ([]quota.Admitted, error) {
	return queryAll(ctx, s, "read held quota admissions", heldAdmissionsSQL, []any{now.UTC().Truncate(time.Second)}, func(scan scanFunc) (quota.Admitted, error) {
		var (
			a        quota.Admitted
			part     uint16
			released uint8
		)
		if err := scan(&a.ID, &part, &a.Tenant, &a.Department, &a.GPUModel, &a.Demand.GPUs, &a.Demand.GPUHours, &a.Demand.Spend,
			&a.Expires, &released); err != nil {
			return a, err
		}
		a.Part, a.Released, a.Expires = int(part), released == 1, a.Expires.UTC()
		return a, nil
	})
}
