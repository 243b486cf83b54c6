package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/store/storetest"
	"github.com/gpumeter/gpumeter/tests/harness"
)

// BenchmarkAdmissionReplicas is an admission's latency through the same
// round-robin proxy (the failover test's) to one replica without an
// election, and to three with ZooKeeper, where two requests in three
// reach a follower and are forwarded to the leader (docs/performance.md,
// "Admission with three replicas"). 8 clients at once; every admission is
// allowed (the limit is far off), so each is held and written to the
// admission log as in production. Both deployments run side by side
// (each its own database), so the two figures come from one run.
//
//	go test -run '^$' -bench BenchmarkAdmissionReplicas -benchtime 3000x ./cmd/gpumeter/
func BenchmarkAdmissionReplicas(b *testing.B) {
	extra := "server:\n  rate_limit: {per_second: 100000, burst: 100000}\n" +
		"quotas:\n  refresh: 1s\n  reservation_ttl: 1s\n  rules:\n    - tenant: uni-astro\n      concurrent_gpus: {limit: 1000000}\n"
	zk := storetest.StartZooKeeper(b)
	deployments := []struct {
		name     string
		replicas int
		zk       int
	}{{"replicas=1", 1, 0}, {"replicas=3", 3, zk}}
	proxies := make([]string, len(deployments))
	tokens := make([]string, len(deployments))
	for i, d := range deployments {
		cfg := storetest.Config(b)
		storetest.NewWithConfig(b, cfg)
		dsn := fmt.Sprintf("clickhouse://%s/%s", cfg.Addrs[0], cfg.Database)
		var out, errb bytes.Buffer
		if code := run(context.Background(), []string{"--clickhouse", dsn, "keys", "create", "--scope", "admin", "--expires", "1h"}, &out, &errb); code != 0 {
			b.Fatalf("keys create: exit %d\n%s", code, errb.String())
		}
		tokens[i] = strings.TrimSpace(out.String())
		var addrs []string
		for range d.replicas {
			p := newProcReplica(b, dsn, d.zk, extra)
			p.start(b)
			addrs = append(addrs, p.addr)
		}
		harness.Eventually(b, "a replica deciding", 10*time.Second, func() bool { return leaderOf(addrs[0], tokens[i]) != "" })
		proxies[i] = harness.FreeAddr(b)
		ln, err := net.Listen("tcp", proxies[i])
		if err != nil {
			b.Fatal(err)
		}
		proxy := &http.Server{Handler: newRoundRobin(addrs)}
		go func() { _ = proxy.Serve(ln) }()
		b.Cleanup(func() { proxy.Close() })
	}
	client := &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 16}, Timeout: 15 * time.Second}
	for i, d := range deployments {
		b.Run(d.name, func(b *testing.B) {
			var mu sync.Mutex
			latencies := make([]time.Duration, 0, b.N)
			b.SetParallelism(4) // 8 clients with GOMAXPROCS 2
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					a := postAdmission(client, "http://"+proxies[i], tokens[i], "uni-astro")
					if !a.decided() || !a.allowed {
						b.Errorf("an admission: %d (allowed %v): %s", a.status, a.allowed, a.err)
						return
					}
					mu.Lock()
					latencies = append(latencies, a.done.Sub(a.sent))
					mu.Unlock()
				}
			})
			b.StopTimer()
			slices.Sort(latencies)
			if len(latencies) == 0 {
				return
			}
			at := func(q float64) float64 {
				return float64(latencies[min(len(latencies)-1, int(q*float64(len(latencies))))]) / float64(time.Millisecond)
			}
			b.ReportMetric(at(0.50), "p50-ms")
			b.ReportMetric(at(0.99), "p99-ms")
			b.ReportMetric(at(0.999), "p99.9-ms")
		})
	}
}
