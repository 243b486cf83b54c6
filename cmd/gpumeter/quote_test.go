package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"
)

const exampleBook = "../../pricing/books/gpu-cloud.yaml"

// quoteBook prices H100 gpu_hours with Stripe's graduated example tiers
// and a 1.5× burst; energy at a unit price.
const quoteBook = `
version: quote-test
currency: {code: USD, rounding: {minor_units: 2}}
skus:
  H100-SXM5-80GB:
    weight: 1
    meters:
      gpu_hours:
        mode: graduated
        tiers: [{up_to: 5, unit_price: "7"}, {up_to: 10, unit_price: "6.50"}, {unit_price: "6"}]
        burst: {multiplier: "1.5"}
      energy_kwh: {unit_price: "0.10"}
`

const quoteContract = `
tenant: acme
reservations:
  - {sku: H100-SXM5-80GB, gpus: 4, rate: "1.80", start: 2026-03-01, end: 2026-04-01}
`

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func runCLI(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), append([]string{"quote"}, args...), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// quoteJSON is the part of the JSON result the tests read.
type quoteJSON struct {
	Tenant string `json:"tenant"`
	Start  string `json:"start"`
	End    string `json:"end"`
	Total  string `json:"total"`
	Lines  []struct {
		Kind          string `json:"kind"`
		Quantity      string `json:"quantity"`
		AmountRounded string `json:"amount_rounded"`
	} `json:"lines"`
	Reservations []struct {
		Covered string `json:"covered_gpu_hours"`
		Unused  string `json:"unused_gpu_hours"`
		Burst   string `json:"burst_gpu_hours"`
	} `json:"reservations"`
}

func TestQuotePrices(t *testing.T) {
	dir := t.TempDir()
	book := writeFile(t, dir, "book.yaml", quoteBook)
	contract := writeFile(t, dir, "contract.yaml", quoteContract)
	// 6 GPUs for 2 hours, then 2 GPUs for 10 hours, against 4 reserved.
	csvRows := "hour,sku,meter,quantity\n"
	jsonRows := []string{}
	for h := range 12 {
		q := "2"
		if h < 2 {
			q = "6"
		}
		hour := time.Date(2026, 3, 1, h, 0, 0, 0, time.UTC).Format(time.RFC3339)
		csvRows += hour + ",H100-SXM5-80GB,gpu_hours," + q + "\n"
		jsonRows = append(jsonRows, `{"hour":"`+hour+`","sku":"H100-SXM5-80GB","meter":"gpu_hours","quantity":`+q+`}`)
	}
	usageCSV := writeFile(t, dir, "usage.csv", csvRows)
	usageJSON := writeFile(t, dir, "usage.json", "["+strings.Join(jsonRows, ",")+"]")

	cases := []struct {
		name      string
		args      []string
		wantTotal string
		check     func(t *testing.T, r quoteJSON)
	}{
		{"a quantity is priced with graduated tiers (Stripe: 6 units = 41.50)",
			[]string{"--book", book, "--quantity", "H100-SXM5-80GB:gpu_hours=6", "--from", "2026-03-01"}, "41.50", nil},
		{"repeated quantities add up across meters",
			[]string{"--book", book, "--quantity", "H100-SXM5-80GB:gpu_hours=25", "--quantity", "H100-SXM5-80GB:energy_kwh=12.345", "--from", "2026-03-01"}, "158.73", nil},
		{"a quantity is spread evenly over the hours, so a reservation covers steady use",
			[]string{"--book", book, "--contract", contract, "--quantity", "H100-SXM5-80GB:gpu_hours=2000", "--from", "2026-03-01"}, "5356.80",
			func(t *testing.T, r quoteJSON) {
				if r.Reservations[0].Covered != "2000" || r.Reservations[0].Burst != "0" {
					t.Errorf("want 2000 covered and no burst, got %+v", r.Reservations[0])
				}
			}},
		{"a CSV usage file is priced hour by hour against the reservation",
			[]string{"--book", book, "--contract", contract, "--usage", usageCSV, "--to", "2026-03-01T12:00:00Z", "--from", "2026-03-01"}, "86.40+42.00",
			func(t *testing.T, r quoteJSON) {
				ru := r.Reservations[0]
				if ru.Covered != "28" || ru.Burst != "4" || ru.Unused != "20" {
					t.Errorf("want covered 28, burst 4, unused 20, got %+v", ru)
				}
			}},
		{"a JSON usage file gives the same result",
			[]string{"--book", book, "--contract", contract, "--usage", usageJSON, "--to", "2026-03-01T12:00:00Z", "--from", "2026-03-01"}, "86.40+42.00", nil},
		{"without --from the period is the calendar month of the usage rows",
			[]string{"--book", book, "--usage", usageCSV}, "", func(t *testing.T, r quoteJSON) {
				if r.Start != "2026-03-01T00:00:00Z" || r.End != "2026-04-01T00:00:00Z" {
					t.Errorf("period %s to %s, want March 2026", r.Start, r.End)
				}
			}},
		{"the example book prices a MIG profile",
			[]string{"--book", exampleBook, "--quantity", "H100-SXM5-80GB/3g.40gb:gpu_hours=100", "--from", "2026-03-01"}, "269.00", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(append(tc.args, "--json")...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			var r quoteJSON
			if err := json.Unmarshal([]byte(stdout), &r); err != nil {
				t.Fatalf("output is not JSON: %v\n%s", err, stdout)
			}
			if tc.wantTotal != "" && r.Total != sumText(t, tc.wantTotal) {
				t.Errorf("total %s, want %s\n%s", r.Total, tc.wantTotal, stdout)
			}
			if tc.check != nil {
				tc.check(t, r)
			}
		})
	}
}

