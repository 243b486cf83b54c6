package store_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/spool"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
	"github.com/gpumeter/gpumeter/internal/usage"
)

// A simulated fleet for the catch-up runs: 125 hosts of 8 GPUs, each GPU
// split into two MIG instances of two tenants plus its idle row, so 3 rows
// per GPU per 10 s poll: 0.3 rows/s per GPU, 300 rows/s for the fleet.
const (
	fleetHosts       = 125
	fleetGPUsPerHost = 8
	fleetRowsPerGPU  = 3
	fleetPollRows    = fleetHosts * fleetGPUsPerHost * fleetRowsPerGPU // 3,000
	fleetInterval    = 10 * time.Second
	// liveSlices: live polls arrive spread over the interval, a tenth of
	// the fleet each second, as hosts poll out of step.
	liveSlices = 10
)

type fleetSlot struct {
	host, gpu, mig, profile, sku, tenant, dept, workload string
}

// catchUpFleet builds polls of the simulated fleet and sums what it made.
type catchUpFleet struct {
	slots []fleetSlot
	start time.Time

	mu     sync.Mutex
	rows   uint64
	gpuUS  uint64
	energy uint64
}

func newCatchUpFleet(start time.Time) *catchUpFleet {
	f := &catchUpFleet{start: start}
	for h := range fleetHosts {
		for g := range fleetGPUsPerHost {
			host, gpu := fmt.Sprintf("host-%03d", h), fmt.Sprintf("GPU-%03d-%d", h, g)
			for k := range fleetRowsPerGPU {
				s := fleetSlot{host: host, gpu: gpu, sku: "H100-SXM5-80GB"}
				if k < 2 { // two 3g.40gb instances held by tenants; the third row is idle
					tenant := fmt.Sprintf("tenant-%02d", (h*fleetGPUsPerHost+g*2+k)%40)
					s.mig, s.profile, s.sku = fmt.Sprintf("MIG-%03d-%d-%d", h, g, k), "3g.40gb", "H100-SXM5-80GB/3g.40gb"
					s.tenant, s.dept, s.workload = tenant, "dept-"+tenant[len(tenant)-1:], tenant+"/job-"+gpu
				}
				f.slots = append(f.slots, s)
			}
		}
	}
	return f
}

// poll returns rows [lo, hi) of the fleet's next poll, and counts them.
func (f *catchUpFleet) poll(n, lo, hi int) []collectors.Sample {
	st := f.start.Add(time.Duration(n) * fleetInterval)
	out := make([]collectors.Sample, 0, hi-lo)
	var gpuUS, energy uint64
	for i := lo; i < hi; i++ {
		s := f.slots[i]
		x := collectors.Sample{
			// Unique and non-zero without hashing: the test checks ids.
			ID:   uint64(n)*fleetPollRows + uint64(i) + 1,
			Host: s.host, GPUUUID: s.gpu, GPUModel: "H100-SXM5-80GB", MIGUUID: s.mig, MIGProfile: s.profile, SKU: s.sku,
			Tenant: s.tenant, Department: s.dept, Workload: s.workload,
			Start: st, End: st.Add(fleetInterval),
			Values: meter.Values{GPUMicroseconds: 10_000_000 * 3 / 7, SMActiveMicroseconds: uint64(i%1000) * 1000,
				MemMiBSeconds: 40960 * 10, MemPeakBytes: 40 << 30, EnergyMillijoules: 1_000_000 + uint64(i)},
		}
		if s.mig == "" {
			x.GPUMicroseconds = 10_000_000 - 2*x.GPUMicroseconds
		}
		gpuUS += x.GPUMicroseconds
		energy += x.EnergyMillijoules
		out = append(out, x)
	}
	f.mu.Lock()
	f.rows += uint64(len(out))
	f.gpuUS += gpuUS
	f.energy += energy
	f.mu.Unlock()
	return out
}

type catchUpResult struct {
	backlogRows int
	catchUp     time.Duration // shipper start until less than one fleet poll is left
	drainRate   float64       // rows shipped per second until then, live arrivals included
	liveRows    int
}

