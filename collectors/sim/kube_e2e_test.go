package sim_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/collectors/attribution"
	"github.com/gpumeter/gpumeter/collectors/sim"
	"github.com/gpumeter/gpumeter/collectors/sim/rig"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
	"github.com/gpumeter/gpumeter/internal/usage"
)

// The production collector over a simulated Kubernetes node (kube.go: a
// DRA whole GPU, a DRA MIG device, one claim three pods share by
// time-slicing, a GPU HAMi shares between four pods at 25 % cores), its
// PodResources served on a unix socket, its ResourceSlices and HAMi
// annotations read as the collector reads them, the samples stored in the
// real ClickHouse: per GPU and interval allocated + idle is the interval,
// per pod ClickHouse holds what the simulator's ledger ran, measured and,
// for HAMi's pods, granted (four pods at 25 % for an hour: 1 GPU-hour).
func TestKubeNodeOnClickHouse(t *testing.T) {
	const d = time.Hour
	for _, granted := range []bool{false, true} {
		t.Run(map[bool]string{false: "measured", true: "granted"}[granted], func(t *testing.T) {
			cfg := sim.DefaultConfig()
			cfg.Start, cfg.Seed, cfg.Hosts, cfg.KubeHosts, cfg.Root = fleetStart, 3, 0, 1, t.TempDir()
			o := rig.DefaultOptions()
			o.Apportion = attribution.Options{Granted: granted}
			logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			f, samples, err := rig.Simulate(context.Background(), cfg, o, d, logger)
			if err != nil {
				t.Fatal(err)
			}
			type gpuInterval struct {
				gpu   string
				start time.Time
			}
			wall := map[gpuInterval]uint64{}
			for _, s := range samples {
				if err := s.Validate(); err != nil {
					t.Fatalf("invalid sample %+v: %v", s, err)
				}
				wall[gpuInterval{s.GPUUUID, s.Start}] += s.GPUMicroseconds
			}
			if want := 8 * int(d/cfg.Step); len(wall) != want {
				t.Errorf("%d GPU intervals, want %d", len(wall), want)
			}
			for k, us := range wall {
				if us != uint64(cfg.Step/time.Microsecond) {
					t.Errorf("%s %s: allocated + idle %d µs, want the interval", k.gpu, k.start.Format(time.TimeOnly), us)
				}
			}

			st := storetest.New(t)
			ctx := context.Background()
			if err := st.InsertSamples(ctx, samples); err != nil {
				t.Fatal(err)
			}
			rows, err := st.Usage(ctx, usage.Query{From: f.Start(), To: f.Start().Add(d), GroupBy: []usage.Dimension{usage.DimHost, usage.DimWorkload},
				Scope: auth.Scope{Kind: auth.KindAdmin}, Source: usage.SourceRaw})
			if err != nil {
				t.Fatal(err)
			}
			stored := map[string]uint64{}
			var total uint64
			for _, r := range rows {
				stored[r.Workload] += r.GPUMicroseconds
				total += r.GPUMicroseconds
			}
			if want := uint64(8 * d / time.Microsecond); total != want {
				t.Errorf("ClickHouse holds %d µs, want 8 GPUs × 1 h = %d", total, want)
			}
			led := f.Ledger()
			want := led.GPUMicrosecondsByPod
			if granted {
				want = map[string]uint64{}
				for pod, us := range led.GPUMicrosecondsByPod {
					if !strings.HasPrefix(pod, "hami-") {
						want[pod] = us
					}
				}
				var hami uint64
				for pod, us := range led.GrantedGPUMicrosecondsByPod {
					want[pod] = us
					hami += us
					if us != uint64(d/4/time.Microsecond) {
						t.Errorf("%s granted %d µs, want a quarter of the hour", pod, us)
					}
				}
				if hami != uint64(time.Hour/time.Microsecond) {
					t.Errorf("four HAMi pods at 25 %% for an hour: %d µs, want 1 GPU-hour", hami)
				}
			}
			if len(want) != 9 {
				t.Fatalf("ledger has %d pods, want 9: %v", len(want), want)
			}
			for pod, us := range want {
				if stored[pod] != us {
					t.Errorf("%s: ClickHouse %d µs, simulator %d µs (diff %d)", pod, stored[pod], us, int64(stored[pod])-int64(us))
				}
				if us == 0 {
					t.Errorf("%s ran nothing", pod)
				}
			}
			for w, us := range stored {
				if _, ok := want[w]; !ok && w != "" && us > 0 {
					t.Errorf("%s: ClickHouse %d µs, not a pod of the simulator", w, us)
				}
			}
			t.Logf("%d samples; per pod %s", len(samples), fmt.Sprint(stored))
		})
	}
}