// sumText adds "a+b" amounts, so expected totals can be written as their
// parts.
func sumText(t *testing.T, s string) string {
	t.Helper()
	sum := decimal.Zero
	for _, part := range strings.Split(s, "+") {
		sum = sum.Add(decimal.RequireFromString(part))
	}
	return sum.StringFixed(2)
}

func TestQuoteTable(t *testing.T) {
	dir := t.TempDir()
	book := writeFile(t, dir, "book.yaml", quoteBook)
	contract := writeFile(t, dir, "contract.yaml", quoteContract)
	code, stdout, stderr := runCLI("--book", book, "--contract", contract, "--quantity", "H100-SXM5-80GB:gpu_hours=3000", "--from", "2026-03-01")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"tenant acme, book quote-test, USD, 2026-03-01T00:00:00Z to 2026-04-01T00:00:00Z",
		"SKU", "QUANTITY", "ROUNDED",
		"reservation_fee", "5356.800000000", "5356.80",
		"burst", "tier 1", "tier 3",
		"TOTAL", "USD",
		"gpu_hours by coverage:",
		"4 GPU-equivalents of H100-SXM5-80GB at 1.80 USD per GPU-hour",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, stdout)
		}
	}
}

func TestQuoteRejectsBadInput(t *testing.T) {
	dir := t.TempDir()
	book := writeFile(t, dir, "book.yaml", quoteBook)
	badBook := writeFile(t, dir, "bad.yaml", strings.Replace(quoteBook, `{up_to: 10, unit_price: "6.50"}`, `{up_to: 4, unit_price: "6.50"}`, 1))
	badContract := writeFile(t, dir, "badc.yaml", "tenant: acme\nstart: 2026-05-01\nend: 2026-04-01\n")
	otherSKU := writeFile(t, dir, "other.yaml", strings.Replace(quoteContract, "sku: H100-SXM5-80GB", "sku: B200", 1))
	noHeader := writeFile(t, dir, "noheader.csv", "2026-03-01T00:00:00Z,H100-SXM5-80GB,gpu_hours,1\n")
	badQty := writeFile(t, dir, "badqty.csv", "hour,sku,meter,quantity\n2026-03-01T00:00:00Z,H100-SXM5-80GB,gpu_hours,1\n2026-03-01T01:00:00Z,H100-SXM5-80GB,gpu_hours,lots\n")
	shortRow := writeFile(t, dir, "short.csv", "hour,sku,meter,quantity\n2026-03-01T00:00:00Z,H100-SXM5-80GB\n")
	badHour := writeFile(t, dir, "badhour.csv", "hour,sku,meter,quantity\nyesterday,H100-SXM5-80GB,gpu_hours,1\n")
	unknownSKU := writeFile(t, dir, "sku.csv", "hour,sku,meter,quantity\n2026-03-01T00:00:00Z,B200,gpu_hours,1\n")
	offHour := writeFile(t, dir, "off.csv", "hour,sku,meter,quantity\n2026-03-01T00:30:00Z,H100-SXM5-80GB,gpu_hours,1\n")
	empty := writeFile(t, dir, "empty.csv", "hour,sku,meter,quantity\n")
	badJSON := writeFile(t, dir, "bad.json", `[{"hour":"2026-03-01T00:00:00Z","sku":"H100-SXM5-80GB","meter":"gpu_hours","quantity":"1","extra":1}]`)
	expJSON := writeFile(t, dir, "exp.json", `[{"hour":"2026-03-01T00:00:00Z","sku":"H100-SXM5-80GB","meter":"gpu_hours","quantity":1e3}]`)
	nullJSON := writeFile(t, dir, "null.json", `[{"hour":"2026-03-01T00:00:00Z","sku":"H100-SXM5-80GB","meter":"gpu_hours","quantity":null}]`)
	q := "H100-SXM5-80GB:gpu_hours=1"

	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no book", []string{"--quantity", q}, "--book is required"},
		{"neither usage nor quantity", []string{"--book", book}, "give either --usage FILE or --quantity"},
		{"both usage and quantity", []string{"--book", book, "--usage", empty, "--quantity", q}, "give either --usage FILE or --quantity"},
		{"a quantity without a meter", []string{"--book", book, "--quantity", "H100-SXM5-80GB=1"}, "want SKU:METER=VALUE"},
		{"a quantity without a value", []string{"--book", book, "--quantity", "H100-SXM5-80GB:gpu_hours"}, "want SKU:METER=VALUE"},
		{"a quantity of an unknown meter", []string{"--book", book, "--quantity", "H100-SXM5-80GB:gpu_minutes=1"}, `unknown meter "gpu_minutes"`},
		{"a quantity that is not a number", []string{"--book", book, "--quantity", "H100-SXM5-80GB:gpu_hours=1,5"}, "not a decimal number"},
		{"a negative quantity", []string{"--book", book, "--quantity", "H100-SXM5-80GB:gpu_hours=-1"}, "negative quantity"},
		{"a quantity finer than 18 places", []string{"--book", book, "--quantity", "H100-SXM5-80GB:gpu_hours=0.0000000000000000001"}, "more than 18 decimal places"},
		// Before the fix exponent forms were read in JSON files and flags alike.
		{"a quantity in exponent form", []string{"--book", book, "--quantity", "H100-SXM5-80GB:gpu_hours=1e3"}, "not a decimal number"},
		{"a JSON quantity in exponent form", []string{"--book", book, "--usage", expJSON}, `row 0: quantity: "1e3" is not a decimal number`},
		{"a JSON quantity of null", []string{"--book", book, "--usage", nullJSON}, "row 0: quantity: empty number"},
		{"a quantity of an unknown SKU", []string{"--book", book, "--quantity", "B200:gpu_hours=1", "--from", "2026-03-01"}, `--quantity B200:gpu_hours=1: unknown SKU "B200" (not in book quote-test; it has H100-SXM5-80GB)`},
		{"a missing book file", []string{"--book", filepath.Join(dir, "nope.yaml"), "--quantity", q}, "read book"},
		{"an invalid book names the place", []string{"--book", badBook, "--quantity", q}, `skus["H100-SXM5-80GB"].meters.gpu_hours.tiers[1].up_to: 4 is not above the previous tier's up_to 5`},
		{"contract dates out of order", []string{"--book", book, "--contract", badContract, "--quantity", q}, "end: 2026-04-01T00:00:00Z is not after start"},
		{"a contract naming a SKU the book lacks", []string{"--book", book, "--contract", otherSKU, "--quantity", q, "--from", "2026-03-01"}, `reservations[0].sku: unknown SKU "B200"`},
		{"a CSV without header", []string{"--book", book, "--usage", noHeader}, `CSV header lacks "hour"`},
		{"a CSV quantity that is not a number", []string{"--book", book, "--usage", badQty}, `line 3: quantity: "lots" is not a decimal number`},
		{"a CSV row with missing fields", []string{"--book", book, "--usage", shortRow}, "line 2: 2 fields, the header has 4"},
		{"a CSV hour that is not a time", []string{"--book", book, "--usage", badHour}, `line 2: hour: "yesterday" is not a time`},
		{"a usage row of an unknown SKU", []string{"--book", book, "--usage", unknownSKU}, `sku.csv: line 2: sku: unknown SKU "B200"`},
		{"a usage row not on the hour", []string{"--book", book, "--usage", offHour}, "off.csv: line 2: hour: 2026-03-01T00:30:00Z is not the start of an hour"},
		{"an empty usage file without a period", []string{"--book", book, "--usage", empty}, "has no rows: give --from and --to"},
		{"a JSON usage file with unknown fields", []string{"--book", book, "--usage", badJSON}, `unknown field "extra"`},
		{"a usage file that does not exist", []string{"--book", book, "--usage", filepath.Join(dir, "nope.csv")}, "no such file"},
		{"--to without --from", []string{"--book", book, "--quantity", q, "--to", "2026-04-01"}, "--to needs --from"},
		{"--to before --from", []string{"--book", book, "--quantity", q, "--from", "2026-04-01", "--to", "2026-03-01"}, "is not after --from"},
		{"--from that is not a time", []string{"--book", book, "--quantity", q, "--from", "March"}, `--from: "March" is not a time`},
		{"a period without a whole hour", []string{"--book", book, "--quantity", q, "--from", "2026-03-01T00:10:00Z", "--to", "2026-03-01T00:50:00Z"}, "no whole hour"},
		{"a quantity over a period of centuries", []string{"--book", book, "--quantity", q, "--from", "2000-01-01", "--to", "2400-01-01"}, "quote at most two years"},
		{"an unknown flag", []string{"--book", book, "--quantity", q, "--price", "1"}, "unknown flag: --price"},
		{"a stray argument", []string{"--book", book, "--quantity", q, "extra"}, `unexpected argument "extra"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(tc.args...)
			if code != 2 {
				t.Errorf("exit %d, want 2 (bad input); stderr: %s", code, stderr)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("stderr lacks %q:\n%s", tc.want, stderr)
			}
			if stdout != "" {
				t.Errorf("wrote to stdout on error: %s", stdout)
			}
		})
	}
}

func TestQuoteHelp(t *testing.T) {
	code, stdout, stderr := runCLI("--help")
	if code != 0 || !strings.Contains(stdout, "gpumeter quote --book FILE") {
		t.Errorf("exit %d, stdout: %s, stderr: %s", code, stdout, stderr)
	}
}

func TestQuoteDefaultPeriod(t *testing.T) {
	now := time.Date(2026, 7, 19, 15, 4, 5, 0, time.UTC)
	cases := []struct {
		name     string
		args     quoteArgs
		from, to string
	}{
		{"--quantity alone prices the current UTC month", quoteArgs{quantities: []string{"x"}}, "2026-07-01T00:00:00Z", "2026-08-01T00:00:00Z"},
		{"--from alone prices one month from it", quoteArgs{from: "2026-02-15"}, "2026-02-15T00:00:00Z", "2026-03-15T00:00:00Z"},
		{"--from and --to are taken as given", quoteArgs{from: "2026-02-15T06:00:00+02:00", to: "2026-02-16"}, "2026-02-15T06:00:00+02:00", "2026-02-16T00:00:00Z"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			from, to, err := tc.args.period(nil, now)
			if err != nil {
				t.Fatal(err)
			}
			if from.Format(time.RFC3339) != tc.from || to.Format(time.RFC3339) != tc.to {
				t.Errorf("period %s to %s, want %s to %s", from.Format(time.RFC3339), to.Format(time.RFC3339), tc.from, tc.to)
			}
		})
	}
}

// A problem repeated on many rows is reported once, with where it occurs;
// before the fix a file stopped at its first bad line, and a problem the
// engine found was repeated once per row (720 times for one --quantity).
func TestQuoteReportsARepeatedProblemOnce(t *testing.T) {
	dir := t.TempDir()
	book := writeFile(t, dir, "book.yaml", quoteBook)
	csvRows := func(n int, row func(h int) string) string {
		s := "hour,sku,meter,quantity\n"
		for h := range n {
			s += row(h) + "\n"
		}
		return s
	}
	hour := func(h int) string { return time.Date(2026, 3, 1, h, 0, 0, 0, time.UTC).Format(time.RFC3339) }
	badMeter := writeFile(t, dir, "meter.csv", csvRows(25, func(h int) string { return hour(h) + ",H100-SXM5-80GB,gpu_hourz,1" }))
	badSKU := writeFile(t, dir, "sku.csv", csvRows(25, func(h int) string { return hour(h) + ",B200,gpu_hours,1" }))
	two := writeFile(t, dir, "two.csv", csvRows(4, func(h int) string {
		if h%2 == 0 {
			return hour(h) + ",H100-SXM5-80GB,gpu_hourz,1"
		}
		return hour(h) + ",H100-SXM5-80GB,gpu_hours,-1"
	}))
	outside := writeFile(t, dir, "outside.csv", csvRows(100, func(h int) string { return hour(h) + ",H100-SXM5-80GB,gpu_hours,1" }))
	jsonRows := writeFile(t, dir, "rows.json", `[{"hour":"2026-03-01T00:00:00Z","sku":"B200","meter":"gpu_hours","quantity":1},`+
		`{"hour":"2026-03-01T01:00:00Z","sku":"B200","meter":"gpu_hours","quantity":1}]`)

	cases := []struct {
		name  string
		args  []string
		want  []string
		count string // appears exactly once
	}{
		{"a bad meter on every line of a file",
			[]string{"--usage", badMeter}, []string{`meter.csv: lines 2, 3, 4 and 22 more: unknown meter "gpu_hourz"`}, "unknown meter"},
		{"an unknown SKU on every line of a file",
			[]string{"--usage", badSKU}, []string{`sku.csv: lines 2, 3, 4 and 22 more: sku: unknown SKU "B200" (not in book quote-test)`}, "unknown SKU"},
		{"two problems, each on two lines",
			[]string{"--usage", two}, []string{`lines 2 and 4: unknown meter "gpu_hourz"`, `lines 3 and 5: quantity: negative quantity -1`}, "unknown meter"},
		{"an unknown SKU on every row of a JSON file",
			[]string{"--usage", jsonRows}, []string{`rows.json: rows 0 and 1: sku: unknown SKU "B200"`}, "unknown SKU"},
		{"a quantity of an unknown SKU, spread over 744 hours",
			[]string{"--quantity", "B200:gpu_hours=1", "--from", "2026-03-01"}, []string{`--quantity B200:gpu_hours=1: unknown SKU "B200"`}, "unknown SKU"},
		{"many different problems are cut short",
			[]string{"--usage", outside, "--from", "2026-03-02", "--to", "2026-03-03"}, []string{"outside.csv: line 2: hour: 2026-03-01T00:00:00Z is outside the period", "more problems"}, "line 2:"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(append([]string{"--book", book}, tc.args...)...)
			if code != 2 {
				t.Errorf("exit %d, want 2; stderr: %s", code, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			if n := strings.Count(stderr, tc.count); n != 1 {
				t.Errorf("%q appears %d times, want once:\n%s", tc.count, n, stderr)
			}
			if len(stderr) > 2000 {
				t.Errorf("%d bytes of errors", len(stderr))
			}
		})
	}
}

func TestQuoteSaysWhichMonthItPriced(t *testing.T) {
	before := time.Now().UTC().Format("2006-01")
	code, stdout, stderr := runCLI("--book", exampleBook, "--quantity", "H100-SXM5-80GB:gpu_hours=10", "--json")
	after := time.Now().UTC().Format("2006-01")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	note := func(m string) string { return "priced " + m + " (the current UTC month; pass --from to choose)" }
	// Before the fix nothing said which month a bare --quantity priced.
	if !strings.Contains(stderr, note(before)) && !strings.Contains(stderr, note(after)) {
		t.Errorf("stderr does not say which month was priced: %q", stderr)
	}
	var r quoteJSON
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Errorf("the note got into the JSON: %v\n%s", err, stdout)
	}

	for _, args := range [][]string{
		{"--quantity", "H100-SXM5-80GB:gpu_hours=10", "--from", "2026-03-01"},
		{"--usage", writeFile(t, t.TempDir(), "u.csv", "hour,sku,meter,quantity\n2026-03-01T00:00:00Z,H100-SXM5-80GB,gpu_hours,1\n")},
	} {
		if code, _, stderr := runCLI(append([]string{"--book", exampleBook}, args...)...); code != 0 || strings.Contains(stderr, "priced") {
			t.Errorf("%v: exit %d, stderr %q; want no note when the period was not guessed", args, code, stderr)
		}
	}
}
