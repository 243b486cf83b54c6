package store

import (
	"context"
	"fmt"
)

// RunningMerges is how many merges the server runs now, in any database;
// benchmarks wait for none before they start the clock.
func (s *Store) RunningMerges(ctx context.Context) (uint64, error) {
	var n uint64
	if err := s.conn.QueryRow(ctx, "SELECT count() FROM system.merges").Scan(&n); err != nil {
		return 0, fmt.Errorf("running merges: %w", err)
	}
	return n, nil
}

// SampleCounts is how many usage_samples rows are stored, duplicates
// included, and how many distinct sample ids.
func (s *Store) SampleCounts(ctx context.Context) (rows, distinct uint64, err error) {
	if err := s.conn.QueryRow(ctx, "SELECT count(), uniqExact(sample_id) FROM usage_samples").Scan(&rows, &distinct); err != nil {
		return 0, 0, fmt.Errorf("sample counts: %w", err)
	}
	return rows, distinct, nil
}

// ServerEvent is the server's system.events counter name (0 when absent).
func (s *Store) ServerEvent(ctx context.Context, name string) (uint64, error) {
	var n uint64
	if err := s.conn.QueryRow(ctx, "SELECT toUInt64(sum(value)) FROM system.events WHERE event = ?", name).Scan(&n); err != nil {
		return 0, fmt.Errorf("server event %s: %w", name, err)
	}
	return n, nil
}

// ExecForTest runs one statement (tests set up states the store never
// makes, such as a migration cut short on one node).
func (s *Store) ExecForTest(ctx context.Context, stmt string) error { return s.conn.Exec(ctx, stmt) }

// CountForTest runs a query that answers one count.
func (s *Store) CountForTest(ctx context.Context, query string) (uint64, error) {
	var n uint64
	err := s.conn.QueryRow(ctx, query).Scan(&n)
	return n, err
}
