package store

import (
	"cmp"
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/spool"
)

// The insert's rows go out in usage_samples' key order (tenant by bytes,
// start second, sample_id), whatever order they came in, so ClickHouse
// need not sort the part.
func TestSortRowsFollowsTheTableKey(t *testing.T) {
	tenants := []string{"acme", "Acme", "", "ab", "a", "b\xff", "b", "(unattributed)"}
	base := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name  string
		start func(r *rand.Rand, i int) time.Time
	}{
		{"polls in time order", func(_ *rand.Rand, i int) time.Time { return base.Add(time.Duration(i/50) * 10 * time.Second) }},
		{"late samples among them", func(r *rand.Rand, i int) time.Time {
			if r.IntN(20) == 0 {
				return base.Add(-time.Duration(r.IntN(3600)) * time.Second)
			}
			return base.Add(time.Duration(i/50) * 10 * time.Second)
		}},
		{"sub-second starts", func(r *rand.Rand, i int) time.Time {
			return base.Add(time.Duration(i/50)*10*time.Second + time.Duration(r.IntN(1e9)))
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(7, 8))
			var samples []collectors.Sample
			for i := range 5000 {
				st := tc.start(r, i)
				samples = append(samples, collectors.Sample{ID: r.Uint64() % 1000, Tenant: tenants[r.IntN(len(tenants))], Start: st, End: st.Add(10 * time.Second)})
			}
			var c spool.Columns
			c.AppendSamples(samples)
			var b rowOrder
			for range 2 { // the buffers are reused
				b.sortRows(&c)
				if len(b.keys) != len(samples) {
					t.Fatalf("%d rows ordered, want %d", len(b.keys), len(samples))
				}
				seen := make([]bool, len(samples))
				for i, k := range b.keys {
					if seen[k.row] {
						t.Fatalf("row %d twice", k.row)
					}
					seen[k.row] = true
					if i == 0 {
						continue
					}
					p, q := samples[b.keys[i-1].row], samples[k.row]
					if c := cmp.Or(strings.Compare(p.Tenant, q.Tenant), cmp.Compare(p.Start.Unix(), q.Start.Unix()), cmp.Compare(p.ID, q.ID)); c > 0 {
						t.Fatalf("rows %d and %d out of key order: %q %v %d before %q %v %d", i-1, i, p.Tenant, p.Start, p.ID, q.Tenant, q.Start, q.ID)
					}
				}
			}
			// The encoded columns follow the order.
			enc := sampleField{from: fromID}.encode(nil, &nativeColumn{kind: kindUInt64}, &c, b.keys, nil)
			var ids []uint64
			for p := enc; len(p) >= 8; p = p[8:] {
				ids = append(ids, binary.LittleEndian.Uint64(p))
			}
			if !slices.Equal(ids, func() []uint64 {
				var out []uint64
				for _, k := range b.keys {
					out = append(out, samples[k.row].ID)
				}
				return out
			}()) {
				t.Fatal("ids column not in the sorted order")
			}
		})
	}
}

// BenchmarkSortRows is the presort of one 100,000-row insert: polls of 8
// GPUs and 3 tenants in time order, as the shipper reads them.
func BenchmarkSortRows(b *testing.B) {
	base := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	tenants := []string{"acme", "globex", "initech"}
	var samples []collectors.Sample
	for i := range 100_000 {
		st := base.Add(time.Duration(i/8) * 10 * time.Second)
		samples = append(samples, collectors.Sample{ID: uint64(i)*0x9e3779b97f4a7c15 | 1, Tenant: tenants[i%3], Start: st, End: st.Add(10 * time.Second)})
	}
	var c spool.Columns
	c.AppendSamples(samples)
	var o rowOrder
	b.ReportAllocs()
	for b.Loop() {
		o.sortRows(&c)
	}
}
