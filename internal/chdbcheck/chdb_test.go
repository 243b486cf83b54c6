//go:build chdb

package chdbcheck

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/chdb-io/chdb-go/chdb"
	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
	"github.com/gpumeter/gpumeter/schemas"
)

// engine runs literal SQL (arguments already bound) and returns each row
// as its values in text form.
type engine interface {
	exec(sql string) error
	query(sql string) ([][]string, error)
}

// server is the 18.16 server through clickhouse-go's native protocol.
type server struct{ conn driver.Conn }

func (s server) exec(sql string) error { return s.conn.Exec(context.Background(), sql) }

func (s server) query(sql string) ([][]string, error) {
	rows, err := s.conn.Query(context.Background(), sql)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	types := rows.ColumnTypes()
	var out [][]string
	for rows.Next() {
		dest := make([]any, len(types))
		for i, ct := range types {
			dest[i] = reflect.New(ct.ScanType()).Interface()
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		row := make([]string, len(dest))
		for i, d := range dest {
			row[i] = text(reflect.ValueOf(d).Elem().Interface())
			if types[i].DatabaseTypeName() == "Date" {
				row[i], _, _ = strings.Cut(row[i], " ")
			}
		}
		out = append(out, row)
	}
	return out, rows.Err()
}

// text is how ClickHouse's TabSeparated format writes v (for the values the
// compared statements return: strings without escapes, integers, UTC times).
func text(v any) string {
	switch v := v.(type) {
	case time.Time:
		return v.UTC().Format(time.DateTime)
	case decimal.Decimal:
		return v.String()
	default:
		return fmt.Sprint(v)
	}
}

// embedded is ClickHouse 26.x in process.
type embedded struct{ s *chdb.Session }

func (e embedded) run(sql, format string) (string, error) {
	res, err := e.s.Query(sql, format)
	if err != nil {
		return "", err
	}
	if res == nil {
		return "", nil
	}
	defer res.Free()
	if err := res.Error(); err != nil {
		return "", err
	}
	return res.String(), nil
}

func (e embedded) exec(sql string) error { _, err := e.run(sql, "TabSeparated"); return err }

func (e embedded) query(sql string) ([][]string, error) {
	out, err := e.run(sql, "TabSeparated")
	if err != nil {
		return nil, err
	}
	var rows [][]string
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if line != "" {
			fields := strings.Split(line, "\t")
			for i, f := range fields {
				fields[i] = unescapeTSV(f)
			}
			rows = append(rows, fields)
		}
	}
	return rows, nil
}

// batch sends an INSERT naming its columns with rows, as the store does:
// a native batch on 18.16 (which waits for a data block after an INSERT
// sent as a plain query), literal VALUES on chDB.
func (s server) batch(sql string, rows [][]any) error {
	b, err := s.conn.PrepareBatch(context.Background(), sql)
	if err != nil {
		return err
	}
	for _, r := range rows {
		if err := b.Append(r...); err != nil {
			b.Abort()
			return err
		}
	}
	return b.Send()
}

func (e embedded) batch(t *testing.T, sql string, rows [][]any) error {
	t.Helper()
	values := make([]string, len(rows))
	for i, r := range rows {
		lits := make([]string, len(r))
		for j, v := range r {
			lits[j] = literal(t, v)
		}
		values[i] = "(" + strings.Join(lits, ", ") + ")"
	}
	return e.exec(sql + " VALUES " + strings.Join(values, ", "))
}

