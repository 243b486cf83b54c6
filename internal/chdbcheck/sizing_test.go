//go:build chdb

package chdbcheck

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chdb-io/chdb-go/chdb"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/collectors/attribution"
	"github.com/gpumeter/gpumeter/collectors/sim"
	"github.com/gpumeter/gpumeter/collectors/sim/rig"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
	"github.com/gpumeter/gpumeter/schemas"
)

// sizingGPUs is the simulated DGX host of docs/operations.md ("Sizing").
const sizingGPUs = 8

// TestSizing measures bytes on disk per GPU-month after merges, the method
// of docs/operations.md ("Sizing"): a simulated 8-GPU DGX host (seed 1,
// from 2026-10-01, 10 s samples) through the production collector and
// attribution into the 18.16 server; its deduplicated rows copied into
// chDB twice, once with the migrations 18.16 runs and once with every
// migration (LowCardinality and codecs of 0012 too); each table merged
// (OPTIMIZE ... FINAL) and the hourly rollup run. It logs rows and bytes
// per table, engine and schema, and per GPU-month (scaled from the days
// simulated: CHDB_SIZING_DAYS, 1 by default; the figures in the docs are
// from 7), and fails unless the newer schema stores the raw samples in
// fewer bytes with the same rollups.
func TestSizing(t *testing.T) {
	if os.Getenv("CHDB_LIB_PATH") == "" {
		t.Fatal("CHDB_LIB_PATH is not set: run `make chdb-test`, which fetches libchdb.so")
	}
	days := 1
	if v := os.Getenv("CHDB_SIZING_DAYS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 31 {
			t.Fatalf("CHDB_SIZING_DAYS=%q: want 1 to 31 days", v)
		}
		days = n
	}
	ctx := context.Background()
	from := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	to := from.AddDate(0, 0, days)

	st := storetest.New(t)
	began := time.Now()
	n := simulate(t, st, from, to)
	t.Logf("simulated %d days × %d GPUs: %d samples in %s", days, sizingGPUs, n, time.Since(began).Round(time.Second))
	old := connect(t, st)
	defer old.conn.Close()
	if err := old.exec("OPTIMIZE TABLE usage_samples FINAL"); err != nil {
		t.Fatal(err)
	}
	if err := st.RollupRange(ctx, from, to, 1); err != nil {
		t.Fatal(err)
	}
	if err := old.exec("OPTIMIZE TABLE usage_hourly FINAL"); err != nil {
		t.Fatal(err)
	}
	sizes := map[string]partSize{}
	for table, s := range partSizes(t, old) {
		sizes["18.16 "+table] = s
	}

	// The raw rows as 18.16 stored them, for chDB to read with file().
	tsv := filepath.Join(t.TempDir(), "usage_samples.tsv")
	columns := exportTSV(t, old, "SELECT * FROM usage_samples FINAL", tsv)

	sess, err := chdb.NewSession(t.TempDir())
	if err != nil {
		t.Fatalf("chDB: %v", err)
	}
	defer sess.Close()
	modern := embedded{sess}
	ver, err := store.ParseVersion(single(t, modern, "SELECT version()"))
	if err != nil {
		t.Fatal(err)
	}
	migs, err := store.LoadMigrations(schemas.FS)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range columns {
		names = append(names, c.name)
	}
	for _, schema := range []struct {
		db    string
		newer bool // also the migrations 18.16 skips
	}{{"as_18_16", false}, {"newer", true}} {
		for _, stmt := range []string{"CREATE DATABASE " + schema.db, "USE " + schema.db} {
			if err := modern.exec(stmt); err != nil {
				t.Fatal(err)
			}
		}
		for _, m := range migs {
			if m.MinServer != nil && (!schema.newer || ver.Less(*m.MinServer)) {
				continue
			}
			for _, stmt := range m.Statements {
				if err := modern.exec(stmt); err != nil {
					t.Fatalf("migration %04d_%s on chDB: %v", m.Version, m.Name, err)
				}
			}
		}
		structure := make([]string, len(columns))
		for i, c := range columns {
			structure[i] = c.name + " " + c.typ
		}
		insert := fmt.Sprintf("INSERT INTO usage_samples (%s) SELECT * FROM file('%s', 'TabSeparated', '%s')",
			strings.Join(names, ", "), tsv, strings.ReplaceAll(strings.Join(structure, ", "), "'", `\'`))
		for _, stmt := range []string{insert, "OPTIMIZE TABLE usage_samples FINAL"} {
			if err := modern.exec(stmt); err != nil {
				t.Fatalf("%s: %v\n%s", schema.db, err, stmt)
			}
		}
		for _, s := range store.CheckedStatements(from, to, "", 1) {
			if strings.HasPrefix(s.Name, "rollup") && s.Exec {
				if err := modern.exec(bind(t, s.SQL, s.Args, schema.db)); err != nil {
					t.Fatalf("%s: %s: %v", schema.db, s.Name, err)
				}
			}
		}
		if err := modern.exec("OPTIMIZE TABLE usage_hourly FINAL"); err != nil {
			t.Fatal(err)
		}
		for table, s := range partSizes(t, modern) {
			sizes["26.x "+schema.db+" "+table] = s
		}
		// The same rollups, to the row, from either schema.
		compare(t, schema.db+": usage_hourly", old, modern, "SELECT * FROM usage_hourly FINAL", true)
		logColumnSizes(t, modern)
	}

	scale := func(b uint64) string {
		return strconv.FormatFloat(float64(b)*30/float64(days*sizingGPUs)/1e6, 'f', 3, 64)
	}
	t.Logf("%d days × %d GPUs, after OPTIMIZE FINAL (MB per GPU-month = bytes × 30 / (days × GPUs) / 10^6):", days, sizingGPUs)
	t.Logf("%-34s %10s %14s %14s %8s %14s", "engine schema table", "rows", "bytes on disk", "uncompressed", "B/row", "MB/GPU-month")
	for _, k := range []string{"18.16 usage_samples", "26.x as_18_16 usage_samples", "26.x newer usage_samples",
		"18.16 usage_hourly", "26.x as_18_16 usage_hourly", "26.x newer usage_hourly"} {
		s := sizes[k]
		t.Logf("%-34s %10d %14d %14d %8.1f %14s", k, s.rows, s.bytes, s.uncompressed, float64(s.bytes)/float64(max(s.rows, 1)), scale(s.bytes))
	}
	raw := func(k string) partSize { return sizes[k+" usage_samples"] }
	if raw("18.16").rows == 0 || raw("26.x as_18_16").rows != raw("18.16").rows || raw("26.x newer").rows != raw("18.16").rows {
		t.Errorf("raw rows: 18.16 %d, chDB %d and %d: want the same, and some", raw("18.16").rows, raw("26.x as_18_16").rows, raw("26.x newer").rows)
	}
	if raw("26.x newer").bytes >= raw("26.x as_18_16").bytes {
		t.Errorf("raw samples on chDB: %d bytes with migration 0012, %d without: want fewer", raw("26.x newer").bytes, raw("26.x as_18_16").bytes)
	}
}

