package auditqueue

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/auth"
)

func entries(from, n int) []auth.AuditEntry {
	var out []auth.AuditEntry
	for i := from; i < from+n; i++ {
		out = append(out, auth.AuditEntry{At: time.Date(2026, 12, 6, 12, 0, i, 0, time.UTC), KeyID: "k1", Scope: "tenant acme",
			Method: "POST", Route: "/v1/admission", Path: "/v1/admission", Status: 200, Remote: "10.0.0.1", RequestID: fmt.Sprint("r", i)})
	}
	return out
}

// collect is a store that fails while down and keeps what it is given.
type collect struct {
	down bool
	got  []auth.AuditEntry
}

func (c *collect) write(_ context.Context, es []auth.AuditEntry) error {
	if c.down {
		return errors.New("dial tcp: connection refused")
	}
	c.got = append(c.got, es...)
	return nil
}

func ids(es []auth.AuditEntry) string {
	var s []string
	for _, e := range es {
		s = append(s, e.RequestID)
	}
	return strings.Join(s, ",")
}

// openQueue opens a queue of cfg, closed when the test ends.
func openQueue(t *testing.T, cfg Config) *Queue {
	t.Helper()
	q, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

// Batches survive a restart and reach the store in order once it is
// back; a failed write keeps them queued.
func TestQueueKeepsBatchesAcrossRestartsUntilWritten(t *testing.T) {
	dir := t.TempDir()
	q, err := Open(DefaultConfig(dir))
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Put(entries(0, 3)); err != nil {
		t.Fatal(err)
	}
	if err := q.Put(entries(3, 2)); err != nil {
		t.Fatal(err)
	}
	store := &collect{down: true}
	if res, err := q.Drain(context.Background(), store.write); err == nil || res.Written != 0 {
		t.Fatalf("drain while the store is down: %+v, %v", res, err)
	}
	if n, _ := q.Pending(); n != 5 {
		t.Fatalf("pending after a failed drain: %d, want 5", n)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	// A crash mid-Put leaves a temporary file: never a batch.
	if err := os.WriteFile(filepath.Join(dir, batchName(9, 1)+".tmp"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}

	q = openQueue(t, DefaultConfig(dir))
	if n, b := q.Pending(); n != 5 || b <= 0 {
		t.Fatalf("pending after reopening: %d entries, %d bytes; want 5", n, b)
	}
	if err := q.Put(entries(5, 1)); err != nil {
		t.Fatal(err)
	}
	store.down = false
	res, err := q.Drain(context.Background(), store.write)
	if err != nil || res.Written != 6 || res.Corrupt != 0 {
		t.Fatalf("drain: %+v, %v", res, err)
	}
	if got := ids(store.got); got != "r0,r1,r2,r3,r4,r5" {
		t.Errorf("store got %s", got)
	}
	if n, b := q.Pending(); n != 0 || b != 0 {
		t.Errorf("pending after the drain: %d entries, %d bytes", n, b)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(left) != 1 || filepath.Base(left[0]) != "LOCK" {
		t.Errorf("files left: %v", left)
	}
}

// Over its bound the queue refuses a batch whole (the caller counts it
// as dropped) and keeps what it held.
func TestQueueRefusesBatchesOverItsBound(t *testing.T) {
	cfg := DefaultConfig(t.TempDir())
	cfg.MaxBytes = 600
	q := openQueue(t, cfg)
	if err := q.Put(entries(0, 2)); err != nil {
		t.Fatal(err)
	}
	if err := q.Put(entries(2, 3)); !errors.Is(err, ErrFull) {
		t.Fatalf("put over the bound: %v, want ErrFull", err)
	}
	if n, b := q.Pending(); n != 2 || b > cfg.MaxBytes {
		t.Errorf("pending: %d entries, %d bytes", n, b)
	}
}

// A damaged batch is set aside and counted, and the batches after it
// are still written.
func TestQueueSetsDamagedBatchesAside(t *testing.T) {
	dir := t.TempDir()
	q := openQueue(t, DefaultConfig(dir))
	for i := 0; i < 3; i++ {
		if err := q.Put(entries(i*2, 2)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, batchName(1, 2)), []byte("{\"KeyID\":\"k1\"}\nnot json\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	store := &collect{}
	res, err := q.Drain(context.Background(), store.write)
	if err != nil || res.Written != 4 || res.Corrupt != 2 {
		t.Fatalf("drain: %+v, %v", res, err)
	}
	if got := ids(store.got); got != "r0,r1,r4,r5" {
		t.Errorf("store got %s", got)
	}
	if _, err := os.Stat(filepath.Join(dir, batchName(1, 2)+".corrupt")); err != nil {
		t.Errorf("damaged batch not set aside: %v", err)
	}
}

// Two servers must not share one queue: each would write the other's
// batches.
func TestQueueBelongsToOneProcess(t *testing.T) {
	dir := t.TempDir()
	openQueue(t, DefaultConfig(dir)) // held until the test ends
	if _, err := Open(DefaultConfig(dir)); err == nil || !strings.Contains(err.Error(), "held by another") {
		t.Fatalf("second open: %v", err)
	}
}

func TestParseBatchName(t *testing.T) {
	for _, tc := range []struct {
		name    string
		seq     uint64
		entries int
		ok      bool
	}{
		{batchName(42, 7), 42, 7, true},
		{"00000000000000000001-3.jsonl.tmp", 0, 0, false},
		{"00000000000000000001-3.jsonl.corrupt", 0, 0, false},
		{"LOCK", 0, 0, false},
		{"x-3.jsonl", 0, 0, false},
		{"1--3.jsonl", 0, 0, false},
	} {
		seq, n, ok := parseBatchName(tc.name)
		if ok != tc.ok || (ok && (seq != tc.seq || n != tc.entries)) {
			t.Errorf("%s: %d %d %v", tc.name, seq, n, ok)
		}
	}
}
