package chargeback

import (
	"encoding/csv"
	"errors"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shopspring/decimal"
)

// CarbonDisplayPlaces is how many decimal places of kgCO2e reports show;
// Report keeps QuantityPlaces.
const CarbonDisplayPlaces = 3

// CarbonSource gives the carbon intensity of the energy used, in grams of
// CO2e per kWh: either fixed per site (Sites, with Default for sites not
// listed and rows without a site) or per UTC hour from a series (Hours, for
// every site). Set one kind, not both. Energy with no intensity (a site not
// listed and no Default, an hour missing from the series) is left out of
// kgCO2e and reported as such, never counted as zero carbon.
type CarbonSource struct {
	Sites   map[string]decimal.Decimal `json:"sites,omitempty"`
	Default *decimal.Decimal           `json:"default,omitempty"`
	// Hours is looked up by Row.Hour, so with Hours set every row must cover
	// one hour.
	Hours []HourIntensity `json:"hours,omitempty"`
}

// HourIntensity is the intensity over [Hour, Hour+1h); Hour is the start of
// an hour.
type HourIntensity struct {
	Hour        time.Time       `json:"hour"`
	GramsPerKWh decimal.Decimal `json:"g_co2e_per_kwh"`
}

func (c *CarbonSource) validate(ps *problems, at string) {
	fixed := len(c.Sites) > 0 || c.Default != nil
	switch {
	case fixed && len(c.Hours) > 0:
		ps.add(at, "set fixed intensities (sites, default) or hours, not both")
	case !fixed && len(c.Hours) == 0:
		ps.add(at, "no intensities: set sites and default, or hours, or leave carbon out")
	}
	sites := slices.Sorted(maps.Keys(c.Sites))
	for _, s := range sites {
		p := at + ".sites[" + strconv.Quote(s) + "]"
		if s == "" {
			ps.add(p, "site name required (default covers rows without a site)")
		}
		if msg := checkDecimal(c.Sites[s]); msg != "" {
			ps.add(p, "%s", msg)
		}
	}
	if c.Default != nil {
		if msg := checkDecimal(*c.Default); msg != "" {
			ps.add(at+".default", "%s", msg)
		}
	}
	seen := map[int64]int{}
	for i, h := range c.Hours {
		p := at + ".hours[" + strconv.Itoa(i) + "]"
		if msg := checkHour(h.Hour); msg != "" {
			ps.add(p+".hour", "%s", msg)
		} else if j, dup := seen[h.Hour.Unix()]; dup {
			ps.add(p+".hour", "%s also at hours[%d]", h.Hour.UTC().Format(time.RFC3339), j)
		} else {
			seen[h.Hour.Unix()] = i
		}
		if msg := checkDecimal(h.GramsPerKWh); msg != "" {
			ps.add(p+".g_co2e_per_kwh", "%s", msg)
		}
	}
}

func checkHour(h time.Time) string {
	switch {
	case h.IsZero():
		return "required"
	case !h.Equal(h.Truncate(time.Hour)):
		return h.UTC().Format(time.RFC3339Nano) + " is not the start of an hour"
	}
	return ""
}

// intensity returns the lookup of a validated source: the intensity for a
// row's site and hour, false when unknown.
func (c *CarbonSource) intensity() func(site string, hour time.Time) (decimal.Decimal, bool) {
	if len(c.Hours) > 0 {
		byHour := make(map[int64]decimal.Decimal, len(c.Hours))
		for _, h := range c.Hours {
			byHour[h.Hour.Unix()] = h.GramsPerKWh
		}
		return func(_ string, hour time.Time) (decimal.Decimal, bool) {
			g, ok := byHour[hour.Unix()]
			return g, ok
		}
	}
	return func(site string, _ time.Time) (decimal.Decimal, bool) {
		if g, ok := c.Sites[site]; ok && site != "" {
			return g, true
		}
		if c.Default != nil {
			return *c.Default, true
		}
		return decimal.Decimal{}, false
	}
}

// carbonHeader is the one header ParseCarbonCSV accepts.
var carbonHeader = []string{"hour", "g_co2e_per_kwh"}