// simulate runs the simulated DGX host of `gpumeter collect --simulate
// --hosts 1 --gpus 8 --seed 1` over [from, to) through the production
// NVML source, attribution (cgroups, the map file, VMs) and apportioning,
// and inserts the samples into st. It returns the number of samples.
func simulate(t *testing.T, st *store.Store, from, to time.Time) int {
	t.Helper()
	cfg := sim.DefaultConfig()
	cfg.Hosts, cfg.GPUsPerHost, cfg.Seed, cfg.Start, cfg.Step, cfg.Root = 1, sizingGPUs, 1, from, collectors.DefaultInterval, t.TempDir()
	fleet, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	r, err := rig.New(fleet, rig.Options{}, logger) // tenants by the map file only
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	hosts := r.Hosts
	ctx := context.Background()
	var pending []collectors.Sample
	n := 0
	flush := func() error {
		n += len(pending)
		err := st.InsertSamples(ctx, pending)
		pending = pending[:0]
		return err
	}
	app := collectors.AppenderFunc(func(ctx context.Context, batch []collectors.Sample) error {
		pending = append(pending, batch...)
		if len(pending) >= store.MaxInsertRows {
			return flush()
		}
		return nil
	})
	loop, err := collectors.NewLoop(collectors.LoopConfig{Interval: cfg.Step, Until: to}, hosts, attribution.Options{}.Apportion, app, fleet.Clock(0), logger, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := loop.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if err := flush(); err != nil {
		t.Fatal(err)
	}
	return n
}

type column struct{ name, typ string }

// exportTSV writes the rows sql selects on the 18.16 server to path in
// TabSeparated and returns their columns.
func exportTSV(t *testing.T, old server, sql, path string) []column {
	t.Helper()
	rows, err := old.conn.Query(context.Background(), sql)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	types := rows.ColumnTypes()
	var cols []column
	for i, ct := range types {
		cols = append(cols, column{rows.Columns()[i], ct.DatabaseTypeName()})
	}
	esc := strings.NewReplacer(`\`, `\\`, "\t", `\t`, "\n", `\n`)
	dest := make([]any, len(types))
	for i, ct := range types {
		dest[i] = reflect.New(ct.ScanType()).Interface()
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			t.Fatal(err)
		}
		for i, d := range dest {
			if i > 0 {
				w.WriteByte('\t')
			}
			w.WriteString(esc.Replace(text(reflect.ValueOf(d).Elem().Interface())))
		}
		w.WriteByte('\n')
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return cols
}

type partSize struct{ rows, bytes, uncompressed uint64 }

// partSizes reads the active parts of the usage tables in the engine's
// current database.
func partSizes(t *testing.T, e engine) map[string]partSize {
	t.Helper()
	rows, err := e.query("SELECT table, sum(rows), sum(bytes_on_disk), sum(data_uncompressed_bytes) FROM system.parts" +
		" WHERE database = currentDatabase() AND active AND table IN ('usage_samples', 'usage_hourly') GROUP BY table")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]partSize{}
	for _, r := range rows {
		var s partSize
		for i, p := range []*uint64{&s.rows, &s.bytes, &s.uncompressed} {
			if *p, err = strconv.ParseUint(r[i+1], 10, 64); err != nil {
				t.Fatal(err)
			}
		}
		out[r[0]] = s
	}
	return out
}

// logColumnSizes logs the raw table's columns by compressed size.
func logColumnSizes(t *testing.T, modern embedded) {
	t.Helper()
	rows, err := modern.query("SELECT name, type, compression_codec, data_compressed_bytes, data_uncompressed_bytes FROM system.columns" +
		" WHERE database = currentDatabase() AND table = 'usage_samples' ORDER BY data_compressed_bytes DESC")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		t.Logf("  usage_samples.%-24s %-24s %-28s %12s compressed %12s uncompressed", r[0], r[1], r[2], r[3], r[4])
	}
}
