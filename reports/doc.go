// Package reports renders what gpumeter computed for people and programs:
// quotes (pricing.Result), usage summaries (pricing.UsageRecord rows, as a
// table or as the JSON that `gpumeter quote --usage` reads back) and MIG
// partition plans and their apply reports. Each renderer writes to an
// io.Writer, returns the first write error, and is a pure function of its
// arguments: no clock, no store, no files. Invoices and chargeback reports
// join them here.
package reports
