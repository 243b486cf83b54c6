package main

import (
	"encoding/csv"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumeter/gpumeter/tests/harness"
	"go.yaml.in/yaml/v3"
)

// Every listing command prints each -o format: JSON, YAML and CSV parse,
// tables have one upper-case header line; a bad format is bad input.
func TestEveryListingCommandPrintsEveryFormat(t *testing.T) {
	dsn, cfg := invoiceFixture(t)
	g := []string{"--clickhouse", dsn, "--config", cfg}
	book := filepath.Join(filepath.Dir(cfg), "book.yaml")
	if code, _, stderr := gpumeter(t, append(g, "keys", "create", "--scope", "tenant:alpha", "--note", "n")...); code != 0 {
		t.Fatalf("keys create: %s", stderr)
	}
	sacctFile := harness.TempFile(t, "oct.sacct", "Cluster|JobID|Account|Start|End|Elapsed|AllocTRES\n"+
		"c|1|a|2026-10-01T00:00:00|2026-10-01T01:00:00|01:00:00|gres/gpu=1\n")
	// invoice run and quote keep their text for -o table (a line per
	// customer and the counts; the quote's heading, tiers and notes),
	// which other tests pin; their wide table is the listing.
	keepsText := map[string]bool{"invoice run": true, "quote --book": true}
	listings := [][]string{
		{"usage", "--from", "2026-10-01", "--to", "2026-10-03", "--by", "tenant,sku", "--bucket", "day"},
		{"invoice", "run", "--period", "2026-10", "--quiet"},
		{"invoice", "list"},
		{"keys", "list"},
		{"credits", "list"},
		{"credits", "balance", "--tenant", "alpha"},
		{"webhooks", "list"},
		{"insights", "efficiency", "--period", "2026-10", "--tenant", "alpha", "--book", book},
		{"insights", "rightsize", "--period", "2026-10", "--tenant", "alpha", "--book", book},
		{"insights", "anomalies", "--period", "2026-10"},
		{"insights", "capacity", "--to", "2026-11-01", "--weeks", "2"},
		{"slurm", "compare", "--period", "2026-10", "--sacct", sacctFile, "--sacct-tz", "UTC"},
		{"quote", "--book", book, "--quantity", "H100-SXM5-80GB:gpu_hours=10", "--from", "2026-10-01"},
	}
	for _, args := range listings {
		for _, f := range []string{"table", "wide", "json", "yaml", "csv"} {
			name := strings.Join(args[:2], " ")
			t.Run(name+" -o "+f, func(t *testing.T) {
				code, out, stderr := gpumeter(t, append(append(append([]string{}, g...), args...), "-o", f)...)
				if code != 0 {
					t.Fatalf("exit %d: %s", code, stderr)
				}
				switch f {
				case "json":
					if !json.Valid([]byte(out)) {
						t.Errorf("not JSON:\n%s", out)
					}
				case "yaml":
					var v any
					if err := yaml.Unmarshal([]byte(out), &v); err != nil || v == nil {
						t.Errorf("not YAML (%v):\n%s", err, out)
					}
				case "csv":
					recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
					if err != nil || len(recs) == 0 {
						t.Errorf("not CSV (%v):\n%s", err, out)
					}
				case "table":
					if keepsText[name] {
						if strings.TrimSpace(out) == "" {
							t.Error("no output")
						}
						break
					}
					fallthrough
				default:
					head, _, _ := strings.Cut(out, "\n")
					if strings.TrimSpace(head) == "" || head != strings.ToUpper(head) {
						t.Errorf("table header %q is not upper-case:\n%s", head, out)
					}
				}
			})
		}
	}
	// --json stays the same as -o json.
	_, viaFlag, _ := gpumeter(t, append(g, "invoice", "list", "--json")...)
	_, viaO, _ := gpumeter(t, append(g, "invoice", "list", "-o", "json")...)
	if viaFlag != viaO || viaFlag == "" {
		t.Errorf("--json printed\n%s\n-o json\n%s", viaFlag, viaO)
	}
	for _, bad := range [][]string{{"keys", "list", "-o", "xml"}, {"keys", "list", "--json", "-o", "csv"}} {
		if code, _, stderr := gpumeter(t, append(g, bad...)...); code != 2 {
			t.Errorf("%v: exit %d (%s), want 2", bad, code, stderr)
		}
	}
}
