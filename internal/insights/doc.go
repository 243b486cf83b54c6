// Package insights turns metered usage into decisions: held-but-idle GPUs
// (efficiency.go), right-sizing to smaller MIG or vGPU profiles
// (rightsize.go), anomalies in usage and spend against a robust seasonal
// baseline (baseline.go, anomaly.go), month-end forecasts (forecast.go) and
// fleet capacity dates (capacity.go).
//
// It is pure: every function takes values (times included) and returns
// values; no clock, store, files, network or logger. Inputs are what a
// store query gives cheaply; each input struct has Validate, which reports
// every problem at once (errors.Join), and invalid input yields an error,
// never a panic. GPU time is integer GPU-microseconds, which reconcile;
// money is decimal.Decimal, priced with the pricing package.
package insights
