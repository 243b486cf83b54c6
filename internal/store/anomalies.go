package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/insights"
)

// anomalyColumns are insight_anomalies' columns in the order rows hold them.
const anomalyColumns = "anomaly_id, tenant, meter, sku, step_seconds, start, end, direction, observed, expected, spread, score, history, detected_at"

// storedAnomalyIDsSQL lists the ids stored for anomalies starting in
// [from, to]; ids fix the start, so this finds every earlier copy.
const storedAnomalyIDsSQL = "SELECT anomaly_id FROM insight_anomalies FINAL WHERE start >= ? AND start <= ?"

// StoredAnomalyIDs lists the ids of the anomalies stored with a start in
// [from, to].
func (s *Store) StoredAnomalyIDs(ctx context.Context, from, to time.Time) (map[string]bool, error) {
	if err := s.checkTimes(ctx, "stored anomalies", to); err != nil {
		return nil, err
	}
	return querySet[string](ctx, s, "stored anomaly ids", storedAnomalyIDsSQL, from.UTC(), to.UTC())
}

// InsertAnomalies stores anomalies found at detectedAt. Rows are keyed by
// anomaly id (ReplacingMergeTree), so storing one again keeps one.
func (s *Store) InsertAnomalies(ctx context.Context, as []insights.Anomaly, detectedAt time.Time) error {
	if len(as) == 0 {
		return nil
	}
	starts := make([]time.Time, len(as))
	for i, a := range as {
		if a.ID == "" || a.Tenant == "" || a.Meter == "" || !a.End.After(a.Start) {
			return fmt.Errorf("save anomalies: anomaly %q of %q: id, tenant, meter and a positive step are required", a.ID, a.Tenant)
		}
		starts[i] = a.Start
	}
	if err := s.checkTimes(ctx, "save anomalies", starts...); err != nil {
		return err
	}
	rows := make([][]any, len(as))
	for i, a := range as {
		rows[i] = []any{a.ID, a.Tenant, a.Meter, a.SKU, uint32(a.End.Sub(a.Start) / time.Second), a.Start.UTC(), a.End.UTC(),
			string(a.Direction), storageDecimal(a.Observed), storageDecimal(a.Expected), storageDecimal(a.Spread),
			a.Score, uint32(max(a.History, 0)), detectedAt.UTC()}
	}
	return s.insert(ctx, "save anomalies", "INSERT INTO insight_anomalies ("+anomalyColumns+")", rows,
		func(i int) string { return "save anomaly " + as[i].ID })
}

// AnomalyQuery lists stored anomalies starting in [From, To), optionally
// of one tenant. Scope, when set, keeps the list to what an API key may
// see (scopeWhere). An anomaly is found in a tenant's whole usage, whatever
// departments its rows are labelled with, and stored without a department:
// a department scope cannot be applied and is refused (ErrUnscopable).
type AnomalyQuery struct {
	From, To time.Time
	Tenant   string
	Scope    auth.Scope
}

// Validate reports every problem with the query.
func (q AnomalyQuery) Validate() error {
	if q.From.IsZero() || q.To.IsZero() {
		return errors.New("from/to: both required")
	}
	if !q.To.After(q.From) {
		return errors.New("to: must be after from")
	}
	if q.To.Sub(q.From) > MaxSeriesRange {
		return fmt.Errorf("from/to: %s is longer than %s", q.To.Sub(q.From), MaxSeriesRange)
	}
	if q.Scope.Kind != "" {
		if err := q.Scope.Validate(); err != nil {
			return err
		}
	}
	if q.Scope.Kind == auth.KindDepartment {
		return fmt.Errorf("scope %s: anomalies carry no department: %w", q.Scope, ErrUnscopable)
	}
	return nil
}

// toSQL is the list's statement and arguments.
func (q AnomalyQuery) toSQL() (string, []any) {
	f, fargs := tenantFilter(q.Tenant, q.Scope)
	return "SELECT " + anomalyColumns + " FROM insight_anomalies FINAL WHERE start >= ? AND start < ?" + f +
		" ORDER BY start, tenant, meter, sku, anomaly_id", append([]any{q.From.UTC(), q.To.UTC()}, fargs...)
}

// Anomalies lists the stored anomalies of the query, by start.
func (s *Store) Anomalies(ctx context.Context, q AnomalyQuery) ([]insights.StoredAnomaly, error) {
	if err := q.Validate(); err != nil {
		return nil, fmt.Errorf("anomalies query: %w", err)
	}
	if err := s.checkTimes(ctx, "anomalies query", q.From, q.To.Add(-time.Second)); err != nil {
		return nil, err
	}
	sql, args := q.toSQL()
	out, err := queryAll(ctx, s, "anomalies query", sql, args, func(scan scanFunc) (insights.StoredAnomaly, error) {
		var (
			a                          insights.StoredAnomaly
			step, history              uint32
			dir                        string
			observed, expected, spread decimal.Decimal
		)
		err := scan(&a.ID, &a.Tenant, &a.Meter, &a.SKU, &step, &a.Start, &a.End, &dir, &observed, &expected, &spread,
			&a.Score, &history, &a.DetectedAt)
		a.Direction, a.History = insights.Direction(dir), int(history)
		a.Observed, a.Expected, a.Spread = observed, expected, spread
		a.Start, a.End, a.DetectedAt = a.Start.UTC(), a.End.UTC(), a.DetectedAt.UTC()
		return a, err
	})
	if out == nil && err == nil {
		out = []insights.StoredAnomaly{} // an empty list, not none
	}
	return out, err
}
