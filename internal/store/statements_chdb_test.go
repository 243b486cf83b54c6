//go:build chdb

package store

import (
	"strings"
	"testing"
	"time"
)

// Every batch of the checked statements has, per row, one value for each
// column its INSERT names, and every other statement one argument per ?:
// a check on another server must run what the store sends.
func TestCheckedStatementsAreWellFormed(t *testing.T) {
	at := time.Date(2026, 11, 5, 0, 0, 0, 0, time.UTC)
	records, err := CheckedRecords(at, at)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range append(CheckedStatements(at, at.Add(time.Hour), "acme", 1), records...) {
		if s.Rows == nil {
			if n := strings.Count(s.SQL, "?"); n != len(s.Args) {
				t.Errorf("%s: %d ? for %d arguments", s.Name, n, len(s.Args))
			}
			continue
		}
		_, cols, ok := strings.Cut(s.SQL, "(")
		if !ok || !strings.HasPrefix(s.SQL, "INSERT INTO ") || !strings.HasSuffix(cols, ")") || !s.Exec || len(s.Args) > 0 {
			t.Errorf("%s: a batch wants INSERT INTO t (columns) and no arguments: %s", s.Name, s.SQL)
			continue
		}
		want := len(strings.Split(cols, ","))
		for i, r := range s.Rows {
			if len(r) != want {
				t.Errorf("%s: row %d has %d values for %d columns", s.Name, i, len(r), want)
			}
		}
	}
}
