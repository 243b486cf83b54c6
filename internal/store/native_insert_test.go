package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
)

// usageSamplesWith is usage_samples' first schema with the string
// columns of type strType and energy_millijoules of type energyType.
func usageSamplesWith(strType, energyType string) string {
	return strings.NewReplacer(" S,", " "+strType+",", " E,", " "+energyType+",").Replace(`CREATE TABLE usage_samples (
    sample_id UInt64, host S, gpu_uuid S, gpu_model S, mig_uuid S, mig_profile S, sku S,
    tenant S, department S, workload S, start DateTime('UTC'), end DateTime('UTC'),
    gpu_microseconds UInt64, sm_active_microseconds UInt64, mem_mib_seconds UInt64, mem_peak_bytes UInt64,
    energy_millijoules E, pcie_tx_bytes UInt64, pcie_rx_bytes UInt64, nvlink_tx_bytes UInt64, nvlink_rx_bytes UInt64,
    unmeasured UInt8, inserted_at DateTime('UTC') DEFAULT now()
) ENGINE = ReplacingMergeTree() PARTITION BY toYYYYMM(start) ORDER BY (tenant, start, sample_id)`)
}

// replaceUsageSamples swaps the store's usage_samples for one made by
// stmt (18.16 creates LowCardinality columns only when allowed to).
func replaceUsageSamples(t *testing.T, s *store.Store, stmt string) {
	t.Helper()
	ctx := clickhouse.Context(context.Background(), clickhouse.WithSettings(clickhouse.Settings{"allow_experimental_low_cardinality_type": 1}))
	for _, q := range []string{"DROP TABLE usage_samples", stmt} {
		if err := s.ExecForTest(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// TestNativeInsertIntoLowCardinalityColumns inserts into the string
// columns as LowCardinality(String), the type migration 0012 gives them on
// 24.x and later, with a column whose blocks hold more than 256 distinct
// values (16-bit indexes), and checks every row arrives as sent.
func TestNativeInsertIntoLowCardinalityColumns(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	replaceUsageSamples(t, s, usageSamplesWith("LowCardinality(String)", "UInt64"))
	start := time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC)
	samples := testSamples(start, 25_003, "acme", "globex", "initech")
	for i := range samples {
		samples[i].Workload = fmt.Sprintf("job-%d", samples[i].ID%700)
	}
	if err := s.InsertSamples(ctx, samples); err != nil {
		t.Fatal(err)
	}
	checkTenantTotals(t, s, start, samples)
	wrong, err := s.CountForTest(ctx, "SELECT countIf(workload != concat('job-', toString(sample_id % 700))) FROM usage_samples")
	if err != nil || wrong != 0 {
		t.Fatalf("%d rows with another row's workload (%v)", wrong, err)
	}
	distinct, err := s.CountForTest(ctx, "SELECT uniqExact(workload) FROM usage_samples")
	if err != nil || distinct != 700 {
		t.Fatalf("%d distinct workloads stored, want 700 (%v)", distinct, err)
	}
}

// TestNativeInsertRefusesAColumnTypeItCannotEncode: a table whose column
// has a type the insert does not encode gets a clear error naming it,
// and nothing is stored.
func TestNativeInsertRefusesAColumnTypeItCannotEncode(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	replaceUsageSamples(t, s, usageSamplesWith("String", "Float64"))
	err := s.InsertSamples(ctx, testSamples(time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC), 100, "acme"))
	if err == nil || !strings.Contains(err.Error(), "energy_millijoules") || !strings.Contains(err.Error(), "Float64") {
		t.Fatalf("got %v, want an error naming energy_millijoules and Float64", err)
	}
	if n, err := s.CountForTest(ctx, "SELECT count() FROM usage_samples"); err != nil || n != 0 {
		t.Fatalf("%d rows stored (%v), want none", n, err)
	}
	// The refused insert's connection is not reused half-read: the next
	// insert, into a table it can encode, works.
	replaceUsageSamples(t, s, usageSamplesWith("String", "UInt64"))
	if err := s.InsertSamples(ctx, testSamples(time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC), 100, "acme")); err != nil {
		t.Fatal(err)
	}
}

// TestNativeInsertReportsTheServersException: the server's exception
// comes back as a ServerError with its code.
func TestNativeInsertReportsTheServersException(t *testing.T) {
	ctx := context.Background()
	s := storetest.New(t)
	if err := s.ExecForTest(ctx, "DROP TABLE usage_samples"); err != nil {
		t.Fatal(err)
	}
	err := s.InsertSamples(ctx, testSamples(time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC), 10, "acme"))
	var se *store.ServerError
	if !errors.As(err, &se) || se.Code != 60 { // UNKNOWN_TABLE
		t.Fatalf("got %v, want ClickHouse's UNKNOWN_TABLE (60)", err)
	}
}

// TestNativeInsertStopsWhenCancelled: a cancelled context ends an insert
// with the context's error instead of waiting on the server.
func TestNativeInsertStopsWhenCancelled(t *testing.T) {
	s := storetest.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.InsertSamples(ctx, testSamples(time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC), 10, "acme"))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

// TestNativeInsertAfterAServerRestart: the connections pooled before a
// restart are found closed and replaced, so the first insert after it
// succeeds instead of failing on a dead connection.
func TestNativeInsertAfterAServerRestart(t *testing.T) {
	ctx := context.Background()
	srv := storetest.StartServer(t)
	cfg, err := store.ParseDSN(srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Database = "native_restart"
	s := storetest.NewWithConfig(t, cfg)
	start := time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC)
	first := testSamples(start, 1000, "acme")
	if err := s.InsertSamples(ctx, first); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	srv.Start()
	second := testSamples(start.Add(24*time.Hour), 1000, "acme")
	if err := s.InsertSamples(ctx, second); err != nil {
		t.Fatalf("first insert after the restart: %v", err)
	}
	checkTenantTotals(t, s, start, append(first, second...))
}
