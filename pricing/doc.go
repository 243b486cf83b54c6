// Package pricing turns metered GPU usage into money: price books (YAML),
// tenant contracts (reservations, burst thresholds, minimum commitments) and
// one pure function, Price, that prices a tenant's hourly usage over a period.
// It also reads hourly usage from the files `gpumeter quote --usage` takes
// (CSV, JSON, or the UsageRecord rows `gpumeter usage --json` writes) and
// spreads a period total evenly over the period's hours (PeriodQuantity).
//
// The package does no I/O beyond parsing bytes it is handed, reads no clock and
// holds no global state, so invoices, chargeback, quotas and `gpumeter quote`
// all get the same answer for the same values. All money is decimal; no float
// touches an amount. docs/pricing.md documents the semantics and file formats.
package pricing
