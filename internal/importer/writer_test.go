package importer

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/meter"
)

// checkReadsBack reads text in format and checks that it holds want,
// sample by sample.
func checkReadsBack(t *testing.T, format Format, text string, want []collectors.Sample) {
	t.Helper()
	got, err := readAll(t, format, text)
	if err != nil {
		t.Fatalf("%s: read back: %v\n%s", format, err, text)
	}
	if len(got) != len(want) {
		t.Fatalf("%s: %d samples back, want %d", format, len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%s: sample %d\n got %+v\nwant %+v", format, i, got[i], want[i])
		}
	}
}

// What the writer writes, the reader reads back unchanged, in both formats.
func TestWriterRoundTrip(t *testing.T) {
	start := time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)
	samples := []collectors.Sample{
		{Host: "dgx-01", GPUUUID: "GPU-a", GPUModel: "H100-SXM5-80GB", Tenant: "acme", Department: "research", Workload: "ns/pod, \"quoted\"",
			Start: start, End: start.Add(10 * time.Second),
			Values: meter.Values{GPUMicroseconds: 10_000_000, SMActiveMicroseconds: 7_500_001, MemMiBSeconds: 409600, MemPeakBytes: 42949672960,
				EnergyMillijoules: 3_500_125, PCIeTxBytes: 1, PCIeRxBytes: 2, NVLinkTxBytes: 3, NVLinkRxBytes: 4}},
		{Host: "dgx-01", GPUUUID: "GPU-b", GPUModel: "H100-SXM5-80GB", MIGUUID: "MIG-b1", MIGProfile: "3g.40gb", Tenant: "globex",
			Start: start, End: start.Add(10 * time.Second), Unmeasured: meter.UnmeasuredSMActive | meter.UnmeasuredNVLink,
			Values: meter.Values{GPUMicroseconds: 4_285_715, EnergyMillijoules: 1}},
		{Host: "dgx-01", GPUUUID: "GPU-b", GPUModel: "H100-SXM5-80GB", Start: start, End: start.Add(10 * time.Second),
			Values: meter.Values{GPUMicroseconds: 5_714_285}},
	}
	for i := range samples {
		finish(&samples[i], 0, func(p Problem) { t.Fatalf("test sample %d: %s", i, p) })
	}
	for _, format := range []Format{FormatCSV, FormatJSONL} {
		var buf bytes.Buffer
		w, err := NewWriter(&buf, format)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Write(samples[:1]); err != nil {
			t.Fatal(err)
		}
		if err := w.Write(samples[1:]); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		checkReadsBack(t, format, buf.String(), samples)
	}
	// An empty CSV still names its columns, and reads as no rows.
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, FormatCSV)
	if err := w.Flush(); err != nil || !strings.HasPrefix(buf.String(), "sample_id,host,") {
		t.Fatalf("empty csv: %q, %v", buf.String(), err)
	}
}
