package spool

import (
	"context"
	"testing"
)

// BenchmarkAppend measures the figure docs/performance.md promises: spool
// append throughput with an fsync per batch of 1,000 samples.
func BenchmarkAppend(b *testing.B) {
	sp := openSpool(b, DefaultConfig(b.TempDir()))
	batch := testBatch(0, 1000)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := sp.Append(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(batch))/b.Elapsed().Seconds(), "rows/s")
	_, bytes := sp.Backlog()
	b.ReportMetric(float64(bytes)/float64(b.N*len(batch)), "bytes/row")
}

// BenchmarkEncode is the CPU part of an append, without the disk.
func BenchmarkEncode(b *testing.B) {
	batch := testBatch(0, 1000)
	var enc encoder
	b.ReportAllocs()
	for b.Loop() {
		if _, err := enc.encode(batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(batch))/b.Elapsed().Seconds(), "rows/s")
}

// spoolForReading is a spool holding 200 batches of 1,000 samples for the
// read benchmarks to go through again and again.
func spoolForReading(b *testing.B) opened {
	sp := openSpool(b, DefaultConfig(b.TempDir()))
	batch := testBatch(0, 1000)
	for range 200 {
		mustAppend(b, sp.Spool, batch)
	}
	return sp
}

// BenchmarkRead reads back and decodes batches of 1,000 samples, as the
// shipper does.
func BenchmarkRead(b *testing.B) {
	sp := spoolForReading(b)
	ctx := context.Background()
	rows := 0
	b.ReportAllocs()
	for b.Loop() {
		got, err := sp.Read(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if len(got.Samples) == 0 {
			sp.Rewind() // read the same batches again
		}
		rows += len(got.Samples)
	}
	b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkReadColumns is BenchmarkRead the way the shipper reads for a
// ColumnSink: straight into reused column buffers.
func BenchmarkReadColumns(b *testing.B) {
	sp := spoolForReading(b)
	ctx := context.Background()
	var cols Columns
	rows := 0
	b.ReportAllocs()
	for b.Loop() {
		if cols.Len() >= DefaultBatchRows {
			cols.Reset()
		}
		before := cols.Len()
		_, st, err := sp.readColumns(ctx, &cols, DefaultBatchRows)
		if err != nil {
			b.Fatal(err)
		}
		if st == readCaughtUp {
			sp.Rewind() // read the same batches again
		}
		rows += cols.Len() - before
	}
	b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkColumnsValidate is the store's check of an insert: the column
// check against building and validating a Sample per row (what it did
// before), on the same 100,000 rows.
func BenchmarkColumnsValidate(b *testing.B) {
	var c Columns
	for i := range 100 {
		c.AppendSamples(testBatch(i, 1000))
	}
	b.Run("columns", func(b *testing.B) {
		for b.Loop() {
			if err := c.Validate(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*c.Len())/b.Elapsed().Seconds(), "rows/s")
	})
	b.Run("rows", func(b *testing.B) {
		for b.Loop() {
			for i := range c.Len() {
				if x := c.Row(i); x.Validate() != nil {
					b.Fatal(x.Validate())
				}
			}
		}
		b.ReportMetric(float64(b.N*c.Len())/b.Elapsed().Seconds(), "rows/s")
	})
}
