// Package billing turns stored usage into money: invoices (the invoice
// run, the ledger of drafts, finalized and void invoices under a lease,
// late-usage corrections, and the API's scoped reads of them) and the
// chargeback report, priced by the customers' books and contracts. It
// rests on internal/rollup's hourly rollups. It holds rules, not SQL:
// storage sits behind the small interfaces declared here, which
// internal/store satisfies.
package billing
