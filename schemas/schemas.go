// Package schemas holds the ClickHouse migrations, embedded into the binary.
//
// Files are named NNNN_name.sql and applied in order. Statements are
// separated by a semicolon at the end of a line. A first line of the form
// "-- min_server: 24.1" skips the migration, with a log line, on older
// servers. Every statement stays in the SQL subset of DESIGN.md unless gated.
package schemas

import "embed"

//go:embed *.sql
var FS embed.FS
