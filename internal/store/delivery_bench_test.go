package store_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/spool"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
	"github.com/gpumeter/gpumeter/internal/usage"
)

// BenchmarkDeliveryEndToEnd measures the collector's delivery path against
// clickhouse-client inserting the very same rows, all in every iteration.
//
//   - e2e: benchRows samples appended to a spool in poll-sized batches of
//     1,000 (each CRC'd and fsynced) while the shipper runs with its
//     defaults, timed from the first append until the spool's backlog is
//     empty (every row acknowledged by ClickHouse and committed).
//   - client: `clickhouse-client --query "INSERT ... FORMAT Native"` of the
//     same rows, exported once (before the timer) from a scratch database
//     sorted by the table's key, since ClickHouse then skips sorting the
//     part; sent twice, as one part of every row (ratio_one_part) and cut
//     into parts of about 100,000 rows like the shipper's (ratio_parts).
//     Which is faster depends on the machine: one part has less per-part
//     work, but the server touches more fresh memory for it, which some
//     VMs make expensive. The ratio is taken against the faster of the two
//     in each iteration, the client's best case.
//   - client, append order: the same rows in the order the collector
//     appended them, which the server has to sort (ratio_append_order).
//   - drain: the same rows appended (and fsynced) before the timer, then
//     the shipper started and timed until the backlog is empty: a
//     collector catching up after an outage (ratio_drain).
//
// The client sends the wire the store's config uses: LZ4 by default, or
// uncompressed (a client config file) when the DSN says compress=none, so
// that neither side saves work the other does.
//
// Each side inserts into a fresh database of its own. The sides rotate
// which goes first, and each starts only once the server has no merge
// running, so that none pays for another's background work. Every
// iteration logs the rates, the ratios, /proc/loadavg and, when the
// server's pid is known (GPUMETER_BENCH_SERVER_PID, or the pid file of
// scripts/clickhouse.sh), the CPU seconds and minor page faults the
// server and this process spent on each side.
func BenchmarkDeliveryEndToEnd(b *testing.B) {
	client, err := exec.LookPath("clickhouse-client")
	if err != nil {
		b.Fatalf("clickhouse-client is needed for the comparison: %v", err)
	}
	samples := testSamples(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC), benchRows, "acme", "globex", "initech")
	// The fixture plays the collector's polls, which a real collector
	// makes and drops batch by batch; held all at once as 1.5 M separate
	// small strings, it would make each garbage collection of the run
	// mark them, a cost of the fixture, not of delivery. Same rows.
	internStrings(samples)
	runtime.GC()
	// testSamples appends GPU by GPU within each interval: that order is
	// (start, gpu_uuid).
	native, appendOrder := exportNative(b, client, samples, "tenant, start, sample_id", "start, gpu_uuid")
	serverPID := benchServerPID(b)

	var e2e, drain, cli, cliParts, cliBest, cliAppend sideTotals
	minRatio := 0.0
	b.ResetTimer()
	b.StopTimer()
	for i := 0; i < b.N; i++ {
		load := loadAverage()
		var e, d, c, p, a sideResult
		sides := []func(){
			func() { e = runShipperSide(b, samples, serverPID, false) },
			func() { d = runShipperSide(b, samples, serverPID, true) },
			func() { c = runClientSide(b, client, native, len(samples), serverPID) },
			func() { p = runClientSide(b, client, native, len(samples), serverPID, clientPartRows...) },
			func() { a = runClientSide(b, client, appendOrder, len(samples), serverPID) },
		}
		for k := range sides {
			sides[(i+k)%len(sides)]()
		}
		best := c
		if p.wall < best.wall {
			best = p
		}
		e2e.add(e)
		drain.add(d)
		cli.add(c)
		cliParts.add(p)
		cliBest.add(best)
		cliAppend.add(a)
		ratio := best.wall.Seconds() / e.wall.Seconds()
		if i == 0 || ratio < minRatio {
			minRatio = ratio
		}
		b.Logf("iteration %d: e2e %.0f rows/s, drain %.0f rows/s (ratio %.3f), client native %.0f rows/s (in 100,000-row parts %.0f, append order %.0f), ratio %.3f (one part %.3f, 100,000-row parts %.3f, append order %.3f); server CPU e2e %.2f s, client %.2f s (parts %.2f s, append order %.2f s); gpumeter CPU %.2f s (GC %.2f s), clickhouse-client CPU %.2f s (parts %.2f s, append order %.2f s); spool append %.0f rows/s; parts sorted on arrival e2e %d/%d, client %d/%d (parts %d/%d, append order %d/%d); minor page faults server e2e %d, client %d (parts %d, append order %d), gpumeter %d, clickhouse-client %d (parts %d); loadavg before %s, after %s",
			i, e.rate(len(samples)), d.rate(len(samples)), best.wall.Seconds()/d.wall.Seconds(), c.rate(len(samples)), p.rate(len(samples)), a.rate(len(samples)),
			ratio, c.wall.Seconds()/e.wall.Seconds(), p.wall.Seconds()/e.wall.Seconds(), a.wall.Seconds()/e.wall.Seconds(),
			e.serverCPU.Seconds(), c.serverCPU.Seconds(), p.serverCPU.Seconds(), a.serverCPU.Seconds(),
			e.selfCPU.Seconds(), e.gcCPU.Seconds(), c.selfCPU.Seconds(), p.selfCPU.Seconds(), a.selfCPU.Seconds(),
			float64(len(samples))/e.appendWall.Seconds(), e.blocksSorted, e.blocks, c.blocksSorted, c.blocks, p.blocksSorted, p.blocks, a.blocksSorted, a.blocks,
			e.serverFaults, c.serverFaults, p.serverFaults, a.serverFaults, e.selfFaults, c.selfFaults, p.selfFaults, load, loadAverage())
	}
	rows := len(samples) * b.N
	b.ReportMetric(e2e.rate(rows), "e2e_rows/s")
	b.ReportMetric(cli.rate(rows), "client_native_rows/s")
	b.ReportMetric(cliParts.rate(rows), "client_native_parts_rows/s")
	b.ReportMetric(cliBest.wall.Seconds()/e2e.wall.Seconds(), "ratio")
	b.ReportMetric(cli.wall.Seconds()/e2e.wall.Seconds(), "ratio_one_part")
	b.ReportMetric(cliParts.wall.Seconds()/e2e.wall.Seconds(), "ratio_parts")
	b.ReportMetric(cliAppend.rate(rows), "client_append_order_rows/s")
	b.ReportMetric(cliAppend.wall.Seconds()/e2e.wall.Seconds(), "ratio_append_order")
	b.ReportMetric(minRatio, "min_ratio")
	b.ReportMetric(drain.rate(rows), "drain_rows/s")
	b.ReportMetric(cliBest.wall.Seconds()/drain.wall.Seconds(), "ratio_drain")
	b.ReportMetric(float64(rows)/e2e.appendWall.Seconds(), "spool_append_rows/s")
	if serverPID > 0 {
		b.ReportMetric(e2e.serverCPU.Seconds()/float64(b.N), "server_cpu_e2e_s/op")
		b.ReportMetric(cli.serverCPU.Seconds()/float64(b.N), "server_cpu_client_s/op")
	}
	b.ReportMetric(e2e.selfCPU.Seconds()/float64(b.N), "gpumeter_cpu_s/op")
	b.ReportMetric(cli.selfCPU.Seconds()/float64(b.N), "client_cpu_s/op")
	b.ReportMetric(loadAverage1(), "loadavg_1m_end")
}

