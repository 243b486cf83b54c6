// Package reports renders what gpumeter computed for people and programs:
// invoices and chargeback (JSON, CSV, HTML, PDF), quotes (pricing.Result),
// usage summaries (pricing.UsageRecord rows, as a table or as the JSON that
// `gpumeter quote --usage` reads back), MIG partition plans and their
// apply reports, and the CLI's run reports (imports, rollups, keys, the
// Slurm comparison); reports/output prints listings. Each renderer writes to an
// io.Writer, returns the first write error, and is a pure function of its
// arguments: no clock, no store, no files. Invoices and chargeback reports
// join them here.
package reports
