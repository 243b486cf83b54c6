package store

import (
	"context"
	"time"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/insights"
	"github.com/gpumeter/gpumeter/internal/partition"
)

// InsightsReader is the store as the insights service reads it
// (insights.Reader): each read in the service's shape (a period and a
// Filter) run as the store's query. It only loads rows; building the
// fleet and pricing usage are the service's.
type InsightsReader struct{ s *Store }

// NewInsightsReader reads the insights' inputs from s.
func NewInsightsReader(s *Store) InsightsReader { return InsightsReader{s} }

var _ insights.Reader = InsightsReader{}

func (r InsightsReader) Holdings(ctx context.Context, from, to time.Time, f insights.Filter) ([]insights.Holding, error) {
	return r.s.Holdings(ctx, InsightsQuery{From: from, To: to, Tenant: f.Tenant, Scope: f.Scope})
}

func (r InsightsReader) HourlyGPUTime(ctx context.Context, from, to time.Time, f insights.Filter) ([]insights.HourTotal, error) {
	return r.s.HourlyGPUTime(ctx, InsightsQuery{From: from, To: to, Tenant: f.Tenant, Scope: f.Scope})
}

func (r InsightsReader) HourlyUsage(ctx context.Context, from, to time.Time, tenant string) ([]billing.HourlyMeters, error) {
	return r.s.HourlyUsage(ctx, from, to, tenant)
}

func (r InsightsReader) FirstHour(ctx context.Context) (time.Time, error) { return r.s.FirstHour(ctx) }

func (r InsightsReader) ModelGPUTime(ctx context.Context, from, to time.Time, scope auth.Scope) ([]insights.HourTotal, error) {
	return r.s.ModelGPUTime(ctx, InsightsQuery{From: from, To: to, Scope: scope})
}

func (r InsightsReader) GPUsByModel(ctx context.Context, since, until time.Time) (map[string]int, error) {
	return r.s.GPUsByModel(ctx, since, until)
}

func (r InsightsReader) FleetSamples(ctx context.Context, window time.Duration) ([]partition.DeviceSample, error) {
	return r.s.FleetSamples(ctx, FleetQuery{Window: window})
}

func (r InsightsReader) StoredAnomalyIDs(ctx context.Context, from, to time.Time) (map[string]bool, error) {
	return r.s.StoredAnomalyIDs(ctx, from, to)
}

func (r InsightsReader) InsertAnomalies(ctx context.Context, as []insights.Anomaly, detectedAt time.Time) error {
	return r.s.InsertAnomalies(ctx, as, detectedAt)
}

func (r InsightsReader) Anomalies(ctx context.Context, from, to time.Time, f insights.Filter) ([]insights.StoredAnomaly, error) {
	return r.s.Anomalies(ctx, AnomalyQuery{From: from, To: to, Tenant: f.Tenant, Scope: f.Scope})
}
