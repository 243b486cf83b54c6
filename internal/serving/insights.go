package serving

import (
	"context"
	"time"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/insights"
	"github.com/gpumeter/gpumeter/internal/insightsvc"
	"github.com/gpumeter/gpumeter/internal/partition"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/pricing"
)

// fleetWindow is how far behind the newest sample a GPU's own newest
// sample may be and still count as part of the fleet (as mig plan reads it).
const fleetWindow = 10 * time.Minute

// InsightsReader adapts the store to insightsvc.Reader.
type InsightsReader struct{ s *store.Store }

// NewInsightsReader reads the insights' inputs from s.
func NewInsightsReader(s *store.Store) InsightsReader { return InsightsReader{s} }

var _ insightsvc.Reader = InsightsReader{}

func (r InsightsReader) Holdings(ctx context.Context, from, to time.Time, f insightsvc.Filter) ([]insights.Holding, error) {
	return r.s.Holdings(ctx, store.InsightsQuery{From: from, To: to, Tenant: f.Tenant, Scope: f.Scope})
}

func (r InsightsReader) HourlyGPUHours(ctx context.Context, from, to time.Time, f insightsvc.Filter) ([]insights.Series, error) {
	return r.s.HourlyGPUHours(ctx, store.InsightsQuery{From: from, To: to, Tenant: f.Tenant, Scope: f.Scope})
}

func (r InsightsReader) HourlyUsage(ctx context.Context, from, to time.Time, tenant string) (map[string][]pricing.Usage, error) {
	tu, err := billing.LoadTenantUsage(ctx, r.s, from, to, tenant)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]pricing.Usage, len(tu))
	for t, u := range tu {
		if t != "" {
			out[t] = u.Usage
		}
	}
	return out, nil
}

func (r InsightsReader) FirstHour(ctx context.Context) (time.Time, error) { return r.s.FirstHour(ctx) }

func (r InsightsReader) ModelDemand(ctx context.Context, from, to time.Time, scope auth.Scope) ([]insights.Series, error) {
	return r.s.ModelDemand(ctx, store.InsightsQuery{From: from, To: to, Scope: scope})
}

func (r InsightsReader) GPUsByModel(ctx context.Context, since, until time.Time) (map[string]int, error) {
	return r.s.GPUsByModel(ctx, since, until)
}

func (r InsightsReader) Fleet(ctx context.Context) (*partition.Fleet, error) {
	rows, err := r.s.FleetSamples(ctx, store.FleetQuery{Window: fleetWindow})
	if err != nil {
		return nil, err
	}
	f, _ := partition.FleetFromSamples(rows)
	return &f, nil
}

func (r InsightsReader) StoredAnomalyIDs(ctx context.Context, from, to time.Time) (map[string]bool, error) {
	return r.s.StoredAnomalyIDs(ctx, from, to)
}

func (r InsightsReader) InsertAnomalies(ctx context.Context, as []insights.Anomaly, detectedAt time.Time) error {
	return r.s.InsertAnomalies(ctx, as, detectedAt)
}

func (r InsightsReader) Anomalies(ctx context.Context, from, to time.Time, f insightsvc.Filter) ([]insightsvc.StoredAnomaly, error) {
	rows, err := r.s.Anomalies(ctx, store.AnomalyQuery{From: from, To: to, Tenant: f.Tenant, Scope: f.Scope})
	if err != nil {
		return nil, err
	}
	out := make([]insightsvc.StoredAnomaly, len(rows))
	for i, a := range rows {
		out[i] = insightsvc.StoredAnomaly{Anomaly: a.Anomaly, DetectedAt: a.DetectedAt}
	}
	return out, nil
}
