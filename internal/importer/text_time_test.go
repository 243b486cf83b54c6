package importer

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/meter"
)

// Issue 30, defect 14: text a tenant, department or any other name cannot
// be, and times a server cannot store, are refused by the checks a dry run
// makes, naming line and field. Each case was accepted before the fix.

func TestTextFieldsMustBePlainUTF8(t *testing.T) {
	const at = "2026-11-01T10:00:00Z,2026-11-01T10:00:10Z"
	header := "host,gpu_uuid,gpu_model,mig_uuid,mig_profile,sku,tenant,department,workload,start,end,gpu_seconds\n"
	row := func(field, v string) string {
		vals := map[string]string{"host": "h", "gpu_uuid": "G", "gpu_model": "H100-SXM5-80GB", "mig_uuid": "", "mig_profile": "",
			"sku": "H100-SXM5-80GB", "tenant": "acme", "department": "research", "workload": "j"}
		vals[field] = v
		return strings.Join([]string{vals["host"], vals["gpu_uuid"], vals["gpu_model"], vals["mig_uuid"], vals["mig_profile"],
			vals["sku"], vals["tenant"], vals["department"], vals["workload"]}, ",") + "," + at + ",10\n"
	}
	for _, field := range []string{"host", "gpu_uuid", "gpu_model", "mig_uuid", "mig_profile", "sku", "tenant", "department", "workload"} {
		for _, tc := range []struct {
			name, v, msg string
		}{
			{"a byte that is not UTF-8", "ac\xffme", "not valid UTF-8"},
			{"a cut multi-byte character", "acm\xc3", "not valid UTF-8"},
			{"an escape sequence", "ac\x1b[2Jme", "control character U+001B"},
			{"a NUL", "ac\x00me", "control character U+0000"},
			{"DEL", "acme\x7f", "control character U+007F"},
			{"a C1 control", "ac\u0085me", "control character U+0085"},
			{"an inner tab", "ac\tme", "control character U+0009"},
		} {
			t.Run(field+", "+tc.name, func(t *testing.T) {
				_, err := readAll(t, FormatCSV, header+row("tenant", "acme")+row(field, tc.v))
				assertProblem(t, err, 3, field)
				if !strings.Contains(err.Error(), "line 3: "+field+": "+tc.msg) {
					t.Errorf("error %q does not say %q", err, tc.msg)
				}
				if strings.Contains(err.Error(), tc.v) {
					t.Errorf("the error repeats the bad text raw: %q", err)
				}
			})
		}
	}
	// JSON: escapes decode to control characters, and bad bytes are not
	// quietly made U+FFFD.
	for _, tc := range []struct {
		name, line, field string
	}{
		{"an escaped NUL", `{"host":"h","gpu_uuid":"G","gpu_model":"H100-SXM5-80GB","tenant":"ac\u0000me","start":"2026-11-01T10:00:00Z","end":"2026-11-01T10:00:10Z","gpu_seconds":10}`, "tenant"},
		{"an escaped bell", `{"host":"h","gpu_uuid":"G","gpu_model":"H100-SXM5-80GB","tenant":"acme","department":"r\u0007","start":"2026-11-01T10:00:00Z","end":"2026-11-01T10:00:10Z","gpu_seconds":10}`, "department"},
		{"a raw byte that is not UTF-8", "{\"host\":\"h\",\"gpu_uuid\":\"G\",\"gpu_model\":\"H100-SXM5-80GB\",\"tenant\":\"acme\",\"workload\":\"j\xfe\",\"start\":\"2026-11-01T10:00:00Z\",\"end\":\"2026-11-01T10:00:10Z\",\"gpu_seconds\":10}", "workload"},
	} {
		t.Run("jsonl, "+tc.name, func(t *testing.T) {
			_, err := readAll(t, FormatJSONL, tc.line)
			assertProblem(t, err, 1, tc.field)
		})
	}
	// Names that are plain text in any script are taken as they are.
	rows, err := readAll(t, FormatCSV, header+row("tenant", "Universität Zürich")+row("department", "物理学"))
	if err != nil || len(rows) != 2 || rows[0].Tenant != "Universität Zürich" || rows[1].Department != "物理学" {
		t.Fatalf("plain text refused: %v %+v", err, rows)
	}
	// A header naming an unknown column with a control character is shown
	// quoted, not raw.
	_, err = readAll(t, FormatCSV, "host,gpu_uuid,gpu_model,start,end,gpu_seconds,co\x1blour\n")
	assertProblem(t, err, 1, `"co\x1blour"`)
}

func TestTimesOutsideWhatEveryServerStoresAreRefused(t *testing.T) {
	header := "host,gpu_uuid,gpu_model,tenant,start,end,gpu_seconds\n"
	for _, tc := range []struct {
		name, start, end string
		field            string // "" when the row is taken
	}{
		{"the first second DateTime holds", "1970-01-01T00:00:00Z", "1970-01-01T00:00:10Z", ""},
		{"a start before 1970", "1969-12-31T23:59:55Z", "1970-01-01T00:00:05Z", "start"},
		{"before 1970 by its offset", "1970-01-01T00:30:00+01:00", "1970-01-01T00:30:10+01:00", "start"},
		{"an end at the last second every server holds", "2105-12-31T23:59:49Z", "2105-12-31T23:59:59Z", ""},
		{"an end in 2106", "2105-12-31T23:59:55Z", "2106-01-01T00:00:05Z", "end"},
		{"a row at the end of DateTime", "2106-02-07T06:28:00Z", "2106-02-07T06:28:10Z", "start"},
		{"a row past DateTime", "2106-02-07T06:28:10Z", "2106-02-07T06:28:20Z", "start"},
		{"a row far past", "9999-12-31T23:59:40Z", "9999-12-31T23:59:50Z", "start"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows, err := readAll(t, FormatCSV, header+"h,G,H100-SXM5-80GB,acme,"+tc.start+","+tc.end+",10\n")
			if tc.field == "" {
				if err != nil || len(rows) != 1 {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			assertProblem(t, err, 2, tc.field)
			if !strings.Contains(err.Error(), "1970-01-01T00:00:00Z .. 2105-12-31T23:59:59Z") {
				t.Errorf("error %q does not give the range", err)
			}
		})
	}
}

// TestParsedRowsGetTheSameChecks: rows another parser made (sacct) are
// held to the same text and time rules, by the dry run too.
func TestParsedRowsGetTheSameChecks(t *testing.T) {
	start := time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)
	row := func(line int, tenant string, start time.Time) Row {
		return Row{Line: line, Sample: collectors.Sample{Host: "hpc1", GPUUUID: "SLURM-hpc1-1-0", GPUModel: "H100-SXM5-80GB",
			Tenant: tenant, Workload: "slurm/1", Start: start, End: start.Add(time.Hour), Values: meter.Values{GPUMicroseconds: 1e9}}}
	}
	f := File{Path: "jobs.sacct", Format: FormatParsed, Rows: []Row{row(2, "uni\x07", start), row(3, "uni", time.Date(2106, 1, 1, 0, 0, 0, 0, time.UTC))}}
	_, err := Import(context.Background(), []File{f}, Options{DryRun: true}, nil)
	for _, want := range []string{"jobs.sacct:2: tenant: control character U+0007", "jobs.sacct:3: start: 2106-01-01T00:00:00Z is outside"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v; want %q", err, want)
		}
	}
}
