package chargeback

import (
	"sort"
	"time"
)

// EfficiencyRow is one department's (Tenant empty) or tenant's efficiency
// over the report's period, from internal/insights (docs/insights.md):
// GPU time held, of it measured (SM activity reported), SM-active and
// held-but-idle, in integer GPU-microseconds that reconcile (held =
// measured + unmeasured; idle ≤ measured).
type EfficiencyRow struct {
	Department          string `json:"department"`
	Tenant              string `json:"tenant,omitempty"`
	HeldGPUMicros       int64  `json:"held_gpu_microseconds"`
	MeasuredGPUMicros   int64  `json:"measured_gpu_microseconds"`
	UnmeasuredGPUMicros int64  `json:"unmeasured_gpu_microseconds"`
	SMActiveMicros      int64  `json:"sm_active_microseconds"`
	IdleGPUMicros       int64  `json:"idle_gpu_microseconds"`
}

// DayUsage is the fleet's GPU time on one UTC day, for the held-vs-used
// chart: held by tenants (of it SM-active) and idle capacity (held by no
// one), in GPU-microseconds.
type DayUsage struct {
	Day                  time.Time `json:"day"`
	HeldGPUMicroseconds  uint64    `json:"held_gpu_microseconds"`
	SMActiveMicroseconds uint64    `json:"sm_active_microseconds"`
	IdleGPUMicroseconds  uint64    `json:"idle_capacity_gpu_microseconds"`
}

// DailyUsage sums rows per UTC day of their Hour, days in order: tenant
// rows are held (and their SM-active time used), rows without a tenant
// are idle capacity. Every day with a row is listed.
func DailyUsage(rows []Row) []DayUsage {
	byDay := map[int64]*DayUsage{}
	for _, r := range rows {
		u := r.Hour.UTC()
		day := time.Date(u.Year(), u.Month(), u.Day(), 0, 0, 0, 0, time.UTC)
		d := byDay[day.Unix()]
		if d == nil {
			d = &DayUsage{Day: day}
			byDay[day.Unix()] = d
		}
		if r.Tenant == "" {
			d.IdleGPUMicroseconds += r.GPUMicroseconds
			continue
		}
		d.HeldGPUMicroseconds += r.GPUMicroseconds
		d.SMActiveMicroseconds += r.SMActiveMicroseconds
	}
	out := make([]DayUsage, 0, len(byDay))
	for _, d := range byDay {
		out = append(out, *d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Day.Before(out[j].Day) })
	return out
}
