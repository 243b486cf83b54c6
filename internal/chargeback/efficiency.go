package chargeback

// EfficiencyRow is one department's (Tenant empty) or tenant's efficiency
// over the report's period, from internal/insights (docs/insights.md):
// GPU time held, of it measured (SM activity reported), SM-active and
// held-but-idle, in integer GPU-microseconds that reconcile (held =
// measured + unmeasured; idle ≤ measured).
type EfficiencyRow struct {
	Department          string `json:"department"`
	Tenant              string `json:"tenant,omitempty"`
	HeldGPUMicros       int64  `json:"held_gpu_microseconds"`
	MeasuredGPUMicros   int64  `json:"measured_gpu_microseconds"`
	UnmeasuredGPUMicros int64  `json:"unmeasured_gpu_microseconds"`
	SMActiveMicros      int64  `json:"sm_active_microseconds"`
	IdleGPUMicros       int64  `json:"idle_gpu_microseconds"`
}
