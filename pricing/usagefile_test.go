package pricing_test

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/pricing"
)

const csvHeader = "hour,sku,meter,quantity\n"

func TestParseUsageFile(t *testing.T) {
	h100 := "H100-SXM5-80GB"
	row := func(hour int, sku string, m pricing.Meter, q string) pricing.Usage {
		return pricing.Usage{Hour: march.Add(time.Duration(hour) * time.Hour), SKU: sku, Meter: m, Quantity: dec(q)}
	}
	line := func(n int) pricing.RowOrigin { return pricing.RowOrigin{Where: "line", N: n} }
	elem := func(n int) pricing.RowOrigin { return pricing.RowOrigin{Where: "row", N: n} }
	cases := []struct {
		name    string
		file    string // its name decides nothing unless it ends in .json
		data    string
		rows    []pricing.Usage
		origins []pricing.RowOrigin
		err     string // a part of the error; "" for none
	}{
		{"CSV rows, their lines as origins", "u.csv",
			csvHeader + "2026-03-01T00:00:00Z,H100-SXM5-80GB,gpu_hours,6\n2026-03-01T01:00:00Z,H100-SXM5-80GB,energy_kwh,0.25\n",
			[]pricing.Usage{row(0, h100, pricing.GPUHours, "6"), row(1, h100, pricing.Meter("energy_kwh"), "0.25")},
			[]pricing.RowOrigin{line(2), line(3)}, ""},
		{"CSV header in any order and case, spaces trimmed, other columns ignored", "u.csv",
			"Quantity, note ,METER,sku,hour\n 1.5 ,x, gpu_hours , H100-SXM5-80GB ,2026-03-01\n",
			[]pricing.Usage{row(0, h100, pricing.GPUHours, "1.5")}, []pricing.RowOrigin{line(2)}, ""},
		{"CSV with a quoted field over two lines names the line the row starts on", "u.csv",
			csvHeader + "2026-03-01T00:00:00Z,\"H100\nSXM5\",gpu_hours,1\n2026-03-01T00:00:00Z,B200,gpu_hours,2\n",
			[]pricing.Usage{row(0, "H100\nSXM5", pricing.GPUHours, "1"), row(0, "B200", pricing.GPUHours, "2")},
			[]pricing.RowOrigin{line(2), line(4)}, ""},
		{"the same hour twice is kept twice (the engine adds them up)", "u.csv",
			csvHeader + "2026-03-01T00:00:00Z,B200,gpu_hours,1\n2026-03-01T00:00:00Z,B200,gpu_hours,1\n",
			[]pricing.Usage{row(0, "B200", pricing.GPUHours, "1"), row(0, "B200", pricing.GPUHours, "1")},
			[]pricing.RowOrigin{line(2), line(3)}, ""},
		{"a zero quantity is a row", "u.csv", csvHeader + "2026-03-01T00:00:00Z,B200,gpu_hours,0.000\n",
			[]pricing.Usage{row(0, "B200", pricing.GPUHours, "0")}, []pricing.RowOrigin{line(2)}, ""},
		{"a header alone is no rows and no error", "u.csv", csvHeader, nil, nil, ""},
		{"an empty CSV file", "u.csv", "", nil, nil, "read CSV header: EOF"},
		{"a header without quantity", "u.csv", "hour,sku,meter\n", nil, nil, `CSV header lacks "quantity"`},
		{"no header", "u.csv", "2026-03-01T00:00:00Z,B200,gpu_hours,1\n", nil, nil, `CSV header lacks "hour"`},
		{"a bad hour", "u.csv", csvHeader + "yesterday,B200,gpu_hours,1\n", nil, nil, `line 2: hour: "yesterday" is not a time`},
		{"a bad number", "u.csv", csvHeader + "2026-03-01T00:00:00Z,B200,gpu_hours,lots\n", nil, nil, `line 2: quantity: "lots" is not a decimal number`},
		{"a negative quantity", "u.csv", csvHeader + "2026-03-01T00:00:00Z,B200,gpu_hours,-1\n", nil, nil, "line 2: quantity: negative quantity -1"},
		{"an exponent", "u.csv", csvHeader + "2026-03-01T00:00:00Z,B200,gpu_hours,1e3\n", nil, nil, `line 2: quantity: "1e3" is not a decimal number`},
		{"more than 18 places", "u.csv", csvHeader + "2026-03-01T00:00:00Z,B200,gpu_hours,0.0000000000000000001\n", nil, nil, "more than 18 decimal places"},
		{"more than 15 integer digits", "u.csv", csvHeader + "2026-03-01T00:00:00Z,B200,gpu_hours,1000000000000000\n", nil, nil, "more than 15 integer digits"},
		{"an empty quantity", "u.csv", csvHeader + "2026-03-01T00:00:00Z,B200,gpu_hours,\n", nil, nil, "line 2: quantity: empty number"},
		{"an unknown meter", "u.csv", csvHeader + "2026-03-01T00:00:00Z,B200,gpu_minutes,1\n", nil, nil, `line 2: unknown meter "gpu_minutes" (known: gpu_hours, `},
		{"a short row", "u.csv", csvHeader + "2026-03-01T00:00:00Z,B200\n", nil, nil, "line 2: 2 fields, the header has 4"},
		{"broken quoting stops the reading", "u.csv", csvHeader + "2026-03-01T00:00:00Z,\"B200,gpu_hours,1\n", nil, nil, "read CSV: "},
		{"every bad row is found, a repeated problem once", "u.csv",
			csvHeader + strings.Repeat("2026-03-01T00:00:00Z,B200,gpu_hourz,1\n", 5) + "2026-03-01T00:00:00Z,B200,gpu_hours,x\n",
			nil, nil, `lines 2, 3, 4 and 2 more: unknown meter "gpu_hourz"`},

		{"JSON hourly objects, quantity a number or a string, their indexes as origins", "u.json",
			`[{"hour":"2026-03-01T00:00:00Z","sku":"H100-SXM5-80GB","meter":"gpu_hours","quantity":6},
			  {"hour":"2026-03-01T01:00:00Z","sku":"H100-SXM5-80GB","meter":"energy_kwh","quantity":"0.25"}]`,
			[]pricing.Usage{row(0, h100, pricing.GPUHours, "6"), row(1, h100, pricing.Meter("energy_kwh"), "0.25")},
			[]pricing.RowOrigin{elem(0), elem(1)}, ""},
		{"a usage --json record becomes one row per non-zero meter", "u.json",
			`[{"bucket":"2026-03-01T02:00:00Z","sku":"H100-SXM5-80GB","samples":3,"gpu_hours":"0.5","sm_active_hours":"0",
			   "memory_gib_hours":"","energy_kwh":"0.1","pcie_gib":"2","nvlink_gib":"0","unmeasured_gpu_hours":{"nvlink":"0.5"}},
			  {"bucket":"2026-03-01T03:00:00+01:00","tenant":"acme","department":"r","sku":"B200","samples":1,"gpu_hours":"1",
			   "sm_active_hours":"0","memory_gib_hours":"0","energy_kwh":"0","pcie_gib":"0","nvlink_gib":"0"}]`,
			[]pricing.Usage{row(2, h100, pricing.GPUHours, "0.5"), row(2, h100, pricing.Meter("energy_kwh"), "0.1"),
				row(2, h100, pricing.Meter("pcie_gib"), "2"), row(2, "B200", pricing.GPUHours, "1")},
			[]pricing.RowOrigin{elem(0), elem(0), elem(0), elem(1)}, ""},
		{"a usage --json record by host and workload reads as one by SKU; rows of one hour and SKU stay apart", "u.json",
			`[{"bucket":"2026-03-01T02:00:00Z","sku":"B200","host":"node-a","workload":"train-1","samples":1,"gpu_hours":"1",
			   "sm_active_hours":"0","memory_gib_hours":"0","energy_kwh":"0","pcie_gib":"0","nvlink_gib":"0"},
			  {"bucket":"2026-03-01T02:00:00Z","sku":"B200","host":"node-b","samples":1,"gpu_hours":"2",
			   "sm_active_hours":"0","memory_gib_hours":"0","energy_kwh":"0","pcie_gib":"0","nvlink_gib":"0"}]`,
			[]pricing.Usage{row(2, "B200", pricing.GPUHours, "1"), row(2, "B200", pricing.GPUHours, "2")},
			[]pricing.RowOrigin{elem(0), elem(1)}, ""},
		{"a name ending in .json is JSON whatever the text", "U.JSON", ` [] `, nil, nil, ""},
		{"text starting with [ is JSON whatever the name", "-", " \n[]", nil, nil, ""},
		{"JSON null is no rows", "u.json", `null`, nil, nil, ""},
		{"not a JSON array", "u.json", `{"hour":"2026-03-01T00:00:00Z"}`, nil, nil, "want a JSON array of"},
		{"an empty JSON file", "u.json", ``, nil, nil, "want a JSON array of"},
		{"an unknown key", "u.json", `[{"hour":"2026-03-01T00:00:00Z","sku":"B200","meter":"gpu_hours","quantity":1,"extra":1}]`, nil, nil, `unknown field "extra"`},
		{"a JSON quantity in exponent form", "u.json", `[{"hour":"2026-03-01T00:00:00Z","sku":"B200","meter":"gpu_hours","quantity":1e3}]`, nil, nil, `row 0: quantity: "1e3" is not a decimal number`},
		{"a JSON quantity of null", "u.json", `[{"hour":"2026-03-01T00:00:00Z","sku":"B200","meter":"gpu_hours","quantity":null}]`, nil, nil, "row 0: quantity: empty number"},
		{"a JSON hourly object without a quantity", "u.json", `[{"hour":"2026-03-01T00:00:00Z","sku":"B200","meter":"gpu_hours"}]`, nil, nil, "row 0: quantity: empty number"},
		{"a JSON bad hour", "u.json", `[{"hour":"noon","sku":"B200","meter":"gpu_hours","quantity":1}]`, nil, nil, `row 0: hour: "noon" is not a time`},
		{"a usage record without a bucket", "u.json", `[{"sku":"B200","samples":1,"gpu_hours":"1"}]`, nil, nil, "row 0: a usage row needs an hour bucket and a sku"},
		{"a usage record without a sku", "u.json", `[{"bucket":"2026-03-01T00:00:00Z","tenant":"acme","gpu_hours":"1"}]`, nil, nil, "row 0: a usage row needs an hour bucket and a sku"},
		{"a usage record with a bad meter text", "u.json", `[{"bucket":"2026-03-01T00:00:00Z","sku":"B200","gpu_hours":"-2"}]`, nil, nil, "row 0: quantity: negative quantity -2"},
		{"bad JSON objects are all found, each problem once", "u.json",
			`[{"hour":"x","sku":"B","meter":"gpu_hours","quantity":1},{"hour":"x","sku":"B","meter":"gpu_hours","quantity":1},{"sku":"B"}]`,
			nil, nil, `rows 0 and 1: hour: "x" is not a time (want RFC 3339, e.g. 2026-03-01T00:00:00Z, or YYYY-MM-DD); row 2: a usage row needs`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rows, origins, err := pricing.ParseUsageFile(tc.file, []byte(tc.data))
			if wantsErr(t, err, tc.err) {
				if rows != nil || origins != nil {
					t.Errorf("rows %v and origins %v with an error", rows, origins)
				}
				return
			}
			if len(rows) != len(tc.rows) || len(origins) != len(tc.origins) {
				t.Fatalf("rows %+v origins %+v, want %+v %+v", rows, origins, tc.rows, tc.origins)
			}
			for i := range rows {
				if !sameUsage(rows[i], tc.rows[i]) {
					t.Errorf("row %d: %+v, want %+v", i, rows[i], tc.rows[i])
				}
				if origins[i] != tc.origins[i] {
					t.Errorf("origin %d: %+v, want %+v", i, origins[i], tc.origins[i])
				}
			}
		})
	}
}

