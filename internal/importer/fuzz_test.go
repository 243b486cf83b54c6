package importer

import (
	"os"
	"strings"
	"testing"

	"github.com/gpumeter/gpumeter/collectors"
)

// FuzzRead: whatever a file holds, Read never panics, and every sample it
// emits is one the store would accept.
func FuzzRead(f *testing.F) {
	for _, p := range []string{"testdata/good.csv", "testdata/good.jsonl"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b), strings.HasSuffix(p, ".jsonl"))
	}
	f.Add("host,gpu_uuid\n\"unterminated", false)
	f.Add(`{"gpu_seconds": 1e999}`, true)
	f.Fuzz(func(t *testing.T, in string, jsonl bool) {
		format := FormatCSV
		if jsonl {
			format = FormatJSONL
		}
		_ = Read(strings.NewReader(in), format, func(s collectors.Sample) error {
			if err := s.Validate(); err != nil {
				t.Fatalf("emitted an invalid sample %+v: %v", s, err)
			}
			return nil
		})
	})
}
