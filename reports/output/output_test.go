package output

import (
	"bytes"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/fault"
)

type item struct {
	Tenant string `json:"tenant"`
	Hours  string `json:"gpu_hours"`
	Zip    string `json:"zip,omitempty"`
}

var listing = Listing{
	Columns: []Column{{Name: "tenant"}, {Name: "gpu-hours", Number: true}, {Name: "zip", Wide: true}},
	Rows:    [][]string{{"acme", "1.500"}, {"globex-research", "12.000", "02139"}},
	Items:   []item{{"acme", "1.5", ""}, {"globex-research", "12", "02139"}},
}

func TestWriteEachFormat(t *testing.T) {
	for _, tc := range []struct {
		format Format
		want   string
	}{
		{Table, "TENANT           GPU-HOURS\nacme                 1.500\nglobex-research     12.000\n"},
		{Wide, "TENANT           GPU-HOURS  ZIP\nacme                 1.500\nglobex-research     12.000  02139\n"},
		{CSV, "tenant,gpu-hours,zip\nacme,1.500\nglobex-research,12.000,02139\n"},
		{JSON, "[\n  {\n    \"tenant\": \"acme\",\n    \"gpu_hours\": \"1.5\"\n  },\n  {\n    \"tenant\": \"globex-research\",\n    \"gpu_hours\": \"12\",\n    \"zip\": \"02139\"\n  }\n]\n"},
		// Keys in JSON's order; numbers-as-text stay text.
		{YAML, "- tenant: acme\n  gpu_hours: \"1.5\"\n- tenant: globex-research\n  gpu_hours: \"12\"\n  zip: \"02139\"\n"},
	} {
		t.Run(string(tc.format), func(t *testing.T) {
			var b bytes.Buffer
			if err := Write(&b, tc.format, listing); err != nil {
				t.Fatal(err)
			}
			if b.String() != tc.want {
				t.Errorf("got\n%s\nwant\n%s", b.String(), tc.want)
			}
		})
	}
}

func TestParse(t *testing.T) {
	for _, s := range []string{"table", "wide", "json", "yaml", "csv"} {
		if f, err := Parse(s); err != nil || string(f) != s {
			t.Errorf("Parse(%q) = %q, %v", s, f, err)
		}
	}
	if _, err := Parse("xml"); !fault.IsValidation(err) {
		t.Errorf("Parse(xml): %v, want a validation error", err)
	}
}

func TestTimeAndDecimal(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	if got := Time(time.Date(2026, 11, 30, 19, 0, 0, 0, ny)); got != "2026-11-30T19:00:00-05:00" {
		t.Errorf("Time = %q", got)
	}
	if Time(time.Time{}) != "" {
		t.Error("the zero time prints")
	}
	if got := Decimal(decimal.RequireFromString("2.0005"), 3); got != "2.001" {
		t.Errorf("Decimal = %q", got)
	}
}
