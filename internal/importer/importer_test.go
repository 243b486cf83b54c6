package importer

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/meter"
)

func readAll(t *testing.T, format Format, in string) ([]collectors.Sample, error) {
	t.Helper()
	var out []collectors.Sample
	err := Read(strings.NewReader(in), format, func(s collectors.Sample) error {
		out = append(out, s)
		return nil
	})
	return out, err
}

func TestParseFixed(t *testing.T) {
	cases := []struct {
		in      string
		scale   int
		want    uint64
		wantErr bool
	}{
		{"10", 6, 10_000_000, false},
		{"4.285714", 6, 4_285_714, false},
		{"0.5", 3, 500, false},
		{"3500.125", 3, 3_500_125, false},
		{"7.50000000", 6, 7_500_000, false}, // zeros beyond the unit are fine
		{"", 6, 0, true},                    // empty is not zero: write 0, or mark the meter unmeasured,
		{"1.0000001", 6, 0, true},           // finer than a microsecond
		{"-1", 6, 0, true},
		{"1e3", 6, 0, true},
		{"abc", 0, 0, true},
		{".5", 3, 0, true},
		{"1.5", 0, 0, true},
		{"99999999999999999999", 0, 0, true},
	}
	for _, tc := range cases {
		got, err := parseFixed(tc.in, tc.scale)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("parseFixed(%q, %d) = %d, %v; want %d, err %v", tc.in, tc.scale, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestCSVAndJSONLReadTheSameSamples(t *testing.T) {
	csvRows := mustRead(t, FormatCSV, "testdata/good.csv")
	jsonRows := mustRead(t, FormatJSONL, "testdata/good.jsonl")
	if len(csvRows) != 3 || len(jsonRows) != 3 {
		t.Fatalf("got %d csv and %d jsonl rows, want 3 each", len(csvRows), len(jsonRows))
	}
	for i := range csvRows {
		if csvRows[i] != jsonRows[i] {
			t.Errorf("row %d differs:\n csv   %+v\n jsonl %+v", i, csvRows[i], jsonRows[i])
		}
	}
	first := csvRows[0]
	if first.GPUMicroseconds != 10_000_000 || first.SMActiveMicroseconds != 7_500_000 || first.EnergyMillijoules != 3_500_125 {
		t.Errorf("units converted wrongly: %+v", first)
	}
	if csvRows[1].Unmeasured != meter.UnmeasuredSMActive|meter.UnmeasuredNVLink || csvRows[0].Unmeasured != 0 {
		t.Errorf("unmeasured = %v, %v", csvRows[0].Unmeasured, csvRows[1].Unmeasured)
	}
	if csvRows[1].SKU != "H100-SXM5-80GB/3g.40gb" || csvRows[0].SKU != "H100-SXM5-80GB" {
		t.Errorf("derived SKUs = %q, %q", csvRows[0].SKU, csvRows[1].SKU)
	}
	if first.ID == 0 || first.ID != collectors.SampleID("dgx-01", "GPU-a", "acme", "train-1", first.Start) {
		t.Errorf("sample id not derived deterministically: %d", first.ID)
	}
	if csvRows[1].ID != collectors.SampleID("dgx-01", "MIG-b1", "globex", "infer-7", first.Start) {
		t.Error("MIG sample id must hash the MIG UUID")
	}
}

func TestBadRowsNameLineAndField(t *testing.T) {
	header := "host,gpu_uuid,gpu_model,tenant,workload,start,end,gpu_seconds,energy_joules\n"
	good := "h,G,H100-SXM5-80GB,acme,j,2026-11-01T10:00:00Z,2026-11-01T10:00:10Z,10,1\n"
	cases := []struct {
		name  string
		in    string
		line  int
		field string
	}{
		{"bad timestamp", header + good + "h,G,H100-SXM5-80GB,acme,j,yesterday,2026-11-01T10:00:10Z,10,1\n", 3, "start"},
		{"timestamp before 1970 would wrap in ClickHouse", header + "h,G,H100-SXM5-80GB,acme,j,1969-12-31T23:00:00Z,1969-12-31T23:00:10Z,10,1\n", 2, "start"},
		{"end before start", header + good + good + "h,G,H100-SXM5-80GB,acme,j,2026-11-01T10:00:10Z,2026-11-01T10:00:00Z,0,1\n", 4, "end"},
		{"negative quantity", header + "h,G,H100-SXM5-80GB,acme,j,2026-11-01T10:00:00Z,2026-11-01T10:00:10Z,10,-5\n", 2, "energy_joules"},
		{"unknown column", "host,gpu_uuid,gpu_model,start,end,gpu_seconds,colour\n", 1, "colour"},
		{"missing tenant on a non-idle row", header + "h,G,H100-SXM5-80GB,,job-9,2026-11-01T10:00:00Z,2026-11-01T10:00:10Z,10,1\n", 2, "tenant"},
		{"more gpu time than the interval", header + "h,G,H100-SXM5-80GB,acme,j,2026-11-01T10:00:00Z,2026-11-01T10:00:10Z,11,1\n", 2, "gpu_seconds"},
		{"required column missing", "host,gpu_uuid,start,end,gpu_seconds\n", 1, "gpu_model"},
		{"unknown unmeasured meter", "host,gpu_uuid,gpu_model,tenant,workload,start,end,gpu_seconds,unmeasured\n" +
			"h,G,H100-SXM5-80GB,acme,j,2026-11-01T10:00:00Z,2026-11-01T10:00:10Z,10,temperature\n", 2, "unmeasured"},
		{"wrong field count", header + "h,G\n", 2, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readAll(t, FormatCSV, tc.in)
			assertProblem(t, err, tc.line, tc.field)
		})
	}
	jsonCases := []struct {
		name  string
		in    string
		line  int
		field string
	}{
		{"jsonl unknown key", `{"host":"h","gpu_uuid":"G","gpu_model":"M","start":"2026-11-01T10:00:00Z","end":"2026-11-01T10:00:10Z","gpu_seconds":1,"tenant":"a","colour":"red"}`, 1, "colour"},
		{"jsonl not an object", "{\"host\":\"h\"}\n[1,2]", 2, ""},
		{"jsonl exponent", `{"host":"h","gpu_uuid":"G","gpu_model":"M","start":"2026-11-01T10:00:00Z","end":"2026-11-01T10:00:10Z","gpu_seconds":1e1}`, 1, "gpu_seconds"},
		{"jsonl missing gpu_seconds", `{"host":"h","gpu_uuid":"G","gpu_model":"M","start":"2026-11-01T10:00:00Z","end":"2026-11-01T10:00:10Z"}`, 1, "gpu_seconds"},
	}
	for _, tc := range jsonCases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readAll(t, FormatJSONL, tc.in)
			assertProblem(t, err, tc.line, tc.field)
		})
	}
}

