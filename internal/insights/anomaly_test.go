package insights

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // Europe/Berlin without the system's zone files

	"github.com/shopspring/decimal"
)

// hourlySeries builds weeks×168 hourly points from f(i).
func hourlySeries(tenant string, weeks int, f func(i int) decimal.Decimal) Series {
	s := Series{Tenant: tenant, Meter: "gpu_hours", Step: Hourly, From: t0, To: t0.Add(time.Duration(weeks*168) * time.Hour)}
	for i := 0; i < weeks*168; i++ {
		s.Points = append(s.Points, Point{At: t0.Add(time.Duration(i) * time.Hour), Value: f(i)})
	}
	return s
}

// weekly is a pattern per hour of week: busy working hours, quiet nights.
func weekly(i int) decimal.Decimal {
	h := i % 168
	day, hour := h/24, h%24
	v := int64(10)
	if day < 5 && hour >= 8 && hour < 18 {
		v = 40
	}
	return decimal.NewFromInt(v)
}

func TestBaselineMedianAndMAD(t *testing.T) {
	p := DefaultBaselineParams()
	// Same hour of week in 4 weeks: 10, 12, 14, 100; then the evaluated week.
	hist := []int64{10, 12, 14, 100}
	s := hourlySeries("a", 5, func(i int) decimal.Decimal {
		if i%168 == 0 && i/168 < 4 {
			return decimal.NewFromInt(hist[i/168])
		}
		return decimal.NewFromInt(20)
	})
	es, err := Baseline(s, p)
	if err != nil {
		t.Fatal(err)
	}
	e := es[4*168]
	// median 13; deviations 3, 1, 1, 87 → MAD 2 → spread 2.9652.
	if !e.OK || !e.Expected.Equal(dec("13")) || !e.Spread.Equal(dec("2.9652")) || e.History != 4 {
		t.Errorf("baseline %+v, want 13 ± 2.9652 from 4", e)
	}
	// A flat history: spread floored at 10 % of 20 = 2.
	if f := es[4*168+1]; !f.Spread.Equal(dec("2")) || !f.Expected.Equal(dec("20")) {
		t.Errorf("flat baseline %+v, want 20 ± 2", f)
	}
	// Week 2 has only 2 earlier weeks: below MinHistory 3.
	if g := es[2*168]; g.OK || g.History != 2 {
		t.Errorf("week 2 baseline %+v, want none from 2", g)
	}
}

func TestDetectThresholds(t *testing.T) {
	at := 4*168 + 10 // Monday 10:00 of week 5; history 40 ± 4 (10 %)
	cases := []struct {
		name   string
		value  string
		params func(*AnomalyParams)
		want   Direction // "" for none
	}{
		{"exactly threshold × spread above is a spike", "60", nil, Spike},
		{"just under it is not", "59.999", nil, ""},
		{"exactly threshold × spread below is a drop", "20", nil, Drop},
		{"drops ignored when asked", "0", func(p *AnomalyParams) { p.IgnoreDrops = true }, ""},
		{"a higher threshold lets 60 pass", "60", func(p *AnomalyParams) { p.Threshold = dec("6") }, ""},
		{"too little history: no verdict", "1000", func(p *AnomalyParams) { p.Baseline.Weeks, p.Baseline.MinHistory = 5, 5 }, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := hourlySeries("acme", 5, func(i int) decimal.Decimal {
				if i == at {
					return dec(tc.value)
				}
				return weekly(i)
			})
			p := DefaultAnomalyParams()
			if tc.params != nil {
				tc.params(&p)
			}
			got, err := Detect(AnomalyInput{Series: []Series{s}, EvaluateFrom: t0.Add(4 * 168 * time.Hour), Params: p})
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" {
				if len(got) != 0 {
					t.Fatalf("anomalies %+v, want none", got)
				}
				return
			}
			if len(got) != 1 || got[0].Direction != tc.want || !got[0].Start.Equal(t0.Add(time.Duration(at)*time.Hour)) {
				t.Fatalf("anomalies %+v, want one %s at step %d", got, tc.want, at)
			}
			if !got[0].Expected.Equal(dec("40")) || !got[0].Spread.Equal(dec("4")) {
				t.Errorf("baseline %s ± %s, want 40 ± 4", got[0].Expected, got[0].Spread)
			}
		})
	}
}

func TestDetectFlatZeroHistoryUsesMinSpread(t *testing.T) {
	for _, tc := range []struct {
		value string
		n     int
	}{{"4.99", 0}, {"5", 1}} {
		s := hourlySeries("quiet", 5, func(i int) decimal.Decimal {
			if i == 4*168+3 {
				return dec(tc.value)
			}
			return decimal.Zero
		})
		got, err := Detect(AnomalyInput{Series: []Series{s}, EvaluateFrom: t0.Add(4 * 168 * time.Hour), Params: DefaultAnomalyParams()})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != tc.n {
			t.Errorf("0 → %s: %d anomalies, want %d", tc.value, len(got), tc.n)
		}
	}
}