// runCatchUp spools hours of the fleet while ClickHouse is "down" (no
// shipper), then starts the shipper while live polls keep arriving at the
// fleet's rate, waits until it has caught up, lets it run live for a
// while, and checks that ClickHouse holds every sample exactly once.
func runCatchUp(tb testing.TB, hours int, liveAfter time.Duration) catchUpResult {
	tb.Helper()
	ctx := context.Background()
	s := storetest.New(tb)
	logger := slog.New(slog.DiscardHandler)
	cfg := spool.DefaultConfig(tb.TempDir())
	cfg.MaxBytes = 4 << 30 // the outage must not overflow: this is about catching up
	sp, err := spool.Open(ctx, cfg, logger, nil)
	if err != nil {
		tb.Fatal(err)
	}
	defer sp.Close()
	fleet := newCatchUpFleet(time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC))
	backlogPolls := hours * int(time.Hour/fleetInterval)
	for n := range backlogPolls {
		if err := sp.Append(ctx, fleet.poll(n, 0, fleetPollRows)); err != nil {
			tb.Fatal(err)
		}
	}
	backlog, _ := sp.Backlog()
	if backlog != int64(backlogPolls*fleetPollRows) {
		tb.Fatalf("backlog %d rows, want %d", backlog, backlogPolls*fleetPollRows)
	}

	sh, err := spool.NewShipper(sp, s, spool.DefaultShipperConfig(), logger, nil)
	if err != nil {
		tb.Fatal(err)
	}
	shipCtx, stopShip := context.WithCancel(ctx)
	liveCtx, stopLive := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopShip()
	defer stopLive()
	t0 := time.Now()
	wg.Go(func() { sh.Run(shipCtx) })
	liveErr := make(chan error, 1)
	wg.Go(func() {
		tick := time.NewTicker(fleetInterval / liveSlices)
		defer tick.Stop()
		for k := 0; ; k++ {
			select {
			case <-liveCtx.Done():
				liveErr <- nil
				return
			case <-tick.C:
			}
			n, slice := backlogPolls+k/liveSlices, k%liveSlices
			lo, hi := slice*fleetPollRows/liveSlices, (slice+1)*fleetPollRows/liveSlices
			if err := sp.Append(ctx, fleet.poll(n, lo, hi)); err != nil {
				liveErr <- err
				return
			}
		}
	})

	var res catchUpResult
	res.backlogRows = int(backlog)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for rows, _ := sp.Backlog(); rows >= fleetPollRows; rows, _ = sp.Backlog() {
		if time.Since(t0) > 5*time.Minute {
			tb.Fatalf("not caught up after 5 minutes: %d rows behind", rows)
		}
		<-tick.C
	}
	res.catchUp = time.Since(t0)
	fleet.mu.Lock()
	res.liveRows = int(fleet.rows) - res.backlogRows
	fleet.mu.Unlock()
	left, _ := sp.Backlog()
	res.drainRate = float64(res.backlogRows+res.liveRows-int(left)) / res.catchUp.Seconds()

	// Live for a while, then the collector stops and the rest drains.
	time.Sleep(liveAfter)
	stopLive()
	if err := <-liveErr; err != nil {
		tb.Fatalf("live append: %v", err)
	}
	for rows, bytes := sp.Backlog(); bytes > 0; rows, bytes = sp.Backlog() {
		if time.Since(t0) > 6*time.Minute {
			tb.Fatalf("not drained: %d rows left", rows)
		}
		<-tick.C
	}
	stopShip()
	wg.Wait()

	raw, distinct, err := s.SampleCounts(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	usage, err := s.Usage(ctx, usage.Query{From: fleet.start, To: fleet.start.Add(48 * time.Hour)})
	if err != nil {
		tb.Fatal(err)
	}
	fleet.mu.Lock()
	defer fleet.mu.Unlock()
	if distinct != fleet.rows || len(usage) != 1 || usage[0].Samples != fleet.rows {
		tb.Fatalf("ClickHouse holds %d distinct sample ids (%+v deduplicated), want the %d appended", distinct, usage, fleet.rows)
	}
	if usage[0].GPUMicroseconds != fleet.gpuUS || usage[0].EnergyMillijoules != fleet.energy {
		tb.Fatalf("stored totals gpu %d µs, energy %d mJ; appended %d µs, %d mJ", usage[0].GPUMicroseconds, usage[0].EnergyMillijoules, fleet.gpuUS, fleet.energy)
	}
	if raw != fleet.rows {
		// At least once: a resent insert is allowed (reads deduplicate),
		// but none happens without a fault, so it is worth a look.
		tb.Logf("%d rows stored for %d samples: %d sent twice", raw, fleet.rows, raw-fleet.rows)
	}
	return res
}

// One hour of a 1,000-GPU fleet (1.08 M samples) spooled during an outage
// drains while the fleet keeps polling; nothing is lost or counted twice.
// BenchmarkCatchUp runs the three-hour version.
func TestCatchUpAfterAnOutage(t *testing.T) {
	res := runCatchUp(t, 1, 2*time.Second)
	t.Logf("backlog %d rows (1 h of 1,000 GPUs): caught up in %.1f s at %.0f rows/s, %d live rows arrived meanwhile",
		res.backlogRows, res.catchUp.Seconds(), res.drainRate, res.liveRows)
}

// BenchmarkCatchUp: three hours of a 1,000-GPU fleet (3.24 M samples)
// behind, while the fleet keeps polling. Reports the drain rate and the
// time until the shipper is less than one fleet poll behind.
func BenchmarkCatchUp(b *testing.B) {
	var rate, secs float64
	for i := 0; i < b.N; i++ {
		load := loadAverage()
		res := runCatchUp(b, 3, time.Second)
		b.Logf("backlog %d rows (3 h of 1,000 GPUs): caught up in %.1f s at %.0f rows/s, %d live rows meanwhile; loadavg before %s, after %s",
			res.backlogRows, res.catchUp.Seconds(), res.drainRate, res.liveRows, load, loadAverage())
		rate += res.drainRate
		secs += res.catchUp.Seconds()
	}
	b.ReportMetric(rate/float64(b.N), "drain_rows/s")
	b.ReportMetric(secs/float64(b.N), "catch_up_s")
}