func sameUsage(a, b pricing.Usage) bool {
	return a.Hour.Equal(b.Hour) && a.SKU == b.SKU && a.Meter == b.Meter && a.Quantity.Equal(b.Quantity)
}

// The rows usage --json writes are the ones quote reads: one type, so a
// field renamed on one side is renamed on the other.
func TestUsageRecordRoundTrips(t *testing.T) {
	b := march.Add(5 * time.Hour)
	recs := []pricing.UsageRecord{{Bucket: &b, Tenant: "acme", SKU: "H100-SXM5-80GB/3g.40gb", Samples: 2,
		Quantities: [meter.NumPriced]string{"0.428571428571428571", "0", "1.5", "0.000277777777777778", "0", "3"}, Unmeasured: map[string]string{"energy": "0.1"}}}
	data, err := json.Marshal(recs)
	if err != nil {
		t.Fatal(err)
	}
	var back []pricing.UsageRecord
	if err := json.Unmarshal(data, &back); err != nil || len(back) != 1 || !back[0].Bucket.Equal(b) || back[0].Quantity("memory_gib_hours") != "1.5" {
		t.Fatalf("%s read back as %+v (%v)", data, back, err)
	}
	rows, _, err := pricing.ParseUsageJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	want := []pricing.Usage{
		{Hour: b, SKU: "H100-SXM5-80GB/3g.40gb", Meter: pricing.GPUHours, Quantity: dec("0.428571428571428571")},
		{Hour: b, SKU: "H100-SXM5-80GB/3g.40gb", Meter: pricing.Meter("memory_gib_hours"), Quantity: dec("1.5")},
		{Hour: b, SKU: "H100-SXM5-80GB/3g.40gb", Meter: pricing.Meter("energy_kwh"), Quantity: dec("0.000277777777777778")},
		{Hour: b, SKU: "H100-SXM5-80GB/3g.40gb", Meter: pricing.Meter("nvlink_gib"), Quantity: dec("3")},
	}
	if len(rows) != len(want) {
		t.Fatalf("rows %+v, want %+v", rows, want)
	}
	for i := range rows {
		if !sameUsage(rows[i], want[i]) {
			t.Errorf("row %d: %+v, want %+v", i, rows[i], want[i])
		}
	}
}

