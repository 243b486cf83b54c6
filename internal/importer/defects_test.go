package importer_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/importer"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
)

// Issue 9, defects 5 and 6: ids that count more than once, and usage that
// cannot have happened. Each case failed (was stored) before the fix.

const csvHeader = "host,gpu_uuid,gpu_model,mig_uuid,mig_profile,tenant,workload,start,end,gpu_seconds,energy_joules\n"

// file writes body to a new file called name and returns its path.
func file(t testing.TB, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func importOne(t *testing.T, s *store.Store, path string, opts importer.Options) error {
	t.Helper()
	f, err := importer.FormatFromName(path)
	if err != nil {
		t.Fatal(err)
	}
	opts.Format = f
	_, err = importer.ImportFile(context.Background(), path, opts, s)
	return err
}

func gpuSeconds(t *testing.T, s *store.Store) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for tenant, r := range totals(t, s) {
		out[tenant] = r.GPUMicroseconds
	}
	return out
}

func wantRefused(t *testing.T, err error, parts ...string) {
	t.Helper()
	var ve *importer.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("error = %v, want a *importer.ValidationError", err)
	}
	if !fault.IsValidation(err) {
		t.Errorf("error %v is not a validation error", err)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not name %q", err, p)
		}
	}
}

func TestOneSampleIDCountsOnce(t *testing.T) {
	s := storetest.New(t)
	// One id under three tenants and starts: before, three rows (30 s for
	// one 10 s sample), since rows collapse by (tenant, start, id).
	for i, row := range []string{
		"777,h,G1,H100-SXM5-80GB,acme,2026-11-01T10:00:00Z,2026-11-01T10:00:10Z,10\n",
		"777,h,G1,H100-SXM5-80GB,globex,2026-11-01T10:00:03Z,2026-11-01T10:00:10Z,7\n",
		"777,h,G1,H100-SXM5-80GB,initech,2026-11-01T10:00:04Z,2026-11-01T10:00:10Z,6\n",
	} {
		p := file(t, "f.csv", "sample_id,host,gpu_uuid,gpu_model,tenant,start,end,gpu_seconds\n"+row)
		err := importOne(t, s, p, importer.Options{})
		wantRefused(t, err, "f.csv:2: sample_id: 777 is not this row's id")
		if got := gpuSeconds(t, s); len(got) != 0 {
			t.Fatalf("file %d: stored %v", i, got)
		}
	}
	// The id the row derives is accepted, as when the column is left out:
	// a file the collector wrote imports unchanged.
	p := file(t, "a.csv", csvHeader+"h,G1,H100-SXM5-80GB,,,acme,j,2026-11-01T10:00:00Z,2026-11-01T10:00:10Z,10,1\n")
	if err := importOne(t, s, p, importer.Options{}); err != nil {
		t.Fatal(err)
	}
	if got := gpuSeconds(t, s); got["acme"] != 10_000_000 || len(got) != 1 {
		t.Fatalf("stored %v", got)
	}
}

func TestStoredRowWithOtherDataIsRefusedUnlessReplace(t *testing.T) {
	s := storetest.New(t)
	row := func(gpu string) string {
		return csvHeader + "h,G1,H100-SXM5-80GB,,,acme,j,2026-11-01T10:00:00Z,2026-11-01T10:00:10Z," + gpu + ",1\n"
	}
	if err := importOne(t, s, file(t, "a.csv", row("10")), importer.Options{}); err != nil {
		t.Fatal(err)
	}
	// Before, a later file silently overwrote the stored value.
	changed := file(t, "b.csv", row("4"))
	err := importOne(t, s, changed, importer.Options{})
	wantRefused(t, err, "b.csv:2: gpu_seconds:", `stored as "10.000000", here "4.000000"`, "with replace")
	if got := gpuSeconds(t, s); got["acme"] != 10_000_000 {
		t.Fatalf("after a refused import: %v", got)
	}
	res, err := importer.Import(context.Background(), []importer.File{{Path: changed, Format: importer.FormatCSV}}, importer.Options{Replace: true}, s)
	if err != nil {
		t.Fatal(err)
	}
	if res.Replaced != 1 || res.Stored != 1 {
		t.Fatalf("replace: %+v", res)
	}
	if got := gpuSeconds(t, s); got["acme"] != 4_000_000 {
		t.Fatalf("after --replace: %v", got)
	}
}

func TestConflictAcrossFilesOfOneImport(t *testing.T) {
	s := storetest.New(t)
	a := file(t, "a.csv", csvHeader+"h,G1,H100-SXM5-80GB,,,acme,j,2026-11-01T10:00:00Z,2026-11-01T10:00:10Z,6,1\n")
	b := file(t, "b.csv", csvHeader+"h,G1,H100-SXM5-80GB,,,acme,j,2026-11-01T10:00:00Z,2026-11-01T10:00:10Z,7,1\n")
	_, err := importer.Import(context.Background(), []importer.File{{Path: a, Format: importer.FormatCSV}, {Path: b, Format: importer.FormatCSV}}, importer.Options{}, s)
	wantRefused(t, err, "b.csv:2: sample_id: same id as "+a+":2")
	if got := gpuSeconds(t, s); len(got) != 0 {
		t.Fatalf("stored %v", got)
	}
	// The same row in both files is one sample.
	res, err := importer.Import(context.Background(), []importer.File{{Path: a, Format: importer.FormatCSV}, {Path: a, Format: importer.FormatCSV}}, importer.Options{}, s)
	if err != nil || res.Stored != 1 || res.Repeats != 1 {
		t.Fatalf("same file twice: %+v, %v", res, err)
	}
}