// unescapeTSV undoes TabSeparated's escapes (\\, \', \t, \n, \0 ...).
func unescapeTSV(f string) string {
	if !strings.Contains(f, `\`) {
		return f
	}
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		if f[i] != '\\' || i+1 == len(f) {
			b.WriteByte(f[i])
			continue
		}
		i++
		switch f[i] {
		case 't':
			b.WriteByte('\t')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case '0':
			b.WriteByte(0)
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		default:
			b.WriteByte(f[i])
		}
	}
	return b.String()
}

// bind writes args into sql as clickhouse-go does for these types when the
// server's time zone is UTC (scripts/clickhouse.sh; chDB runs with TZ=UTC),
// store.Database as db.
func bind(t *testing.T, sql string, args []any, db string) string {
	t.Helper()
	var b strings.Builder
	n := 0
	for _, r := range sql {
		if r != '?' {
			b.WriteRune(r)
			continue
		}
		if n >= len(args) {
			t.Fatalf("bind: more ? than arguments in %s", sql)
		}
		if _, ok := args[n].(store.Database); ok {
			b.WriteString(literal(t, db))
		} else {
			b.WriteString(literal(t, args[n]))
		}
		n++
	}
	if n != len(args) {
		t.Fatalf("bind: %d arguments for %d ? in %s", len(args), n, sql)
	}
	return b.String()
}

func literal(t *testing.T, v any) string {
	switch v := v.(type) {
	case time.Time:
		return v.UTC().Format("toDateTime('2006-01-02 15:04:05')")
	case string:
		return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
	case uint64:
		return strconv.FormatUint(v, 10)
	case uint8, uint16, uint32, int, int32, int64:
		return fmt.Sprint(v)
	case decimal.Decimal:
		return "'" + v.String() + "'"
	}
	t.Fatalf("bind: no literal for %T", v)
	return ""
}

// samples is a small fleet: 3 hosts × 2 GPUs (one split into MIG
// instances) × 3 tenants over 6 hours at 5-minute intervals, some meters
// unmeasured.
func samples(from time.Time) []collectors.Sample {
	tenants := []struct{ tenant, dept string }{{"acme", "ml"}, {"acme", "search"}, {"globex", "research"}, {"", ""}}
	var out []collectors.Sample
	id := uint64(1)
	for h := range 3 {
		for g := range 2 {
			uuid := fmt.Sprintf("GPU-%d-%d", h, g)
			for step := range 72 {
				if (step+h+g)%3 != 0 { // thin it out: a few hundred rows
					continue
				}
				start := from.Add(time.Duration(step) * 5 * time.Minute)
				tn := tenants[(step+h+g)%len(tenants)]
				s := collectors.Sample{
					ID: id, Host: fmt.Sprintf("host-%d", h), GPUUUID: uuid, GPUModel: "H100-SXM5-80GB",
					SKU: "H100-SXM5-80GB", Tenant: tn.tenant, Department: tn.dept,
					Workload: fmt.Sprintf("job-%d", step%5), Start: start, End: start.Add(5 * time.Minute),
				}
				if step%5 == 4 { // Slurm jobs, for the sacct comparison's read
					s.Workload = fmt.Sprintf("slurm/%d", 4100+step%7)
				}
				if tn.tenant == "" { // idle capacity
					s.Workload = ""
				}
				if g == 1 {
					s.MIGUUID, s.MIGProfile, s.SKU = fmt.Sprintf("MIG-%d-%d", h, step%2), "3g.40gb", "H100-SXM5-80GB/3g.40gb"
				}
				for m := range meter.Count {
					*s.Ptr(m) = id*1000 + uint64(m)*7 + uint64(step)
				}
				s.Unmeasured = meter.Unmeasured(step % 4)
				out = append(out, s)
				id++
			}
		}
	}
	return out
}

func TestChDBMatchesServer(t *testing.T) {
	if os.Getenv("CHDB_LIB_PATH") == "" {
		t.Fatal("CHDB_LIB_PATH is not set: run `make chdb-test`, which fetches libchdb.so")
	}
	ctx := context.Background()
	from := time.Date(2026, 11, 5, 0, 0, 0, 0, time.UTC)
	to := from.Add(6 * time.Hour)

	// 18.16: a migrated database (store.Migrate) with samples inserted by
	// the store, a third of them twice (at-least-once delivery).
	st := storetest.New(t)
	all := samples(from)
	if err := st.InsertSamples(ctx, all); err != nil {
		t.Fatal(err)
	}
	if err := st.InsertSamples(ctx, all[:len(all)/3]); err != nil {
		t.Fatal(err)
	}
	old := connect(t, st)
	defer old.conn.Close()

	// 26.x: every migration, statement by statement as Migrate sends them.
	sess, err := chdb.NewSession(t.TempDir())
	if err != nil {
		t.Fatalf("chDB: %v", err)
	}
	defer sess.Close()
	modern := embedded{sess}
	info, err := modern.query("SELECT version(), timezone()")
	if err != nil || len(info) != 1 {
		t.Fatalf("chDB: version: %v %v", info, err)
	}
	t.Logf("chDB %s, time zone %s", info[0][0], info[0][1])
	ver, err := store.ParseVersion(info[0][0])
	if err != nil || ver.Major < 24 {
		t.Fatalf("chDB version %q: want 24.x or newer (%v)", info[0][0], err)
	}
	if info[0][1] != "UTC" {
		t.Fatalf("chDB time zone %s: run with TZ=UTC, as the 18.16 test server is", info[0][1])
	}
	migs, err := store.LoadMigrations(schemas.FS)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range migs {
		if m.MinServer != nil && ver.Less(*m.MinServer) {
			t.Errorf("migration %04d_%s needs %s, chDB is %s", m.Version, m.Name, m.MinServer, ver)
			continue
		}
		for _, stmt := range m.Statements {
			began := time.Now()
			if err := modern.exec(stmt); err != nil {
				t.Errorf("migration %04d_%s on chDB: %v\n%s", m.Version, m.Name, err, stmt)
			}
			if d := time.Since(began); d > time.Second {
				t.Logf("migration %04d_%s on chDB: %s for %s", m.Version, m.Name, d.Round(time.Millisecond), stmt)
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	checkNewerServerMigrations(t, modern, migs, ver)
	// Retention leaves a table with a TTL to it: it must see 0018's TTL
	// on 26.x, and none on 18.16, which it prunes.
	for _, s := range store.AdmissionLogTTL() {
		if got := old.single(t, bind(t, s.SQL, s.Args, old.database(t))); got != "0" {
			t.Errorf("%s on 18.16: %s, want 0 (no TTL)", s.Name, got)
		}
		if got := single(t, modern, bind(t, s.SQL, s.Args, modern.database(t))); got != "1" {
			t.Errorf("%s on 26.x: %s, want 1 (migration 0018's TTL)", s.Name, got)
		}
	}
	// The same schema: every column of every table, with its type and
	// default. 18.16 stores the default of a column added by ALTER as
	// CAST(0, 'UInt32') where 26.x keeps 0: the same value, so compared
	// without the cast. LowCardinality(T) (migration 0012, which 18.16
	// skips) stores and reads as T: compared as T.
	const columns = "SELECT table, name, replaceRegexpOne(type, '^LowCardinality\\\\((.*)\\\\)$', '\\\\1'), default_kind," +
		" replaceRegexpOne(default_expression, '^CAST\\\\((.*), \\'[A-Za-z0-9]+\\'\\\\)$', '\\\\1')" +
		" FROM system.columns WHERE database = currentDatabase() AND table != 'schema_migrations' ORDER BY table, name"
	compare(t, "schema (system.columns)", old, modern, columns, true)

	// The same data: 18.16's deduplicated rows, then again its duplicated
	// third, so that FINAL has duplicates to collapse on chDB too.
	copyRows(t, old, modern, "SELECT * FROM usage_samples FINAL ORDER BY sample_id")
	copyRows(t, old, modern, fmt.Sprintf("SELECT * FROM usage_samples FINAL WHERE sample_id <= %d ORDER BY sample_id", len(all)/3))
	compare(t, "usage_samples FINAL count", old, modern, "SELECT count(), uniqExact(sample_id), sum(gpu_microseconds) FROM usage_samples FINAL", true)

	checkStatements(t, old, modern, from, to, 7)

	// A re-import moves globex to another department: the rollup's second
	// run writes tombstones for the keys that vanished.
	var moved []collectors.Sample
	for _, s := range all {
		if s.Tenant == "globex" {
			s.Department = "moved"
			moved = append(moved, s)
		}
	}
	if err := st.InsertSamples(ctx, moved); err != nil {
		t.Fatal(err)
	}
	copyRows(t, old, modern, "SELECT * FROM usage_samples FINAL WHERE department = 'moved' ORDER BY sample_id")
	checkStatements(t, old, modern, from, to, 8)
	compare(t, "tombstones", old, modern, "SELECT count() FROM usage_hourly FINAL WHERE samples = 0 HAVING count() > 0", true)

	// Invoices, keys and audit, leases, webhooks and retention: each
	// write, the reads of what it stored, then every row of each table,
	// of a ReplacingMergeTree with FINAL: 26.x collapses rows of one key
	// within an insert block (optimize_on_insert) where 18.16 keeps them
	// until a merge, and every read of such a table collapses them anyway.
	records, err := store.CheckedRecords(time.Now(), from)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range records {
		run(t, old, modern, s)
	}
	for _, table := range []struct {
		from       string
		serverTime []int
	}{
		{"api_keys FINAL", nil}, {"api_audit", nil}, {"billing_leases FINAL", []int{2, 3}}, {"webhook_events FINAL", nil},
		{"webhook_attempts", nil}, {"invoices FINAL", nil}, {"invoice_lines FINAL", nil}, {"closed_periods FINAL", nil},
		{"raw_dropped_months FINAL", nil}, {"raw_retention FINAL", nil},
	} {
		compare(t, table.from+" as stored", old, modern, "SELECT * FROM "+table.from, true, table.serverTime...)
	}
}

var (
	modifyColumnRe = regexp.MustCompile(`^ALTER TABLE (\w+) MODIFY COLUMN (\w+) (.+?)( DEFAULT .+?)?(?: (CODEC\(.+\)))?$`)
	modifyLocalRe  = regexp.MustCompile(`^ALTER TABLE (\w+) MODIFY (TTL|SETTING) `)
)

// checkNewerServerMigrations checks that what the migrations 18.16 skips
// (-- min_server) set is in place on chDB: each MODIFY COLUMN's type and
// codec, each table's TTL and settings.
func checkNewerServerMigrations(t *testing.T, modern embedded, migs []store.Migration, ver store.Version) {
	t.Helper()
	n := 0
	for _, m := range migs {
		if m.MinServer == nil || ver.Less(*m.MinServer) {
			continue
		}
		for _, stmt := range m.Statements {
			if c := modifyColumnRe.FindStringSubmatch(stmt); c != nil {
				got, err := modern.query(fmt.Sprintf("SELECT type, compression_codec FROM system.columns"+
					" WHERE database = currentDatabase() AND table = '%s' AND name = '%s'", c[1], c[2]))
				if err != nil || len(got) != 1 || got[0][0] != c[3] || got[0][1] != c[5] {
					t.Errorf("migration %04d_%s: %s.%s is %v (%v), want %s %s", m.Version, m.Name, c[1], c[2], got, err, c[3], c[5])
				}
				n++
				continue
			}
			if c := modifyLocalRe.FindStringSubmatch(stmt); c != nil {
				want := "TTL "
				if c[2] == "SETTING" {
					want = strings.TrimPrefix(stmt, c[0])
				}
				full := single(t, modern, fmt.Sprintf("SELECT engine_full FROM system.tables WHERE database = currentDatabase() AND name = '%s'", c[1]))
				if !strings.Contains(full, want) {
					t.Errorf("migration %04d_%s: %s is %s, want %q in it", m.Version, m.Name, c[1], full, want)
				}
				n++
				continue
			}
			t.Errorf("migration %04d_%s: the check does not know %q", m.Version, m.Name, stmt)
		}
	}
	if n == 0 {
		t.Error("no migration for newer servers to check")
	}
	t.Logf("newer-server migrations: %d column, TTL and setting changes in place on chDB", n)
}

// connect opens a connection to st's database on the 18.16 server.
func connect(t *testing.T, st *store.Store) server {
	t.Helper()
	opts, err := clickhouse.ParseDSN(storetest.DSN())
	if err != nil {
		t.Fatal(err)
	}
	opts.Auth.Database = st.Database()
	conn, err := clickhouse.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	return server{conn}
}

// checkStatements runs the store's statements on both engines and compares
// every read, and the rollups the writes leave.
func checkStatements(t *testing.T, old server, modern embedded, from, to time.Time, version uint64) {
	t.Helper()
	for _, s := range store.CheckedStatements(from, to, "acme", version) {
		run(t, old, modern, s)
	}
	compare(t, "usage_hourly after the rollup", old, modern,
		"SELECT * FROM usage_hourly FINAL ORDER BY tenant, hour, department, sku", true)
}

// run runs one of the store's statements on both engines: a write on each,
// a read on each with the results compared.
func run(t *testing.T, old server, modern embedded, s store.Statement) {
	t.Helper()
	began := time.Now()
	defer func() {
		if d := time.Since(began); d > time.Second {
			t.Logf("%s: %s", s.Name, d.Round(time.Millisecond))
		}
	}()
	switch {
	case s.Rows != nil:
		errOld, errNew := old.batch(s.SQL, s.Rows), modern.batch(t, s.SQL, s.Rows)
		if errOld != nil || errNew != nil {
			t.Errorf("%s: 18.16: %v; 26.x: %v\n%s (%d rows)", s.Name, errOld, errNew, s.SQL, len(s.Rows))
		}
	case s.Exec:
		sqlOld, sqlNew := bind(t, s.SQL, s.Args, old.database(t)), bind(t, s.SQL, s.Args, modern.database(t))
		errOld, errNew := old.exec(sqlOld), modern.exec(sqlNew)
		if errOld != nil || errNew != nil {
			t.Errorf("%s: 18.16: %v; 26.x: %v\n%s", s.Name, errOld, errNew, sqlNew)
		}
	default:
		n := compareBound(t, s.Name, old, modern, s.SQL, s.Args, !s.Empty, s.ServerTime...)
		if s.Empty && n > 0 {
			t.Errorf("%s: %d rows, want none", s.Name, n)
		}
	}
}

func (s server) database(t *testing.T) string {
	t.Helper()
	return s.single(t, "SELECT currentDatabase()")
}

func (e embedded) database(t *testing.T) string {
	t.Helper()
	return single(t, e, "SELECT currentDatabase()")
}

func (s server) single(t *testing.T, sql string) string { t.Helper(); return single(t, s, sql) }

// single is the one value sql returns.
func single(t *testing.T, e engine, sql string) string {
	t.Helper()
	rows, err := e.query(sql)
	if err != nil || len(rows) != 1 || len(rows[0]) != 1 {
		t.Fatalf("%s: %v %v", sql, rows, err)
	}
	return rows[0][0]
}

// compare runs sql on both engines and reports where the rows differ
// (sorted first: statements without ORDER BY return any order). An empty
// result fails where nonEmpty: a check that compares nothing cannot fail.
// serverTime columns hold the server's now(): each engine's must lie
// within a few minutes of the wall clock, and are then compared as equal.
// It returns the number of rows.
func compare(t *testing.T, name string, old server, modern embedded, sql string, nonEmpty bool, serverTime ...int) int {
	t.Helper()
	return compareBound(t, name, old, modern, sql, nil, nonEmpty, serverTime...)
}

// compareBound is compare for sql with args, bound for each engine.
func compareBound(t *testing.T, name string, old server, modern embedded, sql string, args []any, nonEmpty bool, serverTime ...int) int {
	t.Helper()
	sqlOld, sqlNew := sql, sql
	if args != nil {
		sqlOld, sqlNew = bind(t, sql, args, old.database(t)), bind(t, sql, args, modern.database(t))
	}
	a, errA := old.query(sqlOld)
	b, errB := modern.query(sqlNew)
	if errA != nil || errB != nil {
		t.Errorf("%s: 18.16: %v; 26.x: %v\n%s", name, errA, errB, sqlNew)
		return 0
	}
	now := time.Now().UTC()
	join := func(engine string, rows [][]string) []string {
		out := make([]string, len(rows))
		for i, r := range rows {
			for _, c := range serverTime {
				v, err := time.Parse(time.DateTime, r[c])
				if err != nil || v.Sub(now).Abs() > 5*time.Minute {
					t.Errorf("%s on %s: column %d = %q, want the server's now (%s)", name, engine, c, r[c], now.Format(time.DateTime))
				}
				r[c] = "(now)"
			}
			out[i] = strings.Join(r, "\t")
		}
		sort.Strings(out)
		return out
	}
	ja, jb := join("18.16", a), join("26.x", b)
	if nonEmpty && len(ja) == 0 {
		t.Errorf("%s: no rows on 18.16\n%s", name, sqlOld)
	}
	if !reflect.DeepEqual(ja, jb) {
		t.Errorf("%s: results differ (%d rows on 18.16, %d on 26.x)\n%s\n%s", name, len(ja), len(jb), sqlNew, diff(ja, jb))
		return len(ja)
	}
	t.Logf("%s: %d rows equal", name, len(ja))
	return len(ja)
}

func diff(a, b []string) string {
	in := func(xs []string) map[string]bool {
		m := map[string]bool{}
		for _, x := range xs {
			m[x] = true
		}
		return m
	}
	ia, ib := in(a), in(b)
	var out []string
	for _, x := range a {
		if !ib[x] && len(out) < 10 {
			out = append(out, "  18.16 only: "+x)
		}
	}
	for _, x := range b {
		if !ia[x] && len(out) < 20 {
			out = append(out, "  26.x only:  "+x)
		}
	}
	return strings.Join(out, "\n")
}

// copyRows inserts the rows sql selects on the 18.16 server into chDB,
// naming every column.
func copyRows(t *testing.T, old server, modern embedded, sql string) {
	t.Helper()
	rows, err := old.conn.Query(context.Background(), sql)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	types := rows.ColumnTypes()
	var values []string
	for rows.Next() {
		dest := make([]any, len(types))
		for i, ct := range types {
			dest[i] = reflect.New(ct.ScanType()).Interface()
		}
		if err := rows.Scan(dest...); err != nil {
			t.Fatal(err)
		}
		lits := make([]string, len(dest))
		for i, d := range dest {
			v := reflect.ValueOf(d).Elem().Interface()
			if tm, ok := v.(time.Time); ok {
				lits[i] = "'" + tm.UTC().Format(time.DateTime) + "'"
			} else {
				lits[i] = literal(t, v)
			}
		}
		values = append(values, "("+strings.Join(lits, ", ")+")")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(values) == 0 {
		t.Fatalf("copy: no rows from %s", sql)
	}
	insert := "INSERT INTO usage_samples (" + strings.Join(rows.Columns(), ", ") + ") VALUES " + strings.Join(values, ", ")
	if err := modern.exec(insert); err != nil {
		t.Fatalf("copy into chDB: %v", err)
	}
}
