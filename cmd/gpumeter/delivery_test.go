package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/store/storetest"
	"github.com/gpumeter/gpumeter/tests/harness"
)

// TestMain lets a test re-run this binary as the gpumeter command, so a
// test can SIGKILL a real collector process.
func TestMain(m *testing.M) {
	if os.Getenv("GPUMETER_TEST_AS_MAIN") == "1" {
		os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// privateDB, storedSamples and eventually are the harness's
// (tests/harness), shared with the slow tests under tests/.
func privateDB(t *testing.T) (*storetest.Server, string) { t.Helper(); return harness.PrivateDB(t) }

func storedSamples(dsn string) uint64 { return harness.StoredSamples(dsn) }

func eventually(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	harness.Eventually(t, what, timeout, cond)
}

// ClickHouse stopped in the middle of a collector run and started again:
// every sample arrives, none is counted twice.
func TestCollectSurvivesClickHouseOutage(t *testing.T) {
	srv, dsn := privateDB(t)
	start := time.Date(2026, 11, 9, 0, 0, 0, 0, time.UTC)
	args := []string{"--clickhouse", dsn, "collect", "--simulate", "--hosts", "2", "--seed", "11",
		"--start", start.Format(time.RFC3339), "--duration", "2h", "--speed", "900", // ~8 s of wall time
		"--spool", t.TempDir(), "--batch-rows", "1", "--ship-batch-rows", "10000", "--ship-flush", "200ms",
		"--ship-backoff-max", "500ms", "--listen", ""}
	var wg sync.WaitGroup
	var code int
	var mu sync.Mutex
	var errb bytes.Buffer
	stderrText := func() string { mu.Lock(); defer mu.Unlock(); return errb.String() }
	wg.Add(1)
	go func() {
		defer wg.Done()
		var out bytes.Buffer
		code = run(context.Background(), args, &out, writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return errb.Write(p) }))
	}()
	eventually(t, "first samples in ClickHouse", time.Minute, func() bool { return storedSamples(dsn) > 0 })
	srv.Stop()
	before := time.Now()
	// Keep it down across several failed inserts (retries with backoff).
	const failed = "shipper insert failed, retrying"
	eventually(t, "three failed inserts", time.Minute, func() bool { return strings.Count(stderrText(), failed) >= 3 })
	srv.Start()
	t.Logf("ClickHouse was down for %s", time.Since(before).Round(100*time.Millisecond))
	wg.Wait()
	if code != 0 {
		t.Fatalf("collect exit %d\n%s", code, stderrText())
	}
	harness.AssertStoredMatchesSimulator(t, dsn, 11, 2, start, 2*time.Hour)
}

// The collector killed with SIGKILL in the middle of shipping and started
// again: every sample its poll loop produced arrives, none counted twice.
func TestCollectSurvivesSIGKILLWhileShipping(t *testing.T) {
	srv, dsn := privateDB(t)
	spoolDir := t.TempDir()
	start := time.Date(2026, 11, 10, 0, 0, 0, 0, time.UTC)
	common := []string{"--clickhouse", dsn, "collect", "--simulate", "--hosts", "2", "--seed", "5", "--spool", spoolDir,
		"--batch-rows", "5000", "--ship-batch-rows", "10000", "--ship-flush", "100ms", "--ship-backoff-max", "200ms", "--listen", ""}

	// Run 1 polls a whole simulated day with ClickHouse down, so every
	// sample is in the spool when the loop ends; then ClickHouse comes back
	// and the process is killed while the shipper is part-way through.
	srv.Stop()
	var errb bytes.Buffer
	cmd := exec.Command(os.Args[0], append(common, "--start", start.Format(time.RFC3339), "--duration", "24h")...)
	cmd.Env = append(os.Environ(), "GPUMETER_TEST_AS_MAIN=1")
	var mu sync.Mutex
	cmd.Stderr = writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return errb.Write(p) })
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	logged := func(s string) func() bool {
		return func() bool { mu.Lock(); defer mu.Unlock(); return strings.Contains(errb.String(), s) }
	}
	eventually(t, "the poll loop to finish", 2*time.Minute, logged("waiting for the spool to ship"))
	srv.Start()
	eventually(t, "shipping to begin", time.Minute, func() bool { return storedSamples(dsn) > 0 })
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := <-exited; err == nil {
		t.Fatal("run 1 finished before it was killed: nothing was left mid-shipping")
	}
	// Killed before its drain finished, after shipping began: mid-shipping.
	shippedBeforeKill := storedSamples(dsn)

	// Run 2 is a restart: it collects a later hour and ships what run 1
	// left in the spool.
	var out2, err2 bytes.Buffer
	code := run(context.Background(), append(common, "--start", start.Add(24*time.Hour).Format(time.RFC3339), "--duration", "1h"), &out2, &err2)
	if code != 0 {
		t.Fatalf("run 2 exit %d\n%s", code, err2.String())
	}
	t.Logf("%d samples stored before the kill", shippedBeforeKill)
	harness.AssertStoredMatchesSimulator(t, dsn, 5, 2, start, 24*time.Hour)
	harness.AssertStoredMatchesSimulator(t, dsn, 5, 2, start.Add(24*time.Hour), time.Hour)
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