func TestImportRefusesMoreThanTheGPUHas(t *testing.T) {
	cases := []struct {
		name   string
		stored string // imported first, fine on its own
		body   string
		want   []string
	}{
		{"tenants and idle each claim the whole interval", "",
			csvHeader +
				"h,G1,H100-SXM5-80GB,,,acme,a,2026-11-01T10:00:00Z,2026-11-01T10:00:10Z,10,1\n" +
				"h,G1,H100-SXM5-80GB,,,globex,b,2026-11-01T10:00:00Z,2026-11-01T10:00:10Z,10,1\n" +
				"h,G1,H100-SXM5-80GB,,,,,2026-11-01T10:00:00Z,2026-11-01T10:00:10Z,10,1\n",
			[]string{"f.csv:2: gpu_seconds: GPU G1 from 2026-11-01T10:00:00Z to 2026-11-01T10:00:10Z", "30.000000 GPU-seconds", "10.000000 GPU-seconds", "f.csv:3", "f.csv:4"}},
		{"staggered rows overfill a window", "",
			csvHeader +
				"h,G1,H100-SXM5-80GB,,,acme,a,2026-11-01T10:00:00Z,2026-11-01T10:00:20Z,15,1\n" +
				"h,G1,H100-SXM5-80GB,,,globex,b,2026-11-01T10:00:05Z,2026-11-01T10:00:15Z,10,1\n",
			[]string{"GPU G1", "25.000000 GPU-seconds", "20.000000 GPU-seconds"}},
		{"a new tenant on a GPU the store has full", csvHeader + "h,G1,H100-SXM5-80GB,,,acme,a,2026-11-01T10:00:00Z,2026-11-01T10:00:10Z,10,1\n",
			csvHeader + "h,G1,H100-SXM5-80GB,,,globex,b,2026-11-01T10:00:00Z,2026-11-01T10:00:10Z,1,1\n",
			[]string{"f.csv:2: gpu_seconds: GPU G1", "1 row(s) already stored"}},
		{"two rows overfill one MIG instance", "",
			csvHeader +
				"h,G2,H100-SXM5-80GB,MIG-1,3g.40gb,acme,a,2026-11-01T10:00:00Z,2026-11-01T10:00:10Z,4.285714,1\n" +
				"h,G2,H100-SXM5-80GB,MIG-1,3g.40gb,globex,b,2026-11-01T10:00:00Z,2026-11-01T10:00:10Z,1,1\n",
			[]string{"f.csv:2: gpu_seconds: MIG instance MIG-1", "5.285714 GPU-seconds"}},
		{"energy of many rows past what one GPU draws", "",
			csvHeader +
				"h,G1,H100-SXM5-80GB,,,acme,a,2026-11-01T10:00:00Z,2026-11-01T10:00:10Z,5,30000\n" +
				"h,G1,H100-SXM5-80GB,,,globex,b,2026-11-01T10:00:00Z,2026-11-01T10:00:10Z,5,30000\n",
			[]string{"f.csv:2: energy_joules: GPU G1", "60000.000 J", "40000.000 J"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := storetest.New(t)
			if tc.stored != "" {
				if err := importOne(t, s, file(t, "stored.csv", tc.stored), importer.Options{}); err != nil {
					t.Fatal(err)
				}
			}
			before := gpuSeconds(t, s)
			err := importOne(t, s, file(t, "f.csv", tc.body), importer.Options{})
			wantRefused(t, err, tc.want...)
			if got := gpuSeconds(t, s); len(got) != len(before) || got["acme"] != before["acme"] {
				t.Fatalf("stored %v after a refused import (had %v)", got, before)
			}
		})
	}
}

