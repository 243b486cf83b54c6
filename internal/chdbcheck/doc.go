// Package chdbcheck runs the store's migrations and statements on ClickHouse
// 26.x through chDB, the embedded engine, and compares their results with the
// 18.16 server's for the same data (issue 15, part 3). Its test needs
// libchdb.so and the build tag chdb: `make chdb-test` fetches the library
// and runs it. The package has no code of its own.
package chdbcheck
