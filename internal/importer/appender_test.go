package importer

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/meter"
)

// Each batch is on the writer when Append returns (the collector may stop
// after any batch), and the whole reads back as the samples appended.
func TestAppenderFlushesEveryBatch(t *testing.T) {
	start := time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)
	var samples []collectors.Sample
	for i, gpu := range []string{"GPU-a", "GPU-b", "GPU-c"} {
		s := collectors.Sample{Host: "dgx-01", GPUUUID: gpu, GPUModel: "H100-SXM5-80GB", Tenant: "acme", Start: start, End: start.Add(10 * time.Second),
			Values: meter.Values{GPUMicroseconds: 10_000_000, EnergyMillijoules: uint64(i + 1)}}
		finish(&s, 0, func(p Problem) { t.Fatalf("test sample %d: %s", i, p) })
		samples = append(samples, s)
	}
	var buf bytes.Buffer
	app, err := NewAppender(&buf, FormatJSONL)
	if err != nil {
		t.Fatal(err)
	}
	for i, batch := range [][]collectors.Sample{samples[:1], samples[1:]} {
		if err := app.Append(context.Background(), batch); err != nil {
			t.Fatal(err)
		}
		if lines := strings.Count(buf.String(), "\n"); lines != len(samples[:1])+i*len(samples[1:]) {
			t.Fatalf("after batch %d: %d lines on the writer", i+1, lines)
		}
	}
	checkReadsBack(t, FormatJSONL, buf.String(), samples)
	if _, err := NewAppender(&buf, "xml"); err == nil {
		t.Error("an unknown format was taken")
	}
}
