package spool

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpumeter/gpumeter/collectors"
)

// The SIGKILL tests re-execute the test binary as a child that appends
// and ships until the parent kills it; TestMain routes the child here.
const (
	childModeEnv  = "GPUMETER_SPOOL_CHILD"
	childDirEnv   = "GPUMETER_SPOOL_DIR"
	childStartEnv = "GPUMETER_SPOOL_START"
	childHangEnv  = "GPUMETER_SPOOL_HANG_AT"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(childModeEnv); mode != "" {
		if err := runChild(mode); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func crashConfig(dir string) Config {
	return Config{Dir: dir, SegmentBytes: 64 << 10, MaxBytes: 1 << 30, Overflow: OverflowReject}
}

// crashShipperConfig flushes fast: the child runs on the real clock.
func crashShipperConfig() ShipperConfig {
	return ShipperConfig{BatchRows: 10_000, FlushInterval: 10 * time.Millisecond, BackoffInitial: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond}
}

// idFileSink plays ClickHouse for a child: it appends each insert's sample
// ids to a file and fsyncs before acknowledging, so whatever it
// acknowledged survives the kill.
type idFileSink struct {
	f      *os.File
	out    io.Writer
	calls  int
	hangAt int // hang (until killed) inside call number hangAt, after writing
}

func (s *idFileSink) InsertSamples(ctx context.Context, samples []collectors.Sample) error {
	if err := appendIDs(s.f, samples); err != nil {
		return err
	}
	s.calls++
	fmt.Fprintf(s.out, "inserted %d\n", s.calls)
	if s.calls == s.hangAt {
		// Inserted, not acknowledged: the parent kills us here, between
		// the insert and the cursor commit.
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

// appendIDs appends the ids of samples to f and fsyncs, so that they
// outlive a SIGKILL once it returns.
func appendIDs(f *os.File, samples []collectors.Sample) error {
	b := make([]byte, 0, 8*len(samples))
	for _, x := range samples {
		b = binary.LittleEndian.AppendUint64(b, x.ID)
	}
	if _, err := f.Write(b); err != nil {
		return err
	}
	return f.Sync()
}

// openIDFile opens dir's file of shipped ids for appending.
func openIDFile(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "shipped.ids"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return nil, err
	}
	// An earlier child killed in the middle of a write left part of an
	// id, never acknowledged: cut it so that ids stay 8-byte aligned.
	st, err := f.Stat()
	if err != nil {
		return nil, errors.Join(err, f.Close())
	}
	if err := f.Truncate(st.Size() - st.Size()%8); err != nil {
		return nil, errors.Join(err, f.Close())
	}
	return f, nil
}

func runChild(mode string) error {
	ctx := context.Background()
	dir := os.Getenv(childDirEnv)
	start, _ := strconv.Atoi(os.Getenv(childStartEnv))
	hangAt, _ := strconv.Atoi(os.Getenv(childHangEnv))
	sp, err := Open(ctx, crashConfig(dir), discardLogger(), nil)
	if err != nil {
		return err
	}
	if mode == "inflight" {
		return runInFlightChild(ctx, sp, dir)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if mode == "collect" || mode == "ship" {
		f, err := openIDFile(dir)
		if err != nil {
			return err
		}
		sh, err := NewShipper(sp, &idFileSink{f: f, out: os.Stdout, hangAt: hangAt}, crashShipperConfig(), discardLogger(), nil)
		if err != nil {
			return err
		}
		wg.Go(func() { sh.Run(ctx) })
	}
	if mode == "ship" {
		<-ctx.Done() // until killed
		return nil
	}
	for b := start; b < start+1_000_000; b++ {
		if err := sp.Append(ctx, testBatch(b, 200)); err != nil {
			return err
		}
		fmt.Fprintf(os.Stdout, "acked %d\n", b)
	}
	return nil
}

// runUntilKilled starts a child and SIGKILLs it once stop returns true for
// a line it printed. It returns every line the child printed.
func runUntilKilled(t *testing.T, mode, dir string, start, hangAt int, stop func(line string) bool) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		childModeEnv+"="+mode, childDirEnv+"="+dir,
		childStartEnv+"="+strconv.Itoa(start), childHangEnv+"="+strconv.Itoa(hangAt))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var lines []string
	sc := bufio.NewScanner(out)
	killed := false
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if !killed && stop(sc.Text()) {
			if err := cmd.Process.Kill(); err != nil { // SIGKILL
				t.Fatal(err)
			}
			killed = true
		}
	}
	err = cmd.Wait()
	if !killed {
		t.Fatalf("child exited before it was killed: %v", err)
	}
	if st, ok := cmd.ProcessState.Sys().(interface{ Signaled() bool }); ok && !st.Signaled() {
		t.Fatalf("child was not killed by a signal: %v", err)
	}
	return lines
}

// killAfterAcks runs a child in mode that appends from batch start, kills
// it once it has acknowledged n batches, and returns the last batch it
// acknowledged.
func killAfterAcks(t *testing.T, mode, dir string, start, n int) int {
	t.Helper()
	acks := 0
	lines := runUntilKilled(t, mode, dir, start, 0, func(l string) bool {
		if strings.HasPrefix(l, "acked ") {
			acks++
		}
		return acks == n
	})
	last := -1
	for _, l := range lines {
		if n, ok := strings.CutPrefix(l, "acked "); ok {
			last, _ = strconv.Atoi(n)
		}
	}
	return last
}

func TestSIGKILLWhileAppendingKeepsEveryAcknowledgedBatch(t *testing.T) {
	dir := t.TempDir()
	next := 0
	for round := range 4 {
		acked := killAfterAcks(t, "append", dir, next, 40+round*7) // kill at a different point each round

		sp, err := Open(context.Background(), crashConfig(dir), discardLogger(), prometheus.NewRegistry())
		if err != nil {
			t.Fatalf("round %d: reopen after SIGKILL: %v", round, err)
		}
		got, corrupt := readAll(t, sp)
		if corrupt != 0 {
			t.Fatalf("round %d: %d corrupt regions after SIGKILL", round, corrupt)
		}
		// Batches 0 … k are all there, whole and in order, with k at least
		// the last one acknowledged; the one in flight may or may not be.
		for i, b := range got {
			equalSamples(t, b.Samples, testBatch(i, 200))
		}
		if len(got)-1 < acked {
			t.Fatalf("round %d: %d batches recovered, batch %d was acknowledged", round, len(got), acked)
		}
		next = len(got)
		if err := sp.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// readIDs counts the ids in dir's file of shipped ids.
func readIDs(t *testing.T, dir string) map[uint64]int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "shipped.ids"))
	if err != nil {
		t.Fatal(err)
	}
	ids := map[uint64]int{}
	for len(b) >= 8 { // a torn last id was never acknowledged
		ids[binary.LittleEndian.Uint64(b)]++
		b = b[8:]
	}
	return ids
}