func assertProblem(t *testing.T, err error, line int, field string) {
	t.Helper()
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("error = %v, want a *ValidationError", err)
	}
	for _, p := range ve.Problems {
		if p.Line == line && p.Field == field {
			return
		}
	}
	t.Fatalf("want a problem on line %d field %q, got:\n%v", line, field, err)
}

func mustRead(t *testing.T, f Format, path string) []collectors.Sample {
	t.Helper()
	in, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := readAll(t, f, string(in))
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

func TestFiles(t *testing.T) {
	dir := t.TempDir()
	csvPath, jsonPath := filepath.Join(dir, "a.csv"), filepath.Join(dir, "b.ndjson")
	for _, p := range []string{csvPath, jsonPath} {
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	files, err := Files("", []string{csvPath, jsonPath})
	if err != nil || len(files) != 2 || files[0].Format != FormatCSV || files[1].Format != FormatJSONL {
		t.Fatalf("%+v, %v", files, err)
	}
	if files, err = Files(FormatJSONL, []string{csvPath}); err != nil || files[0].Format != FormatJSONL {
		t.Fatalf("the given format: %+v, %v", files, err)
	}
	for _, paths := range [][]string{{filepath.Join(dir, "c.txt")}, {filepath.Join(dir, "missing.csv")}} {
		if _, err := Files("", paths); !fault.IsValidation(err) {
			t.Errorf("%v: %v, want a validation error", paths, err)
		}
	}
}
