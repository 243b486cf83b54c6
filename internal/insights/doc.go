// Package insights turns metered usage into decisions: held-but-idle GPUs,
// right-sizing to smaller MIG or vGPU profiles, anomalies in usage and
// spend, month-end forecasts and fleet capacity dates (issue 17).
//
// Its analyses are pure: every function takes values (times included) and
// returns values; no clock, store, files, network or logger. Inputs are what a
// store query gives cheaply; each input struct has Validate, which reports
// every problem at once (errors.Join), and invalid input yields an error,
// never a panic. GPU time is integer GPU-microseconds, which reconcile;
// money is decimal.Decimal, priced with the pricing package; series values
// (usage, spend, demand) are decimals too, so one set of statistics serves
// money and usage alike. Floats appear only in utilization fractions,
// percentiles of SM activity, scores and parameters.
//
// The analyses import pricing, internal/gpucatalog and internal/partition,
// and nothing that does I/O. The one edge is Service (service.go), which
// the CLI and the API call: it loads the inputs through a Reader the store
// meets, prices tenants as invoicing does (internal/billing's loader), runs
// the analyses and stores and announces anomalies through interfaces it
// declares. docs/insights.md has the long form.
//
// # Inputs
//
//   - Holding: one tenant on one GPU, MIG instance or vGPU, a time-ordered
//     list of Interval rows of usage_samples (start, duration, GPU time
//     held, SM-active time, memory peak, SM-unmeasured bit).
//   - Series: one tenant's (or model's) hourly or daily values, from
//     usage_hourly or the priced daily spend; absent steps are zero.
//   - TenantPricing: a tenant's price book and optional contract.
//
// # Efficiency (efficiency.go)
//
// An interval is idle when measured and its SM-active time is under
// SMThreshold (default 5 %) of the GPU time held. Idle intervals joined by
// gaps of at most MaxGap (1 min) form a run; a run lasting Window (30 min)
// or more is held-but-idle in full. Unmeasured intervals end a run and are
// reported as UnmeasuredGPUMicros, never as idle. The idle cost is the
// tenant's priced period minus the same period without its idle GPU-hours
// (gpu_hours meter): tiers, reservations (take-or-pay: idle reserved hours
// save nothing) and commitments count as on the invoice.
//
// # Right-sizing (rightsize.go)
//
// Per tenant and SKU, the duration-weighted Percentile (default p99) of
// interval memory peaks and of SM activity in GPU-equivalents (SM-active
// time over wall time), each plus headroom (10 %), against the profiles
// of the same model in gpucatalog: the fitting profile of fewest
// GPU-equivalents (then least memory) is recommended when it weighs less
// than the current one and, held for the wall time the tenant held
// anything, would hold less GPU time than it did. Memory capacity is the
// profile name's GB × 10^9. Savings are integer GPU-microseconds and money
// priced as the difference of two priced periods. The right-sized MIG
// demand is laid out by partition.Solve on the fleet with its MIG GPUs
// emptied (and the whole GPUs of right-sized holdings made MIG GPUs).
//
// # Anomalies (baseline.go, anomaly.go)
//
// Baseline: for each step, the median of the same hour of the week (hourly)
// or weekday (daily) in the last Weeks (4) weeks, and a spread of 1.4826 ×
// their median absolute deviation, floored at RelSpread (10 %) of the
// median and MinSpread (1 unit). At least MinHistory (3) earlier values
// are needed. A step is anomalous when |observed − expected| ≥ Threshold
// (5) × spread: a spike above, a drop below. Anomaly IDs hash tenant,
// meter, SKU, step and start, so re-detection gives the same id.
//
// # Forecasts and capacity (forecast.go, capacity.go)
//
// A trend plus weekly season fitted to the last Weeks (8) weeks: the
// seasonal Kendall slope (median of pairwise slopes within each season
// slot) and per-slot median levels. ForecastPeriod adds the period's
// actuals to the model's remaining steps, with the running total and its
// band step by step (Path) for a chart; Capacity projects a model's
// demand until the first step above Target × capacity. Both return the Fit
// with the history it used.
package insights
