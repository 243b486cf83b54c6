package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
	"github.com/gpumeter/gpumeter/tests/harness"
)

// /metrics names tenants and their quota figures, so it is served on its
// own listener (server.metrics_listen) and never on the API and portal's.
func TestServeAnswersHealthReadinessAndMetrics(t *testing.T) {
	dsn := testDSN(t)
	addr, metricsAddr := harness.FreeAddr(t), harness.FreeAddr(t)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var stderr bytes.Buffer
	go func() {
		done <- run(ctx, []string{"--clickhouse", dsn, "serve", "--plain-http", "--metrics-listen", metricsAddr, "--audit-queue", t.TempDir(), "--listen", addr}, io.Discard, &stderr)
	}()

	get := func(path string) (int, string) { return harness.HTTPGet(addr, path) }
	eventually(t, "serve to listen", 30*time.Second, func() bool { code, _ := get("/healthz"); return code == 200 })
	if code, body := get("/readyz"); code != 200 || !strings.Contains(body, "ready") {
		t.Errorf("/readyz = %d %s", code, body)
	}
	if code, body := harness.HTTPGet(metricsAddr, "/metrics"); code != 200 || !strings.Contains(body, "go_goroutines") {
		t.Errorf("/metrics on the metrics listener = %d, no runtime metrics", code)
	}
	if code, body := get("/metrics"); code != 404 || strings.Contains(body, "gpumeter_") {
		t.Errorf("/metrics on the API port = %d %.80s, want 404", code, body)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("serve exit %d: %s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop after its context ended")
	}
	if want := "portal_url=http://" + addr + "/portal/"; !strings.Contains(stderr.String(), want) {
		t.Errorf("serve did not log %s at start:\n%s", want, stderr.String())
	}
}

// startServe runs `gpumeter <global...> serve` on a free loopback port,
// with /metrics off and an audit queue of its own, and returns its address
// once /readyz answers. stop ends it and waits for it (the audit writer
// flushes as it stops); the test's cleanup calls it too.
func startServe(t *testing.T, global ...string) (addr string, stop func()) {
	t.Helper()
	addr = harness.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append(global, "serve", "--plain-http", "--listen", addr, "--metrics-listen", "", "--audit-queue", t.TempDir()), io.Discard, io.Discard)
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	eventually(t, "serve to be ready", 30*time.Second, func() bool { code, _ := harness.HTTPGet(addr, "/readyz"); return code == 200 })
	return addr, stop
}

// /readyz is unready while ClickHouse is down and ready again when it
// returns; on a database whose migrations are not applied it says so.
func TestServeReadinessFollowsClickHouseAndMigrations(t *testing.T) {
	srv, dsn := privateDB(t)
	addr := harness.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--clickhouse", dsn, "serve", "--plain-http", "--metrics-listen", "127.0.0.1:0", "--audit-queue", t.TempDir(), "--listen", addr}, io.Discard, io.Discard)
	}()
	ready := func(want int, says string) func() bool {
		return func() bool {
			code, body := harness.HTTPGet(addr, "/readyz")
			return code == want && strings.Contains(body, says)
		}
	}
	eventually(t, "ready", 30*time.Second, ready(200, "ready"))
	srv.Stop()
	eventually(t, "unready while ClickHouse is down", 30*time.Second, ready(503, `"clickhouse"`))
	srv.Start()
	eventually(t, "ready once ClickHouse is back", 60*time.Second, ready(200, "ready"))
	cancel()
	<-done

	// A database nobody migrated.
	cfg := storetest.Config(t)
	if err := store.CreateDatabase(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.DropDatabase(context.Background(), cfg, cfg.Database) })
	addr = harness.FreeAddr(t)
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	go func() {
		done <- run(ctx2, []string{"--clickhouse", fmt.Sprintf("clickhouse://%s/%s", cfg.Addrs[0], cfg.Database), "serve", "--plain-http", "--metrics-listen", "127.0.0.1:0", "--audit-queue", t.TempDir(), "--listen", addr}, io.Discard, io.Discard)
	}()
	eventually(t, "unready without migrations", 30*time.Second, ready(503, `"migrations"`))
	cancel2()
	<-done
}