func TestRowProblems(t *testing.T) {
	flag := pricing.RowOrigin{Where: "--quantity B200:gpu_hours=1", N: -1}
	cases := []struct {
		name string
		add  func(ps *pricing.RowProblems)
		want string // "" for a nil error
	}{
		{"nothing added is no error", func(*pricing.RowProblems) {}, ""},
		{"one line", func(ps *pricing.RowProblems) { ps.Add(pricing.RowOrigin{Where: "line", N: 3}, "bad") }, "line 3: bad"},
		{"two lines of one problem", func(ps *pricing.RowProblems) {
			ps.Add(pricing.RowOrigin{Where: "line", N: 3}, "bad")
			ps.Add(pricing.RowOrigin{Where: "line", N: 9}, "bad")
		}, "lines 3 and 9: bad"},
		{"four lines are all named", func(ps *pricing.RowProblems) {
			for n := 2; n <= 5; n++ {
				ps.Add(pricing.RowOrigin{Where: "row", N: n}, "bad")
			}
		}, "rows 2, 3, 4 and 5: bad"},
		{"past three lines the rest are counted", func(ps *pricing.RowProblems) {
			for n := 2; n < 27; n++ {
				ps.Add(pricing.RowOrigin{Where: "line", N: n}, "bad")
			}
		}, "lines 2, 3, 4 and 22 more: bad"},
		{"a flag is named once however many rows it made", func(ps *pricing.RowProblems) {
			for range 744 {
				ps.Add(flag, `unknown SKU "B200"`)
			}
		}, `--quantity B200:gpu_hours=1: unknown SKU "B200"`},
		{"problems in the order found, then others, then the count of more", func(ps *pricing.RowProblems) {
			ps.Add(pricing.RowOrigin{Where: "line", N: 2}, "b")
			ps.AddOther("read CSV: broken")
			ps.Add(pricing.RowOrigin{Where: "line", N: 4}, "a")
			ps.AddMore(7)
		}, "line 2: b; line 4: a; read CSV: broken; and 7 more problems"},
		{"past ten different problems the rest are counted", func(ps *pricing.RowProblems) {
			for n := range 12 {
				ps.Add(pricing.RowOrigin{Where: "line", N: n + 2}, strings.Repeat("x", n+1))
			}
			ps.AddOther("other")
		}, "line 11: xxxxxxxxxx; and 3 more problems"},
		{"only a count", func(ps *pricing.RowProblems) { ps.AddMore(2) }, "and 2 more problems"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var ps pricing.RowProblems
			tc.add(&ps)
			err := ps.Err()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case tc.want != "" && (err == nil || !strings.HasSuffix(err.Error(), tc.want)):
				t.Errorf("error %v, want one ending in %q", err, tc.want)
			}
		})
	}
}

