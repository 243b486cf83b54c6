// Package chdbcheck runs the store's migrations and statements on ClickHouse
// 26.x through chDB, the embedded engine, beside the 18.16 server, and
// compares their results for the same data (issue 15, part 3). Its tests
// need libchdb.so and the build tag chdb: `make chdb-test` fetches the
// library and runs them. The package has no code of its own.
//
// TestChDBMatchesServer applies every migration on chDB, the ones 18.16
// skips (-- min_server: LowCardinality and codecs of the usage tables,
// TTLs of the operational logs) included, and checks that what they set is
// in place. It then compares, on both engines: the schema (LowCardinality(T)
// compared as T); the raw samples, with duplicates for FINAL to collapse;
// store.CheckedStatements (rollups, tombstones, usage, billing, chargeback
// and fleet reads), before and after a re-import; and store.CheckedRecords,
// the writes and reads of invoices.go, keys.go, leases.go, webhooks.go and
// retention.go with their rows bound, each write followed by the reads of
// what it stored and by every row of the table. The statements are the
// store's own constants and row builders, not copies. Differences found
// and how they are handled:
//
//   - 26.x collapses rows of one ReplacingMergeTree key within one insert
//     block (optimize_on_insert) where 18.16 keeps them until a merge: the
//     tables are compared with FINAL, as every store read of them is.
//   - now() stamps (lease claims) differ between two servers: compared as
//     "within 5 minutes of the wall clock".
//   - 18.16 writes a DEFAULT added by ALTER as CAST(0, 'UInt32'): compared
//     without the cast.
//
// TestSizing measures bytes on disk per GPU-month after merges on 18.16 and
// on chDB, without and with the newer-server migrations, for the same
// simulated DGX host (docs/operations.md, "Sizing"): CHDB_SIZING_DAYS days
// (1 by default; the documented figures are from 30).
package chdbcheck