func TestDetectNoiseAndPlantedSpike(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	spikeAt := 5*168 + 30
	noisy := func(spike int) func(i int) decimal.Decimal {
		return func(i int) decimal.Decimal {
			// ±8 % uniform noise on the weekly pattern.
			base, _ := weekly(i).Float64()
			v := base * (1 + (r.Float64()*2-1)*0.08)
			if i == spike {
				v = base * 3
			}
			return decimal.NewFromFloat(v).Round(3)
		}
	}
	s := hourlySeries("acme", 6, noisy(spikeAt))
	quiet := hourlySeries("globex", 6, noisy(-1))
	got, err := Detect(AnomalyInput{Series: []Series{s, quiet}, EvaluateFrom: t0.Add(4 * 168 * time.Hour), Params: DefaultAnomalyParams()})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Tenant != "acme" || !got[0].Start.Equal(t0.Add(time.Duration(spikeAt)*time.Hour)) || got[0].Direction != Spike {
		t.Fatalf("anomalies %+v, want only acme's spike at step %d", got, spikeAt)
	}
}

func TestAnomalyIDIsDeterministic(t *testing.T) {
	id := AnomalyID("acme", "gpu_hours", "", Hourly, t0)
	if id != AnomalyID("acme", "gpu_hours", "", Hourly, t0.In(time.FixedZone("x", 3600))) {
		t.Error("same instant in another zone gives another id")
	}
	if len(id) != 32 {
		t.Errorf("id %q is not 32 hex digits", id)
	}
	others := []string{
		AnomalyID("acme2", "gpu_hours", "", Hourly, t0),
		AnomalyID("acme", "spend", "", Hourly, t0),
		AnomalyID("acme", "gpu_hours", "x", Hourly, t0),
		AnomalyID("acme", "gpu_hours", "", Daily, t0),
		AnomalyID("acme", "gpu_hours", "", Hourly, t0.Add(time.Hour)),
		AnomalyID("acm", "egpu_hours", "", Hourly, t0), // no ambiguity at the joins
	}
	for i, o := range others {
		if o == id {
			t.Errorf("variant %d has the same id", i)
		}
	}
	// Detection run twice (with different surrounding data) names the same step the same.
	mk := func(bg int64) Series {
		return hourlySeries("acme", 5, func(i int) decimal.Decimal {
			if i == 4*168 {
				return decimal.NewFromInt(1000)
			}
			return decimal.NewFromInt(bg)
		})
	}
	a, _ := Detect(AnomalyInput{Series: []Series{mk(10)}, EvaluateFrom: t0.Add(4 * 168 * time.Hour), Params: DefaultAnomalyParams()})
	b, _ := Detect(AnomalyInput{Series: []Series{mk(12)}, EvaluateFrom: t0.Add(4 * 168 * time.Hour), Params: DefaultAnomalyParams()})
	if len(a) != 1 || len(b) != 1 || a[0].ID != b[0].ID {
		t.Errorf("ids differ across runs: %v %v", a, b)
	}
}

func TestDailySpendAcrossClockChange(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	from := time.Date(2026, 9, 14, 0, 0, 0, 0, berlin) // Monday; DST ends 25 Oct
	s := Series{Tenant: "acme", Meter: "spend", Step: Daily, From: from, To: from.AddDate(0, 0, 7*7)}
	for i := 0; i < 49; i++ {
		v := dec("100")
		if wd := from.AddDate(0, 0, i).Weekday(); wd == time.Saturday || wd == time.Sunday {
			v = dec("20")
		}
		if i == 45 { // Thursday 29 October, after the change
			v = dec("400.50")
		}
		s.Points = append(s.Points, Point{At: from.AddDate(0, 0, i), Value: v})
	}
	got, err := Detect(AnomalyInput{Series: []Series{s}, EvaluateFrom: from.AddDate(0, 0, 28), Params: DefaultAnomalyParams()})
	if err != nil {
		t.Fatal(err)
	}
	want := time.Date(2026, 10, 29, 0, 0, 0, 0, berlin)
	if len(got) != 1 || !got[0].Start.Equal(want) || !got[0].Expected.Equal(dec("100")) || !got[0].End.Equal(want.AddDate(0, 0, 1)) {
		t.Fatalf("anomalies %+v, want one on %s", got, want)
	}
}

func TestSeriesValidate(t *testing.T) {
	cases := []struct {
		name string
		s    Series
		want []string
	}{
		{"bad step", Series{Meter: "m", Step: time.Minute, From: t0, To: t0.Add(time.Hour)}, []string{"neither 1h nor 24h"}},
		{"empty range", Series{Meter: "", Step: Hourly, From: t0, To: t0}, []string{"meter is empty", "from must be before to"}},
		{"misaligned", Series{Meter: "m", Step: Hourly, From: t0.Add(time.Minute), To: t0.Add(2 * time.Hour)}, []string{"not the start of a step"}},
		{"points", Series{Meter: "m", Step: Hourly, From: t0, To: t0.Add(3 * time.Hour), Points: []Point{
			{At: t0.Add(time.Minute), Value: dec("1")},
			{At: t0.Add(5 * time.Hour), Value: dec("1")},
			{At: t0, Value: dec("1")},
			{At: t0, Value: dec("-1")},
		}}, []string{"not on the step grid", "outside [from, to)", "repeats points[2]", "negative value"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.s.Validate()
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q: %v", w, err)
				}
			}
		})
	}
	_, err := Detect(AnomalyInput{Params: AnomalyParams{Threshold: dec("0")}})
	for _, w := range []string{"evaluate from", "threshold", "weeks 0", "min spread"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("detect error lacks %q: %v", w, err)
		}
	}
}
