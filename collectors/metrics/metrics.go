// Package metrics is the collector's Prometheus view: one Observer that
// the poll loop reports to (collectors.Observer), the NVML source counts
// its failed calls with (nvml.Metrics), and /readyz asks whether a poll
// has succeeded yet.
package metrics

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/collectors/nvml"
)

// Observer holds the collector's metrics.
type Observer struct {
	polls          *prometheus.CounterVec
	samples        prometheus.Counter
	lastPoll       prometheus.Gauge
	nvmlErrors     *prometheus.CounterVec
	sourceDuration *prometheus.GaugeVec
	sourceUp       *prometheus.GaugeVec
	gpuErrors      *prometheus.CounterVec
	attrErrors     *prometheus.CounterVec
	attrUp         *prometheus.GaugeVec
	reg            prometheus.Registerer
	ready          atomic.Bool
}

var (
	_ collectors.Observer = (*Observer)(nil)
	_ nvml.Metrics        = (*Observer)(nil)
)

// ErrNoPoll is Ready's answer until a poll has handed its samples on.
var ErrNoPoll = errors.New("no successful poll yet")

// New registers the collector's metrics with reg.
func New(reg prometheus.Registerer) *Observer {
	m := &Observer{
		polls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpumeter_collector_polls_total", Help: "Polls, by result of handing the samples on (ok or error).",
		}, []string{"result"}),
		samples: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpumeter_collector_samples_total", Help: "Samples emitted by polls.",
		}),
		lastPoll: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gpumeter_collector_last_poll_duration_seconds", Help: "Wall time of the last poll.",
		}),
		nvmlErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpumeter_collector_nvml_errors_total", Help: "Failed NVML calls, by function and return code.",
		}, []string{"function", "code"}),
		sourceDuration: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpumeter_collector_source_duration_seconds", Help: "Duration of the last read of a source.",
		}, []string{"host", "source"}),
		sourceUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpumeter_collector_source_success", Help: "Whether the last read of a source succeeded.",
		}, []string{"host", "source"}),
		gpuErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpumeter_collector_gpu_read_errors_total", Help: "Intervals a GPU could not be read (lost, driver errors).",
		}, []string{"host", "gpu_uuid"}),
		attrErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpumeter_collector_attribution_errors_total", Help: "Polls whose attribution was incomplete.",
		}, []string{"host"}),
		attrUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpumeter_collector_attribution_source_success", Help: "Whether an attribution source answered in the last poll (kubelet, resourceslices for DRA devices through the API server, hami, cgroup, ...).",
		}, []string{"host", "source"}),
		reg: reg,
	}
	reg.MustRegister(m.polls, m.samples, m.lastPoll, m.nvmlErrors, m.sourceDuration, m.sourceUp, m.gpuErrors, m.attrErrors, m.attrUp)
	return m
}

// WatchBatch exports the batch's backlog and drops.
func (m *Observer) WatchBatch(b *collectors.Batch) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "gpumeter_collector_pending_samples", Help: "Samples buffered, not yet handed to the sink.",
		}, func() float64 { return float64(b.Pending()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "gpumeter_collector_dropped_samples_total", Help: "Samples lost before the sink took them: the buffer was full while the sink failed, or the collector stopped with samples the sink never took.",
		}, func() float64 { return float64(b.Dropped()) }),
	)
}

// Ready reports ErrNoPoll until the first poll succeeded: a collector that
// cannot hand samples on is not ready, whatever its process says.
func (m *Observer) Ready(context.Context) error {
	if !m.ready.Load() {
		return ErrNoPoll
	}
	return nil
}

// NVMLError counts a failed NVML call.
func (m *Observer) NVMLError(function, code string) {
	m.nvmlErrors.WithLabelValues(function, code).Inc()
}

// SourceRead records the duration and outcome of one read of a source.
func (m *Observer) SourceRead(host, source string, d time.Duration, err error) {
	m.sourceDuration.WithLabelValues(host, source).Set(d.Seconds())
	up := 1.0
	if err != nil {
		up = 0
	}
	m.sourceUp.WithLabelValues(host, source).Set(up)
}

// GPUFailed counts an interval a GPU could not be read.
func (m *Observer) GPUFailed(host, gpuUUID string, _ error) {
	m.gpuErrors.WithLabelValues(host, gpuUUID).Inc()
}

// AttributionFailed counts a poll whose attribution was incomplete.
func (m *Observer) AttributionFailed(host string, _ error) {
	m.attrErrors.WithLabelValues(host).Inc()
}

// AttributionSource records whether an attribution source answered.
func (m *Observer) AttributionSource(host, source string, err error) {
	up := 1.0
	if err != nil {
		up = 0
	}
	m.attrUp.WithLabelValues(host, source).Set(up)
}

// Polled records a poll; the first one whose samples were handed on makes
// the collector ready.
func (m *Observer) Polled(d time.Duration, samples int, err error) {
	m.lastPoll.Set(d.Seconds())
	m.samples.Add(float64(samples))
	if err != nil {
		m.polls.WithLabelValues("error").Inc()
		return
	}
	m.polls.WithLabelValues("ok").Inc()
	m.ready.Store(true)
}