// ParseCarbonCSV reads an hourly intensity series:
//
//	hour,g_co2e_per_kwh
//	2026-11-01T00:00:00Z,412.5
//
// Hours are RFC 3339 times on the start of an hour (any offset; kept in
// UTC), each at most once; intensities are plain non-negative decimals. It
// reports every bad line as a *pricing.ValidationError whose problems name
// the line and the field.
func ParseCarbonCSV(r io.Reader) ([]HourIntensity, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.TrimLeadingSpace = true
	var ps problems
	header, err := cr.Read()
	switch {
	case errors.Is(err, io.EOF):
		ps.addLine(1, "header", "want %q, got an empty file", strings.Join(carbonHeader, ","))
		return nil, ps.err("carbon intensity CSV")
	case err != nil:
		addCSVError(&ps, err, 1)
		return nil, ps.err("carbon intensity CSV")
	}
	if len(header) > 0 {
		header[0] = strings.TrimPrefix(header[0], "\ufeff")
	}
	if !equalFields(header, carbonHeader) {
		ps.addLine(1, "header", "want %q, got %q", strings.Join(carbonHeader, ","), strings.Join(header, ","))
		return nil, ps.err("carbon intensity CSV")
	}
	var out []HourIntensity
	seen := map[int64]int{} // hour → line
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			// A broken quote leaves the reader's position unreliable: stop here.
			addCSVError(&ps, err, 0)
			break
		}
		line, _ := cr.FieldPos(0)
		if len(rec) != len(carbonHeader) {
			ps.addLine(line, "", "want %d fields (%s), got %d", len(carbonHeader), strings.Join(carbonHeader, ","), len(rec))
			continue
		}
		h, hourOK := parseHour(&ps, line, strings.TrimSpace(rec[0]))
		if hourOK {
			if first, dup := seen[h.Unix()]; dup {
				ps.addLine(line, "hour", "%s also on line %d", h.Format(time.RFC3339), first)
				hourOK = false
			} else {
				seen[h.Unix()] = line
			}
		}
		g, gOK := parseIntensity(&ps, line, strings.TrimSpace(rec[1]))
		if hourOK && gOK {
			out = append(out, HourIntensity{Hour: h, GramsPerKWh: g})
		}
	}
	if len(ps.list) == 0 && len(out) == 0 {
		ps.addLine(2, "", "no intensities after the header")
	}
	if err := ps.err("carbon intensity CSV"); err != nil {
		return nil, err
	}
	return out, nil
}

func parseHour(ps *problems, line int, s string) (time.Time, bool) {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		ps.addLine(line, "hour", "want an RFC 3339 time such as 2026-11-01T00:00:00Z, got %q", s)
		return time.Time{}, false
	}
	if msg := checkHour(t); msg != "" {
		ps.addLine(line, "hour", "%s", msg)
		return time.Time{}, false
	}
	return t.UTC(), true
}

// parseIntensity takes plain decimals only (digits with at most one
// point): no sign, exponent or NaN.
func parseIntensity(ps *problems, line int, s string) (decimal.Decimal, bool) {
	if !plainDecimal(s) {
		ps.addLine(line, "g_co2e_per_kwh", "want a non-negative decimal such as 412.5, got %q", s)
		return decimal.Decimal{}, false
	}
	g, err := decimal.NewFromString(s)
	if err != nil {
		ps.addLine(line, "g_co2e_per_kwh", "%v", err)
		return decimal.Decimal{}, false
	}
	if msg := checkDecimal(g); msg != "" {
		ps.addLine(line, "g_co2e_per_kwh", "%s", msg)
		return decimal.Decimal{}, false
	}
	return g, true
}

func plainDecimal(s string) bool {
	digits, points := 0, 0
	for _, r := range s {
		switch {
		case r >= '0' && r <= '9':
			digits++
		case r == '.':
			points++
		default:
			return false
		}
	}
	return digits > 0 && points <= 1
}

// addCSVError reports a syntax error of encoding/csv at its line and
// column.
func addCSVError(ps *problems, err error, line int) {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		ps.addLine(pe.Line, "", "column %d: %v", pe.Column, pe.Err)
		return
	}
	ps.addLine(line, "", "%v", err)
}

func equalFields(got, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if strings.TrimSpace(got[i]) != want[i] {
			return false
		}
	}
	return true
}

// gramsMillijoulesPerKg converts Σ millijoules × gCO2e/kWh into kg: 3.6e9 mJ per kWh
// times 1000 g per kg.
var gramsMillijoulesPerKg = decimal.NewFromInt(3_600_000_000_000)

// kgCO2e is energy × intensity in kg, from Σ mJ × g/kWh.
func kgCO2e(gramMillijoules decimal.Decimal) decimal.Decimal {
	return gramMillijoules.DivRound(gramsMillijoulesPerKg, QuantityPlaces)
}