func TestImportRefusesImpossibleRows(t *testing.T) {
	const ok = "2026-11-01T10:00:00Z,2026-11-01T10:00:10Z"
	cases := []struct {
		name, file, body string
		want             []string
	}{
		{"a counter of 2^64-1", "f.csv", csvHeader + "h,G1,H100-SXM5-80GB,,,acme,a," + ok + ",1,18446744073709551.615\n",
			[]string{"f.csv:2: energy_joules: more than one GPU can do in 10s"}},
		{"bytes past PCIe", "f.csv", "host,gpu_uuid,gpu_model,tenant,start,end,gpu_seconds,pcie_rx_bytes\nh,G1,H100-SXM5-80GB,acme," + ok + ",1,18446744073709551615\n",
			[]string{"f.csv:2: pcie_rx_bytes: more than one GPU can do"}},
		{"an empty quantity", "f.csv", csvHeader + "h,G1,H100-SXM5-80GB,,,acme,a," + ok + ",1,\n",
			[]string{"f.csv:2: energy_joules: empty", "unmeasured"}},
		{"a null quantity", "f.jsonl", `{"host":"h","gpu_uuid":"G1","gpu_model":"H100-SXM5-80GB","tenant":"a","start":"2026-11-01T10:00:00Z","end":"2026-11-01T10:00:10Z","gpu_seconds":1,"energy_joules":null}` + "\n",
			[]string{"f.jsonl:1: energy_joules: empty"}},
		{"a key given twice", "f.jsonl", `{"host":"h","gpu_uuid":"G1","gpu_model":"H100-SXM5-80GB","tenant":"a","start":"2026-11-01T10:00:00Z","end":"2026-11-01T10:00:10Z","gpu_seconds":1,"gpu_seconds":9}` + "\n",
			[]string{"f.jsonl:1: gpu_seconds: given twice"}},
		{"a sub-second interval", "f.csv", csvHeader + "h,G1,H100-SXM5-80GB,,,acme,a,2026-11-01T10:00:00.2Z,2026-11-01T10:00:00.7Z,0.5,1\n",
			[]string{"f.csv:2: start: timestamp", "fraction of a second"}},
		{"a 1g.10gb instance holding the whole interval", "f.csv", csvHeader + "h,G1,H100-SXM5-80GB,MIG-1,1g.10gb,acme,a,2026-11-01T10:00:00Z,2026-11-01T10:05:00Z,300,1\n",
			[]string{"f.csv:2: gpu_seconds: more than the interval × 1/7 (42.857143)"}},
		{"a MIG profile the model does not have", "f.csv", csvHeader + "h,G1,H100-SXM5-80GB,MIG-1,9g.99gb,acme,a," + ok + ",1,1\n",
			[]string{`f.csv:2: mig_profile: H100-SXM5-80GB has no MIG profile "9g.99gb"`}},
		{"an interval over 31 days", "f.csv", csvHeader + "h,G1,H100-SXM5-80GB,,,acme,a,2026-01-01T00:00:00Z,2026-03-01T00:00:00Z,1,1\n",
			[]string{"f.csv:2: end: interval of 1416h0m0s is longer than 31 days"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := storetest.New(t)
			err := importOne(t, s, file(t, tc.file, tc.body), importer.Options{})
			wantRefused(t, err, tc.want...)
			if got := gpuSeconds(t, s); len(got) != 0 {
				t.Fatalf("stored %v", got)
			}
		})
	}
}

func TestHugeCSVFieldIsRefusedLikeALongJSONLine(t *testing.T) {
	s := storetest.New(t)
	big := strings.Repeat("x", importer.MaxLineBytes+8<<10)
	csv := file(t, "f.csv", csvHeader+"h,G1,H100-SXM5-80GB,,,acme,a,2026-11-01T10:00:00Z,2026-11-01T10:00:10Z,1,1\nh,G1,H100-SXM5-80GB,,,acme,\""+big+"\",2026-11-01T10:00:00Z,2026-11-01T10:00:10Z,1,1\n")
	wantRefused(t, importOne(t, s, csv, importer.Options{}), "f.csv:3: record longer than 4 MiB")
	jsonl := file(t, "f.jsonl", `{"workload":"`+big+`"}`+"\n")
	wantRefused(t, importOne(t, s, jsonl, importer.Options{}), "f.jsonl:1: line longer than 4 MiB")
	if got := gpuSeconds(t, s); len(got) != 0 {
		t.Fatalf("stored %v", got)
	}
}

func TestEmptyCSVAndJSONLAnswerAlike(t *testing.T) {
	s := storetest.New(t)
	for _, name := range []string{"empty.csv", "empty.jsonl"} {
		res, err := importer.Import(context.Background(), []importer.File{{Path: file(t, name, ""), Format: mustFormat(t, name)}}, importer.Options{}, s)
		if err != nil || res != (importer.Result{}) {
			t.Errorf("%s: %+v, %v; want no rows and no error", name, res, err)
		}
	}
}

func mustFormat(t *testing.T, name string) importer.Format {
	f, err := importer.FormatFromName(name)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestAllFilesAreCheckedBeforeAnyIsStored(t *testing.T) {
	s := storetest.New(t)
	good := file(t, "good.csv", csvHeader+"h,G1,H100-SXM5-80GB,,,acme,a,2026-11-01T10:00:00Z,2026-11-01T10:00:10Z,10,1\n")
	// Fine on its own; together with good.csv the GPU is overfull.
	clash := file(t, "clash.csv", csvHeader+"h,G1,H100-SXM5-80GB,,,globex,b,2026-11-01T10:00:00Z,2026-11-01T10:00:10Z,10,1\n")
	_, err := importer.Import(context.Background(), []importer.File{{Path: good, Format: importer.FormatCSV}, {Path: clash, Format: importer.FormatCSV}}, importer.Options{}, s)
	wantRefused(t, err, "good.csv:2: gpu_seconds: GPU G1", "clash.csv:2")
	if got := gpuSeconds(t, s); len(got) != 0 {
		t.Fatalf("stored %v", got)
	}
}
