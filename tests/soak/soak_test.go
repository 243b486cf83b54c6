package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/tests/harness"
)

// The soak tests run a simulated fleet through the real collector process
// (spool, shipper) into a private ClickHouse while ClickHouse is stopped
// and SIGKILLed at random moments and the collector is SIGKILLed and
// restarted, with small spool segments. Each run's seed comes from the
// test log line "soak seed", so a failure can be replayed with
// GPUMETER_SOAK_SEED.
//
// Under reject (with room to spare) every sample the simulator produced is
// stored exactly once. Under drop_oldest (a spool far smaller than an
// outage's backlog) every sample is stored once or counted as dropped by
// the spool, never both and never neither.

const (
	soakHosts  = 2
	soakWindow = 2 * time.Hour // simulated time per collector run
	soakSpeed  = "1800"        // simulated seconds per wall second: a window polls in about 4 s
)

var soakStart = time.Date(2026, 10, 5, 0, 0, 0, 0, time.UTC)

func TestSoakRejectLosesNothing(t *testing.T) {
	runSoak(t, soakConfig{policy: "reject", maxBytes: 1 << 30, windows: 4, seed: 21})
}

func TestSoakDropOldestCountsEveryLoss(t *testing.T) {
	runSoak(t, soakConfig{policy: "drop_oldest", maxBytes: 256 << 10, windows: 3, seed: 22})
}

type soakConfig struct {
	policy   string
	maxBytes int64
	windows  int // simulated windows that must complete
	seed     int64
}

// soakResult is what the collector processes reported in their logs; a
// SIGKILLed process keeps what it logged before it died.
type soakResult struct {
	droppedRows   uint64 // rows the spool counted as lost
	deliveredLate uint64 // rows of dropped segments an insert in flight delivered anyway
	rejected      bool   // the spool refused a batch (reject policy)
	kills         int    // collector processes SIGKILLed
	killsDraining int    // of which while draining (everything spooled)
}

var (
	reDropped   = regexp.MustCompile(`msg="spool full, dropped oldest segment[^"]*".* rows=(\d+)`)
	reDelivered = regexp.MustCompile(`msg="rows of a dropped segment delivered[^"]*".* rows=(\d+)`)
)

func runSoak(t *testing.T, cfg soakConfig) {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("GPUMETER_SOAK_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("GPUMETER_SOAK_SEED: %v", err)
		}
	}
	t.Logf("soak seed %d (GPUMETER_SOAK_SEED replays it)", seed)
	rng := rand.New(rand.NewPCG(seed, uint64(cfg.seed)))

	srv, dsn := harness.PrivateDB(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "gpumeter.yaml")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("collector:\n  spool:\n    segment_bytes: 65536\n    max_bytes: %d\n    overflow: %s\n",
		cfg.maxBytes, cfg.policy)), 0o600); err != nil {
		t.Fatal(err)
	}
	spoolDir := filepath.Join(dir, "spool")

	// ClickHouse chaos: down (stopped or SIGKILLed) for 0.3-1.5 s, up for
	// 0.5-2 s, until the collector runs are over.
	chaosCtx, stopChaos := context.WithCancel(context.Background())
	var chaosWG sync.WaitGroup
	var outages, serverKills int
	chaosWG.Add(1)
	go func() {
		defer chaosWG.Done()
		crng := rand.New(rand.NewPCG(seed, 1))
		for pause(chaosCtx, 500+crng.IntN(1500)) {
			if crng.IntN(2) == 0 {
				srv.Kill()
				serverKills++
			} else {
				srv.Stop()
			}
			outages++
			pause(chaosCtx, 300+crng.IntN(1200))
			srv.Start()
		}
	}()

	var res soakResult
	for w := 0; w < cfg.windows; {
		from := soakStart.Add(time.Duration(w) * soakWindow)
		args := []string{"--config", conf, "--clickhouse", dsn, "collect", "--simulate", "--hosts", strconv.Itoa(soakHosts),
			"--seed", strconv.FormatInt(cfg.seed, 10), "--start", from.Format(time.RFC3339), "--duration", soakWindow.String(),
			"--speed", soakSpeed, "--spool", spoolDir, "--batch-rows", "1", "--ship-batch-rows", "10000",
			"--ship-flush", "100ms", "--ship-backoff-max", "300ms", "--drain-timeout", "2m", "--listen", ""}
		// Kill about half the runs, at a random moment; never the last
		// allowed try, so the soak ends.
		killAfter := time.Duration(0)
		if res.kills < 3*cfg.windows && rng.IntN(2) == 0 {
			killAfter = time.Duration(500+rng.IntN(6000)) * time.Millisecond
		}
		out, killed, draining := runCollector(t, args, killAfter, cfg.policy == "drop_oldest")
		res.add(out)
		if killed {
			res.kills++
			if draining {
				res.killsDraining++
			}
		}
		// A run killed while polling lost what it held in memory (never
		// acknowledged): the simulator replays the same window, with the
		// same sample ids. A run killed while draining had spooled its
		// whole window: only the spool can deliver it, so the next run
		// moves on.
		if !killed || draining {
			w++
		}
	}
	stopChaos()
	chaosWG.Wait()
	srv.Start()

	// A last run over an empty window ships whatever the killed runs left.
	tail := soakStart.Add(time.Duration(cfg.windows) * soakWindow)
	out, _, _ := runCollector(t, []string{"--config", conf, "--clickhouse", dsn, "collect", "--simulate", "--hosts", strconv.Itoa(soakHosts),
		"--seed", strconv.FormatInt(cfg.seed, 10), "--start", tail.Format(time.RFC3339), "--duration", "1h",
		"--spool", spoolDir, "--batch-rows", "1", "--ship-flush", "100ms", "--listen", ""}, 0, false)
	res.add(out)
	t.Logf("%s: %d ClickHouse outages (%d SIGKILL), %d collector kills (%d while draining), dropped %d rows, %d of them delivered anyway",
		cfg.policy, outages, serverKills, res.kills, res.killsDraining, res.droppedRows, res.deliveredLate)
	if outages == 0 {
		t.Fatal("ClickHouse was never down: the soak proved nothing")
	}

	// Each run simulated its own window from its start: compare window by
	// window.
	type window struct {
		from time.Time
		d    time.Duration
	}
	var windows []window
	for w := 0; w < cfg.windows; w++ {
		windows = append(windows, window{soakStart.Add(time.Duration(w) * soakWindow), soakWindow})
	}
	windows = append(windows, window{tail, time.Hour})
	switch cfg.policy {
	case "reject":
		if res.rejected || res.droppedRows > 0 {
			t.Fatalf("the spool refused or dropped data with room to spare (dropped %d)", res.droppedRows)
		}
		for _, w := range windows {
			harness.AssertStoredMatchesSimulator(t, dsn, cfg.seed, soakHosts, w.from, w.d)
		}
	case "drop_oldest":
		if res.droppedRows == 0 {
			t.Fatal("nothing was dropped: the spool was never full, so drop_oldest was not tested")
		}
		var want uint64
		for _, w := range windows {
			want += simulatedSamples(t, cfg.seed, w.from, w.d)
		}
		stored := harness.StoredSamples(dsn)
		lost := res.droppedRows - res.deliveredLate
		// Nothing is lost uncounted: stored + counted loss covers the
		// ledger. It is exact unless a collector was SIGKILLed with an insert
		// in flight of rows whose segment had been dropped: the insert may
		// land after the drop was counted, and the dead process cannot log
		// "delivered anyway". Such rows are counted twice, never missed, and
		// at most one spool's worth per kill (docs/delivery.md).
		overcount := uint64(res.killsDraining) * uint64(cfg.maxBytes) / 16
		if stored+lost < want || stored+lost > want+overcount || (res.killsDraining == 0 && stored+lost != want) {
			t.Fatalf("stored %d + counted lost %d = %d, the simulator produced %d (difference %d; %d kills while draining allow %d counted twice)",
				stored, lost, stored+lost, want, int64(stored+lost)-int64(want), res.killsDraining, overcount)
		}
		if stored+lost != want {
			t.Logf("%d rows counted lost were stored after all (a kill with an insert in flight)", stored+lost-want)
		}
	}
}

