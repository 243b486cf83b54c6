package metrics

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpumeter/gpumeter/collectors"
)

func TestObserverCountsAndExposes(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	m.NVMLError("nvmlDeviceGetMigMode", "ERROR_GPU_IS_LOST")
	m.NVMLError("nvmlDeviceGetMigMode", "ERROR_GPU_IS_LOST")
	m.GPUFailed("dgx-01", "GPU-lost", errors.New("gpu 3: nvmlDeviceGetMigMode: gpu is lost"))
	m.AttributionFailed("dgx-01", errors.New("kubelet down"))
	m.AttributionSource("dgx-01", "kubelet", nil)
	m.AttributionSource("dgx-01", "resourceslices", errors.New("api server unreachable"))
	m.SourceRead("dgx-01", "nvml", 20*time.Millisecond, nil)
	m.SourceRead("dgx-02", "nvml", 5*time.Millisecond, errors.New("driver"))
	m.Polled(3*time.Millisecond, 42, nil)
	m.Polled(4*time.Millisecond, 8, errors.New("spool full"))

	want := `
# HELP gpumeter_collector_nvml_errors_total Failed NVML calls, by function and return code.
# TYPE gpumeter_collector_nvml_errors_total counter
gpumeter_collector_nvml_errors_total{code="ERROR_GPU_IS_LOST",function="nvmlDeviceGetMigMode"} 2
# HELP gpumeter_collector_gpu_read_errors_total Intervals a GPU could not be read (lost, driver errors).
# TYPE gpumeter_collector_gpu_read_errors_total counter
gpumeter_collector_gpu_read_errors_total{gpu_uuid="GPU-lost",host="dgx-01"} 1
# HELP gpumeter_collector_attribution_errors_total Polls whose attribution was incomplete.
# TYPE gpumeter_collector_attribution_errors_total counter
gpumeter_collector_attribution_errors_total{host="dgx-01"} 1
# HELP gpumeter_collector_attribution_source_success Whether an attribution source answered in the last poll (kubelet, resourceslices for DRA devices through the API server, hami, cgroup, ...).
# TYPE gpumeter_collector_attribution_source_success gauge
gpumeter_collector_attribution_source_success{host="dgx-01",source="kubelet"} 1
gpumeter_collector_attribution_source_success{host="dgx-01",source="resourceslices"} 0
# HELP gpumeter_collector_source_success Whether the last read of a source succeeded.
# TYPE gpumeter_collector_source_success gauge
gpumeter_collector_source_success{host="dgx-01",source="nvml"} 1
gpumeter_collector_source_success{host="dgx-02",source="nvml"} 0
# HELP gpumeter_collector_polls_total Polls, by result of handing the samples on (ok or error).
# TYPE gpumeter_collector_polls_total counter
gpumeter_collector_polls_total{result="error"} 1
gpumeter_collector_polls_total{result="ok"} 1
# HELP gpumeter_collector_samples_total Samples emitted by polls.
# TYPE gpumeter_collector_samples_total counter
gpumeter_collector_samples_total 50
# HELP gpumeter_collector_last_poll_duration_seconds Wall time of the last poll.
# TYPE gpumeter_collector_last_poll_duration_seconds gauge
gpumeter_collector_last_poll_duration_seconds 0.004
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"gpumeter_collector_nvml_errors_total", "gpumeter_collector_gpu_read_errors_total", "gpumeter_collector_attribution_errors_total",
		"gpumeter_collector_attribution_source_success", "gpumeter_collector_source_success", "gpumeter_collector_polls_total", "gpumeter_collector_samples_total",
		"gpumeter_collector_last_poll_duration_seconds"); err != nil {
		t.Fatal(err)
	}
}

func TestReadyAfterTheFirstSuccessfulPoll(t *testing.T) {
	m := New(prometheus.NewRegistry())
	if err := m.Ready(context.Background()); !errors.Is(err, ErrNoPoll) {
		t.Fatalf("before any poll: %v, want ErrNoPoll", err)
	}
	m.Polled(time.Millisecond, 10, errors.New("sink down"))
	if err := m.Ready(context.Background()); !errors.Is(err, ErrNoPoll) {
		t.Fatalf("after a failed poll: %v, want ErrNoPoll", err)
	}
	m.Polled(time.Millisecond, 10, nil)
	if err := m.Ready(context.Background()); err != nil {
		t.Fatalf("after a successful poll: %v", err)
	}
}

func TestWatchBatchExportsBacklogAndDrops(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	failing := collectors.AppenderFunc(func(context.Context, []collectors.Sample) error { return errors.New("down") })
	b, err := collectors.NewBatch(collectors.BatchConfig{FlushRows: 3, MaxRows: 4}, failing)
	if err != nil {
		t.Fatal(err)
	}
	m.WatchBatch(b)
	_ = b.Append(context.Background(), make([]collectors.Sample, 6)) // 2 over MaxRows are dropped, 4 kept
	want := `
# HELP gpumeter_collector_pending_samples Samples buffered, not yet handed to the sink.
# TYPE gpumeter_collector_pending_samples gauge
gpumeter_collector_pending_samples 4
# HELP gpumeter_collector_dropped_samples_total Samples lost before the sink took them: the buffer was full while the sink failed, or the collector stopped with samples the sink never took.
# TYPE gpumeter_collector_dropped_samples_total counter
gpumeter_collector_dropped_samples_total 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "gpumeter_collector_pending_samples", "gpumeter_collector_dropped_samples_total"); err != nil {
		t.Fatal(err)
	}
}