// sideResult is one side of one iteration.
type sideResult struct {
	wall, appendWall   time.Duration
	serverCPU, selfCPU time.Duration
	// parts written and how many of them arrived sorted (server-wide
	// system.events deltas over the side, merges excluded)
	blocks, blocksSorted uint64
	gcCPU                time.Duration // of selfCPU, the Go runtime's estimate of garbage collection
	// minor page faults of the server and of this process (or of
	// clickhouse-client) over the side: memory touched for the first
	// time, which some VMs make expensive (docs/performance.md)
	serverFaults, selfFaults int64
}

func (r sideResult) rate(rows int) float64 { return float64(rows) / r.wall.Seconds() }

type sideTotals struct{ sideResult }

func (t *sideTotals) add(r sideResult) {
	t.wall += r.wall
	t.appendWall += r.appendWall
	t.serverCPU += r.serverCPU
	t.selfCPU += r.selfCPU
}

// runShipperSide appends samples to a new spool with a shipper running
// into a new database, and times it until the backlog is empty. With
// drain, the samples are appended before the timer and the shipper
// starts with it: only the delivery of a backlog is timed.
func runShipperSide(b *testing.B, samples []collectors.Sample, serverPID int, drain bool) sideResult {
	ctx := context.Background()
	logger := slog.New(slog.DiscardHandler)
	s := storetest.New(b)
	sp, err := spool.Open(ctx, spool.DefaultConfig(b.TempDir()), logger, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer sp.Close()
	sh, err := spool.NewShipper(sp, s, spool.DefaultShipperConfig(), logger, nil)
	if err != nil {
		b.Fatal(err)
	}
	appendAll := func() {
		pprof.Do(ctx, pprof.Labels("side", "append"), func(ctx context.Context) {
			for lo := 0; lo < len(samples); lo += 1000 {
				if err := sp.Append(ctx, samples[lo:min(lo+1000, len(samples))]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	if drain {
		appendAll()
	}
	waitForMerges(b, s)
	shipCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	// Labels let a CPU profile of the benchmark (-cpuprofile, then pprof
	// -tagfocus) tell the shipper's goroutines from the appender's.
	ship := func() {
		wg.Go(func() {
			pprof.Do(shipCtx, pprof.Labels("side", "shipper"), func(ctx context.Context) { sh.Run(ctx) })
		})
	}
	if !drain {
		ship()
	}

	var r sideResult
	ev0 := writerEvents(b, s)
	srv0, self0, gc0 := processCPU(serverPID), selfCPU(), gcCPU()
	srvFaults0, selfFaults0 := processFaults(serverPID), selfFaults()
	b.StartTimer()
	t0 := time.Now()
	if drain {
		ship()
	} else {
		appendAll()
	}
	r.appendWall = time.Since(t0)
	tick := time.NewTicker(time.Millisecond)
	for rows, _ := sp.Backlog(); rows > 0; rows, _ = sp.Backlog() {
		<-tick.C
	}
	tick.Stop()
	r.wall = time.Since(t0)
	b.StopTimer()
	r.serverCPU, r.selfCPU, r.gcCPU = processCPU(serverPID)-srv0, selfCPU()-self0, gcCPU()-gc0
	r.serverFaults, r.selfFaults = processFaults(serverPID)-srvFaults0, selfFaults()-selfFaults0
	ev1 := writerEvents(b, s)
	r.blocks, r.blocksSorted = ev1[0]-ev0[0], ev1[1]-ev0[1]
	stop()
	wg.Wait()
	checkStored(b, s, len(samples))
	return r
}

// clientPartRows has the server cut the client's insert into parts of
// about the size of the shipper's (the Native file's 65,536-row blocks,
// squashed to at least 100,000 rows) instead of one part of every row.
var clientPartRows = []string{"--min_insert_block_size_rows=100000"}

// runClientSide inserts the Native file with clickhouse-client into a new
// database, with the settings given (clickhouse-client flags).
func runClientSide(b *testing.B, client, native string, rows, serverPID int, settings ...string) sideResult {
	cfg := storetest.Config(b)
	s := storetest.NewWithConfig(b, cfg)
	waitForMerges(b, s)
	in, err := os.Open(native)
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()
	args := []string{"--host", benchHost(cfg), "--port", benchPort(cfg), "--database", cfg.Database,
		"--query", "INSERT INTO usage_samples (" + sampleColumnsForBench + ") FORMAT Native"}
	args = append(args, settings...)
	if !cfg.Compress {
		args = append([]string{"--config-file", clientNoCompression(b)}, args...)
	}
	imp := exec.Command(client, args...)
	imp.Stdin = in
	var r sideResult
	ev0 := writerEvents(b, s)
	srv0, srvFaults0 := processCPU(serverPID), processFaults(serverPID)
	b.StartTimer()
	t0 := time.Now()
	out, err := imp.CombinedOutput()
	r.wall = time.Since(t0)
	b.StopTimer()
	r.serverCPU, r.serverFaults = processCPU(serverPID)-srv0, processFaults(serverPID)-srvFaults0
	if imp.ProcessState != nil {
		r.selfCPU = imp.ProcessState.UserTime() + imp.ProcessState.SystemTime()
		if ru, ok := imp.ProcessState.SysUsage().(*syscall.Rusage); ok {
			r.selfFaults = ru.Minflt
		}
	}
	ev1 := writerEvents(b, s)
	r.blocks, r.blocksSorted = ev1[0]-ev0[0], ev1[1]-ev0[1]
	if err != nil {
		b.Fatalf("clickhouse-client insert: %v %s", err, out)
	}
	checkStored(b, s, rows)
	return r
}

// clientNoCompression writes a clickhouse-client config that sends blocks
// uncompressed, the wire the store uses when its config says so.
func clientNoCompression(b *testing.B) string {
	p := filepath.Join(b.TempDir(), "client.xml")
	if err := os.WriteFile(p, []byte("<yandex><compression>false</compression></yandex>\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	return p
}

// exportNative stores samples in a scratch database and exports them in
// Native format once per order given (ORDER BY lists), which is what the
// client side sends.
func exportNative(b *testing.B, client string, samples []collectors.Sample, orders ...string) (sorted, appendOrder string) {
	cfg := storetest.Config(b)
	cfg.Database += "_src"
	s := storetest.NewWithConfig(b, cfg)
	if err := s.InsertSamples(context.Background(), samples); err != nil {
		b.Fatal(err)
	}
	var files []string
	for i, order := range orders {
		native := filepath.Join(b.TempDir(), fmt.Sprintf("rows%d.native", i))
		f, err := os.Create(native)
		if err != nil {
			b.Fatal(err)
		}
		export := exec.Command(client, "--host", benchHost(cfg), "--port", benchPort(cfg), "--database", cfg.Database,
			"--query", "SELECT "+sampleColumnsForBench+" FROM usage_samples ORDER BY "+order+" FORMAT Native")
		export.Stdout = f
		if err := export.Run(); err != nil {
			b.Fatalf("export: %v", err)
		}
		f.Close()
		files = append(files, native)
	}
	return files[0], files[1]
}

func checkStored(b *testing.B, s *store.Store, want int) {
	b.Helper()
	rows, err := s.Usage(context.Background(), usage.Query{From: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), To: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)})
	if err != nil || len(rows) != 1 || rows[0].Samples != uint64(want) {
		b.Fatalf("database %s holds %+v (%v), want %d samples", s.Database(), rows, err, want)
	}
}

// writerEvents reads the server's counters of parts written by inserts and
// of those that arrived already sorted.
func writerEvents(b *testing.B, s *store.Store) [2]uint64 {
	var ev [2]uint64
	for i, name := range []string{"MergeTreeDataWriterBlocks", "MergeTreeDataWriterBlocksAlreadySorted"} {
		n, err := s.ServerEvent(context.Background(), name)
		if err != nil {
			b.Fatal(err)
		}
		ev[i] = n
	}
	return ev
}

// waitForMerges returns once the server runs no merge, so that one side's
// background work does not land on the other's clock.
func waitForMerges(b *testing.B, s *store.Store) {
	b.Helper()
	deadline := time.Now().Add(time.Minute)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		n, err := s.RunningMerges(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("merges still running after a minute: %d", n)
		}
		<-tick.C
	}
}

// internStrings makes equal strings of samples share one copy.
func internStrings(samples []collectors.Sample) {
	seen := map[string]string{}
	intern := func(p *string) {
		if v, ok := seen[*p]; ok {
			*p = v
			return
		}
		seen[*p] = *p
	}
	for i := range samples {
		x := &samples[i]
		for _, p := range []*string{&x.Host, &x.GPUUUID, &x.GPUModel, &x.MIGUUID, &x.MIGProfile, &x.SKU, &x.Tenant, &x.Department, &x.Workload} {
			intern(p)
		}
	}
}

func benchHost(cfg store.Config) string { return strings.Split(cfg.Addrs[0], ":")[0] }
func benchPort(cfg store.Config) string { return strings.Split(cfg.Addrs[0], ":")[1] }

// benchServerPID is the local ClickHouse server's pid, 0 when unknown.
func benchServerPID(b *testing.B) int {
	v := os.Getenv("GPUMETER_BENCH_SERVER_PID")
	if v == "" {
		cfg := storetest.Config(b)
		data, err := os.ReadFile(filepath.Join("..", "..", ".data", "clickhouse", "tcp-"+benchPort(cfg), "clickhouse.pid"))
		if err != nil {
			b.Logf("server CPU not measured: no GPUMETER_BENCH_SERVER_PID and %v", err)
			return 0
		}
		v = strings.TrimSpace(string(data))
	}
	pid, err := strconv.Atoi(v)
	if err != nil || processCPU(pid) < 0 {
		b.Logf("server CPU not measured: pid %q unreadable", v)
		return 0
	}
	return pid
}

// processFaults is the minor page faults of pid so far, from /proc; 0 for
// pid 0 or when unreadable.
func processFaults(pid int) int64 {
	if pid == 0 {
		return 0
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	if len(f) < 8 {
		return 0
	}
	n, _ := strconv.ParseInt(f[7], 10, 64)
	return n
}

func selfFaults() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Minflt
}

// processCPU is user + system CPU time of pid from /proc, -1 when
// unreadable, 0 for pid 0.
func processCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// Fields after the command name, which is in parentheses.
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	if len(f) < 13 {
		return -1
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * (time.Second / 100) // USER_HZ is 100 on Linux
}

// gcCPU is the Go runtime's estimate of the CPU this process spent on
// garbage collection so far.
func gcCPU() time.Duration {
	m := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(m)
	if m[0].Value.Kind() != metrics.KindFloat64 {
		return 0
	}
	return time.Duration(m[0].Value.Float64() * float64(time.Second))
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loadAverage is the first three fields of /proc/loadavg.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func loadAverage1() float64 {
	f := strings.Fields(loadAverage())
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}
