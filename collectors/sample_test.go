package collectors

import (
	"testing"
	"time"
)

func TestSampleIDIsStableAndDistinct(t *testing.T) {
	start := time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)
	id := SampleID("dgx-01", "GPU-a", "acme", "job-1", start)
	// Pinned: ids are stored, so the hash must never change across releases.
	if id != 16268145001240322047 {
		t.Fatalf("SampleID changed: %d", id)
	}
	if id != SampleID("dgx-01", "GPU-a", "acme", "job-1", start.In(time.FixedZone("x", 3600))) {
		t.Fatal("same instant in another zone gave another id")
	}
	for name, other := range map[string]uint64{
		"parts shifted": SampleID("dgx-0", "1GPU-a", "acme", "job-1", start),
		"tenant":        SampleID("dgx-01", "GPU-a", "globex", "job-1", start),
		"start":         SampleID("dgx-01", "GPU-a", "acme", "job-1", start.Add(10*time.Second)),
		"device":        SampleID("dgx-01", "GPU-b", "acme", "job-1", start),
	} {
		if other == id {
			t.Errorf("%s: collision with the base id", name)
		}
	}
	if allocs := testing.AllocsPerRun(100, func() { SampleID("dgx-01", "GPU-a", "acme", "job-1", start) }); allocs != 0 {
		t.Errorf("SampleID allocates %v times per call", allocs)
	}
}
