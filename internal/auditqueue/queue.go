// Package auditqueue keeps the API audit entries that could not be written
// to ClickHouse in a bounded on-disk queue until they can: an admission
// decided from memory while ClickHouse is down is still audited.
//
// Each batch is one file, written to a temporary name, fsynced and renamed
// (so a crash leaves either the whole batch or nothing), and removed only
// after the store acknowledged it. Delivery is at least once: a crash
// between the acknowledgement and the removal writes the batch again.
package auditqueue

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/dirlock"
)

// ErrFull: the batch would take the queue over its size bound; it was not
// kept, and the caller counts it as dropped.
var ErrFull = errors.New("audit queue full")

// Config of the queue. An empty Dir keeps no queue: entries the store
// refuses are dropped and counted.
type Config struct {
	Dir      string `yaml:"dir"`
	MaxBytes int64  `yaml:"max_bytes"`
}

// DefaultConfig keeps up to 64 MiB (about 200,000 entries) under dir.
func DefaultConfig(dir string) Config { return Config{Dir: dir, MaxBytes: 64 << 20} }

// Validate reports every problem.
func (c Config) Validate() error {
	if c.Dir != "" && c.MaxBytes <= 0 {
		return fmt.Errorf("max_bytes %d: must be positive", c.MaxBytes)
	}
	return nil
}

// Queue is the on-disk queue. Its methods are safe for concurrent use.
type Queue struct {
	dir      string
	maxBytes int64
	lock     *os.File

	mu      sync.Mutex
	next    uint64 // sequence of the next batch file
	bytes   int64
	entries int
}

// batchName is NNNNNNNNNNNNNNNNNNNN-ENTRIES.jsonl: sorted by sequence, with
// the entry count readable without opening the file.
func batchName(seq uint64, entries int) string {
	return fmt.Sprintf("%020d-%d.jsonl", seq, entries)
}

func parseBatchName(name string) (seq uint64, entries int, ok bool) {
	base, found := strings.CutSuffix(name, ".jsonl")
	if !found {
		return 0, 0, false
	}
	s, n, found := strings.Cut(base, "-")
	if !found {
		return 0, 0, false
	}
	seq, err1 := strconv.ParseUint(s, 10, 64)
	entries, err2 := strconv.Atoi(n)
	return seq, entries, err1 == nil && err2 == nil && entries >= 0
}

// Open creates or reopens the queue in dir, taking it for this process.
// Temporary files a crash left behind are removed: their batches were
// never acknowledged as kept.
func Open(cfg Config) (*Queue, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("audit queue: %w", err)
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("open audit queue %s: %w", cfg.Dir, err)
	}
	lock, err := dirlock.Lock(cfg.Dir, "server's audit queue")
	if err != nil {
		return nil, fmt.Errorf("open audit queue: %w", err)
	}
	q := &Queue{dir: cfg.Dir, maxBytes: cfg.MaxBytes, lock: lock}
	names, err := q.batches()
	if err != nil {
		lock.Close()
		return nil, err
	}
	for _, n := range names {
		seq, entries, _ := parseBatchName(n)
		fi, err := os.Stat(filepath.Join(q.dir, n))
		if err != nil {
			lock.Close()
			return nil, fmt.Errorf("open audit queue: %w", err)
		}
		q.bytes += fi.Size()
		q.entries += entries
		q.next = max(q.next, seq+1)
	}
	tmps, _ := filepath.Glob(filepath.Join(q.dir, "*.tmp"))
	for _, t := range tmps {
		_ = os.Remove(t)
	}
	return q, nil
}

// batches lists the batch files, oldest first.
func (q *Queue) batches() ([]string, error) {
	des, err := os.ReadDir(q.dir)
	if err != nil {
		return nil, fmt.Errorf("read audit queue %s: %w", q.dir, err)
	}
	var names []string
	for _, de := range des {
		if _, _, ok := parseBatchName(de.Name()); ok && de.Type().IsRegular() {
			names = append(names, de.Name())
		}
	}
	slices.Sort(names) // zero-padded sequences sort as numbers
	return names, nil
}

// Pending is what the queue holds: entries and bytes.
func (q *Queue) Pending() (entries int, bytes int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.entries, q.bytes
}

// Put keeps entries durably, or returns ErrFull (nothing kept) when they
// would take the queue over its bound.
func (q *Queue) Put(entries []auth.AuditEntry) error {
	if len(entries) == 0 {
		return nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, e := range entries {
		if err := enc.Encode(e); err != nil {
			return fmt.Errorf("encode audit entry: %w", err)
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.bytes+int64(buf.Len()) > q.maxBytes {
		return fmt.Errorf("%w: %d bytes held, bound %d", ErrFull, q.bytes, q.maxBytes)
	}
	name := batchName(q.next, len(entries))
	tmp := filepath.Join(q.dir, name+".tmp")
	if err := writeSynced(tmp, buf.Bytes()); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, filepath.Join(q.dir, name)); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("keep audit batch: %w", err)
	}
	// Counted from the rename on: the file is there (and a later batch
	// must not take its name) even if the directory's sync fails.
	q.next++
	q.bytes += int64(buf.Len())
	q.entries += len(entries)
	return syncDir(q.dir)
}

func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("keep audit batch: %w", err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("keep audit batch %s: %w", path, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync audit queue %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync audit queue %s: %w", dir, err)
	}
	return nil
}

// DrainResult is what one Drain did.
type DrainResult struct {
	Written int // entries the store acknowledged
	// Corrupt counts entries of batch files that could not be read back
	// (damaged on disk): moved aside as NAME.corrupt and lost to the table.
	Corrupt int
}

// Drain hands the queued batches, oldest first, to write and removes each
// once write succeeded. It stops at the first write error and returns it;
// what was not written stays queued.
func (q *Queue) Drain(ctx context.Context, write func(context.Context, []auth.AuditEntry) error) (DrainResult, error) {
	var res DrainResult
	q.mu.Lock()
	names, err := q.batches()
	q.mu.Unlock()
	if err != nil {
		return res, err
	}
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		path := filepath.Join(q.dir, name)
		data, err := os.ReadFile(path)
		if err != nil {
			return res, fmt.Errorf("read audit batch: %w", err)
		}
		_, count, _ := parseBatchName(name)
		entries, err := decode(data)
		if err != nil || len(entries) != count {
			if err == nil {
				err = fmt.Errorf("%d entries, the name says %d", len(entries), count)
			}
			if rerr := os.Rename(path, path+".corrupt"); rerr != nil {
				return res, fmt.Errorf("set aside audit batch %s (%v): %w", name, err, rerr)
			}
			q.forget(int64(len(data)), count)
			res.Corrupt += count
			continue
		}
		if err := write(ctx, entries); err != nil {
			return res, err
		}
		if err := os.Remove(path); err != nil {
			return res, fmt.Errorf("remove written audit batch: %w", err)
		}
		q.forget(int64(len(data)), count)
		res.Written += len(entries)
	}
	if res.Written > 0 || res.Corrupt > 0 {
		return res, syncDir(q.dir)
	}
	return res, nil
}

func (q *Queue) forget(size int64, entries int) {
	q.mu.Lock()
	q.bytes -= size
	q.entries -= entries
	q.mu.Unlock()
}

func decode(data []byte) ([]auth.AuditEntry, error) {
	var out []auth.AuditEntry
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		var e auth.AuditEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// Close releases the directory; what is queued stays for the next Open.
func (q *Queue) Close() error { return q.lock.Close() }