func (r *soakResult) add(log string) {
	for _, m := range reDropped.FindAllStringSubmatch(log, -1) {
		n, _ := strconv.ParseUint(m[1], 10, 64)
		r.droppedRows += n
	}
	for _, m := range reDelivered.FindAllStringSubmatch(log, -1) {
		n, _ := strconv.ParseUint(m[1], 10, 64)
		r.deliveredLate += n
	}
	if strings.Contains(log, "spool full") && !strings.Contains(log, "dropped oldest segment") {
		r.rejected = true
	}
}

// runCollector runs the gpumeter binary as a child process. With killAfter
// > 0 it is SIGKILLed then (or when it has finished polling, under
// drop_oldest: a kill while polling would replay samples whose first copy
// the spool may have dropped and counted). It returns the stderr, whether
// it was killed, and whether it had finished polling by then.
func runCollector(t *testing.T, args []string, killAfter time.Duration, killOnlyDraining bool) (string, bool, bool) {
	t.Helper()
	p := harness.Start(t, args...)
	logged := p.Stderr.String
	const drainingMsg = "waiting for the spool to ship"

	var timer <-chan time.Time
	if killAfter > 0 {
		timer = time.After(killAfter)
	}
	deadline := time.After(5 * time.Minute)
	for {
		select {
		case <-p.Done():
			if code := p.Wait(t, 0); code != 0 {
				t.Fatalf("collector %v: exit %d\n%s", args, code, logged())
			}
			return logged(), false, true
		case <-timer:
			timer = nil
			if killOnlyDraining && !strings.Contains(logged(), drainingMsg) {
				// Not yet: look again shortly.
				timer = time.After(50 * time.Millisecond)
				continue
			}
			draining := strings.Contains(logged(), drainingMsg)
			if p.Kill(t) {
				// It finished just before the signal: not a kill.
				return logged(), false, true
			}
			return logged(), true, draining
		case <-deadline:
			p.Kill(t)
			t.Fatalf("collector %v did not finish in 5 minutes\n%s", args, logged())
		}
	}
}

// simulatedSamples is the number of samples the collector produces for the
// soak fleet over [start, start+d): the same simulation, into no sink.
func simulatedSamples(t *testing.T, seed int64, start time.Time, d time.Duration) uint64 {
	t.Helper()
	code, out, stderr := harness.Run(t, "collect", "--simulate", "--hosts", strconv.Itoa(soakHosts), "--seed", strconv.FormatInt(seed, 10),
		"--start", start.Format(time.RFC3339), "--duration", d.String(), "--sink", "discard", "--listen", "")
	if code != 0 {
		t.Fatalf("simulate: exit %d\n%s", code, stderr)
	}
	m := regexp.MustCompile(`(\d+) samples written`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no sample count in:\n%s", out)
	}
	n, _ := strconv.ParseUint(m[1], 10, 64)
	return n
}

// pause waits ms milliseconds or until ctx ends; it reports whether the
// time passed (false: ctx ended). The soak's random timing, not a wait for
// a condition.
func pause(ctx context.Context, ms int) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(time.Duration(ms) * time.Millisecond):
		return true
	}
}