// The shipping SIGKILL tests spool crashBatches batches of crashRows:
// 50,000 rows, five inserts of 10,000.
const crashBatches, crashRows = 100, 500

func fillCrashSpool(t *testing.T, dir string) {
	t.Helper()
	sp, err := Open(context.Background(), crashConfig(dir), discardLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for b := range crashBatches {
		mustAppend(t, sp, testBatch(b, crashRows))
	}
	if err := sp.Close(); err != nil {
		t.Fatal(err)
	}
}

// idCountingSink is a test sink that counts what it acknowledged by id.
type idCountingSink interface {
	Sink
	ackedIDs() map[uint64]int
}

// resendAfterKill checks what a shipping child killed in dir left: it
// inserted childSent samples and left backlog rows spooled (why says
// why). It then ships that backlog to sink and checks that each sample of
// the crash spool was sent, by the child and then by sink, as often as
// timesSent says for its batch.
func resendAfterKill(t *testing.T, dir string, childSent int, backlog int64, why string, sink idCountingSink, timesSent func(batch int) int) {
	t.Helper()
	first := readIDs(t, dir)
	if len(first) != childSent {
		t.Fatalf("child inserted %d samples, want %d", len(first), childSent)
	}
	o := openSpool(t, crashConfig(dir))
	if rows, _ := o.Backlog(); rows != backlog {
		t.Fatalf("backlog after the kill %d rows, want %d: %s", rows, backlog, why)
	}
	onCommit, drained := commitsUntilDrained(o.Spool)
	startShipper(t, o.Spool, sink, crashShipperConfig(), newFakeClock(true), nil, onCommit)
	waitFor(t, drained, "the backlog to drain")
	second := sink.ackedIDs()
	for b := range crashBatches {
		want := timesSent(b)
		for _, s := range testBatch(b, crashRows) {
			if got := first[s.ID] + second[s.ID]; got != want {
				t.Fatalf("sample of batch %d sent %d times, want %d", b, got, want)
			}
		}
	}
}

func TestSIGKILLBetweenInsertAndCommitResendsThatBatchOnly(t *testing.T) {
	dir := t.TempDir()
	fillCrashSpool(t, dir)

	runUntilKilled(t, "ship", dir, 0, 3, func(l string) bool { return l == "inserted 3" })

	resendAfterKill(t, dir, 30_000, 30_000, "the third insert was never committed", &fakeSink{}, func(b int) int {
		// Inserts 1 and 2 were committed: sent once. Insert 3 was
		// sent before the kill and again after. The rest once.
		if n := b * crashRows; n >= 20_000 && n < 30_000 {
			return 2
		}
		return 1
	})
}

func TestSIGKILLWhileCollectingLosesNothingAcknowledged(t *testing.T) {
	dir := t.TempDir()
	next := 0
	for round := range 3 {
		acked := killAfterAcks(t, "collect", dir, next, 120+round*31)

		// Every acknowledged sample is in "ClickHouse" or still spooled
		// after the committed cursor.
		shipped := readIDs(t, dir)
		o := openSpool(t, crashConfig(dir))
		got, corrupt := readAll(t, o.Spool)
		if corrupt != 0 {
			t.Fatalf("round %d: %d corrupt regions after SIGKILL", round, corrupt)
		}
		spooled := map[uint64]bool{}
		maxBatch := -1
		for _, b := range got {
			for _, s := range b.Samples {
				spooled[s.ID] = true
				maxBatch = max(maxBatch, int(s.ID>>32))
			}
		}
		for b := 0; b <= acked; b++ {
			for _, s := range testBatch(b, 200) {
				if shipped[s.ID] == 0 && !spooled[s.ID] {
					t.Fatalf("round %d: sample of acknowledged batch %d neither shipped nor spooled", round, b)
				}
			}
		}
		next = max(acked, maxBatch) + 1
		for id := range shipped {
			next = max(next, int(id>>32)+1)
		}
		if err := o.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