// usageCSV writes rows as a usage CSV file, the way a person would.
func usageCSV(t testing.TB, rows []pricing.Usage) []byte {
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	w.Write([]string{"hour", "sku", "meter", "quantity"})
	for _, r := range rows {
		w.Write([]string{r.Hour.Format(time.RFC3339Nano), r.SKU, string(r.Meter), r.Quantity.String()})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// usageJSONRows writes rows as a JSON usage file of hourly objects.
func usageJSONRows(t testing.TB, rows []pricing.Usage) []byte {
	type hourly struct {
		Hour     string `json:"hour"`
		SKU      string `json:"sku"`
		Meter    string `json:"meter"`
		Quantity string `json:"quantity"`
	}
	out := make([]hourly, len(rows))
	for i, r := range rows {
		out[i] = hourly{r.Hour.Format(time.RFC3339Nano), r.SKU, string(r.Meter), r.Quantity.String()}
	}
	data, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestExplainRows(t *testing.T) {
	lines := []pricing.RowOrigin{{Where: "line", N: 2}, {Where: "line", N: 3}, {Where: "--quantity x", N: -1}}
	ve := pricing.NewValidationError("input", []pricing.Problem{
		{Path: "usage[0].sku", Message: `unknown SKU "B300"`},
		{Path: "usage[1].sku", Message: `unknown SKU "B300"`},
		{Path: "usage[2].hour", Message: "not on the hour"},
		{Path: "start", Message: "after the end"},
	}, 3)
	got, rows := pricing.ExplainRows(ve, lines)
	want := `lines 2 and 3: sku: unknown SKU "B300"; --quantity x: hour: not on the hour; start: after the end; and 3 more problems`
	if !rows || got == nil || got.Error() != want || !fault.IsValidation(got) {
		t.Errorf("%v (rows %v)\nwant %s", got, rows, want)
	}
	for _, err := range []error{
		errors.New("disk on fire"),
		pricing.NewValidationError("book", []pricing.Problem{{Path: "usage[0].sku", Message: "x"}}, 0),
		pricing.NewValidationError("input", []pricing.Problem{{Path: "start", Message: "after the end"}}, 0),
	} {
		if got, rows := pricing.ExplainRows(err, lines); rows || got != err {
			t.Errorf("%v: rewritten as %v", err, got)
		}
	}
}
