package quota

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/shopspring/decimal"
)

// Describe and Collect export the quota state to Prometheus.
func (q *Service) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(q, ch) }

var (
	quotaUsedDesc = prometheus.NewDesc("gpumeter_quota_used", "Measured use of a quota: GPU-equivalents, GPU-hours this month or spend this month.",
		[]string{"subject", "metric"}, nil)
	quotaAdmittedDesc = prometheus.NewDesc("gpumeter_quota_admitted", "Admitted work not yet running, held against a ",
		[]string{"subject", "metric"}, nil)
	quotaHardDesc = prometheus.NewDesc("gpumeter_quota_hard_limit", "A quota's hard limit.", []string{"subject", "metric"}, nil)
	quotaAgeDesc  = prometheus.NewDesc("gpumeter_quota_snapshot_age_seconds", "Age of the quota evaluator's data.", nil, nil)
)

// Collect reads the evaluator's state (its lock, no I/O).
func (q *Service) Collect(ch chan<- prometheus.Metric) {
	states, at := q.eval.State()
	for _, s := range states {
		f := func(d decimal.Decimal) float64 { v, _ := d.Float64(); return v } // Prometheus samples are floats; no amount is computed from them
		ch <- prometheus.MustNewConstMetric(quotaUsedDesc, prometheus.GaugeValue, f(s.Used), s.Subject, string(s.Metric))
		ch <- prometheus.MustNewConstMetric(quotaAdmittedDesc, prometheus.GaugeValue, f(s.Admitted), s.Subject, string(s.Metric))
		ch <- prometheus.MustNewConstMetric(quotaHardDesc, prometheus.GaugeValue, f(s.Hard), s.Subject, string(s.Metric))
	}
	if !at.IsZero() {
		ch <- prometheus.MustNewConstMetric(quotaAgeDesc, prometheus.GaugeValue, q.now().Sub(at).Seconds())
	}
}
