package reports_test

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/pricing"
	"github.com/gpumeter/gpumeter/reports"
)

func record(bucket *time.Time, tenant, department, sku string, samples uint64, gpuHours string) pricing.UsageRecord {
	return pricing.UsageRecord{Bucket: bucket, Tenant: tenant, Department: department, SKU: sku, Samples: samples,
		Quantities: [meter.NumPriced]string{gpuHours, "0.12345", "10.25", "0.0005", "1.005", "0"}}
}

func hostRecord(r pricing.UsageRecord, host, workload string) pricing.UsageRecord {
	r.Host, r.Workload = host, workload
	return r
}

func TestWriteUsageTable(t *testing.T) {
	h := time.Date(2026, 11, 2, 13, 0, 0, 0, time.UTC)
	cases := []struct {
		name  string
		table reports.UsageTable
		want  string
	}{
		{"tenant and department, idle and no department named, a total",
			reports.UsageTable{ByTenant: true, ByDepartment: true,
				Rows:  []pricing.UsageRecord{record(nil, "", "", "", 3, "1.0005"), record(nil, "acme", "research", "", 12, "317.8571428571")},
				Total: record(nil, "", "", "", 15, "318.8576428571")},
			`  TENANT  DEPARTMENT  SAMPLES  GPU-HOURS  SM-ACTIVE-H  MEM-GIB-H  ENERGY-KWH  PCIE-GIB  NVLINK-GIB
  (idle)      (none)        3      1.001        0.123       10.3       0.001      1.01        0.00
    acme    research       12    317.857        0.123       10.3       0.001      1.01        0.00
   TOTAL                   15    318.858        0.123       10.3       0.001      1.01        0.00
`},
		{"bucket and SKU: columns in fixed order, whatever the grouping order",
			reports.UsageTable{ByBucket: true, BySKU: true,
				Rows:  []pricing.UsageRecord{record(&h, "", "", "H100-SXM5-80GB/3g.40gb", 1, "0.428571428571428571")},
				Total: record(nil, "", "", "", 1, "0.428571428571428571")},
			`            BUCKET                     SKU  SAMPLES  GPU-HOURS  SM-ACTIVE-H  MEM-GIB-H  ENERGY-KWH  PCIE-GIB  NVLINK-GIB
  2026-11-02 13:00  H100-SXM5-80GB/3g.40gb        1      0.429        0.123       10.3       0.001      1.01        0.00
`},
		{"host and workload after SKU; an empty workload (idle) is none",
			reports.UsageTable{ByTenant: true, ByHost: true, ByWorkload: true,
				Rows: []pricing.UsageRecord{hostRecord(record(nil, "", "", "", 1, "1"), "node-a", ""),
					hostRecord(record(nil, "acme", "", "", 2, "2"), "node-b", "train-1")},
				Total: record(nil, "", "", "", 3, "3")},
			`  TENANT    HOST  WORKLOAD  SAMPLES  GPU-HOURS  SM-ACTIVE-H  MEM-GIB-H  ENERGY-KWH  PCIE-GIB  NVLINK-GIB
  (idle)  node-a    (none)        1      1.000        0.123       10.3       0.001      1.01        0.00
    acme  node-b   train-1        2      2.000        0.123       10.3       0.001      1.01        0.00
   TOTAL                          3      3.000        0.123       10.3       0.001      1.01        0.00
`},
		{"no grouping: one row, no total",
			reports.UsageTable{Rows: []pricing.UsageRecord{record(nil, "", "", "", 7, "2")}, Total: record(nil, "", "", "", 7, "2")},
			`  SAMPLES  GPU-HOURS  SM-ACTIVE-H  MEM-GIB-H  ENERGY-KWH  PCIE-GIB  NVLINK-GIB
        7      2.000        0.123       10.3       0.001      1.01        0.00
`},
		{"no rows: the header alone",
			reports.UsageTable{ByTenant: true},
			`  TENANT  SAMPLES  GPU-HOURS  SM-ACTIVE-H  MEM-GIB-H  ENERGY-KWH  PCIE-GIB  NVLINK-GIB
`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assertWrites(t, func(w io.Writer) error { return reports.WriteUsageTable(w, tc.table) }, tc.want)
		})
	}
	if err := reports.WriteUsageTable(&failingWriter{}, cases[0].table); !errors.Is(err, errFull) {
		t.Errorf("a failing writer: error %v", err)
	}
}

func TestWriteUsageJSON(t *testing.T) {
	h := time.Date(2026, 11, 2, 13, 0, 0, 0, time.UTC)
	rec := record(&h, "acme", "", "B200", 2, "0.5")
	rec.Unmeasured = map[string]string{"pcie": "0.25", "energy": "0.5"}
	onHost := hostRecord(record(nil, "", "", "", 1, "1"), "node-a", "train-1")
	cases := []struct {
		name string
		rows []pricing.UsageRecord
		want string
	}{
		{"no rows is an empty array, not null", nil, "[]\n"},
		{"a row: empty groupings and a nil bucket left out, unmeasured by meter in key order",
			[]pricing.UsageRecord{rec, record(nil, "", "", "", 0, "0")}, `[
  {
    "bucket": "2026-11-02T13:00:00Z",
    "tenant": "acme",
    "sku": "B200",
    "samples": 2,
    "gpu_hours": "0.5",
    "sm_active_hours": "0.12345",
    "memory_gib_hours": "10.25",
    "energy_kwh": "0.0005",
    "pcie_gib": "1.005",
    "nvlink_gib": "0",
    "unmeasured_gpu_hours": {
      "energy": "0.5",
      "pcie": "0.25"
    }
  },
  {
    "samples": 0,
    "gpu_hours": "0",
    "sm_active_hours": "0.12345",
    "memory_gib_hours": "10.25",
    "energy_kwh": "0.0005",
    "pcie_gib": "1.005",
    "nvlink_gib": "0"
  }
]
`},
		{"host and workload are named", []pricing.UsageRecord{onHost}, `[
  {
    "host": "node-a",
    "workload": "train-1",
    "samples": 1,
    "gpu_hours": "1",
    "sm_active_hours": "0.12345",
    "memory_gib_hours": "10.25",
    "energy_kwh": "0.0005",
    "pcie_gib": "1.005",
    "nvlink_gib": "0"
  }
]
`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assertWrites(t, func(w io.Writer) error { return reports.WriteUsageJSON(w, tc.rows) }, tc.want)
		})
	}
}

// What usage --json writes, quote reads: the hourly rows of a record are
// its non-zero meters at its bucket.
func TestWriteUsageJSONReadsBackAsUsage(t *testing.T) {
	h := time.Date(2026, 11, 2, 13, 0, 0, 0, time.UTC)
	var buf bytes.Buffer
	if err := reports.WriteUsageJSON(&buf, []pricing.UsageRecord{record(&h, "acme", "", "B200", 2, "0.5")}); err != nil {
		t.Fatal(err)
	}
	rows, origins, err := pricing.ParseUsageFile("-", buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i, r := range rows {
		if !r.Hour.Equal(h) || r.SKU != "B200" || origins[i] != (pricing.RowOrigin{Where: "row", N: 0}) {
			t.Errorf("row %d: %+v from %+v", i, r, origins[i])
		}
		got = append(got, string(r.Meter)+"="+r.Quantity.String())
	}
	want := "gpu_hours=0.5 sm_active_hours=0.12345 memory_gib_hours=10.25 energy_kwh=0.0005 pcie_gib=1.005"
	if strings.Join(got, " ") != want {
		t.Errorf("rows %s, want %s", strings.Join(got, " "), want)
	}
}
