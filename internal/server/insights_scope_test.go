package server_test

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/insights"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/server"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
)

const scopeBook = `version: scope-test
currency: {code: USD, rounding: {minor_units: 2, mode: half_away_from_zero}}
skus:
  H100-SXM5-80GB: {meters: {gpu_hours: {unit_price: "3.00"}}}
`

// scopeAPI is a fixture whose store's samples put tenants in departments
// the way attribution does, which need not be the customers' configured
// departments:
//
//	acme, globex   research rows            configured research
//	initech        ops rows                 configured ops
//	wayne          ops rows                 configured sales
//	umbrella       lab rows (GPU-umbrella-a), research rows (-b); configured research
//	hydra          lab rows (GPU-hydra-a), physics rows (-b); not configured
//
// plus idle capacity (tenant ""). The customers' departments never
// decide what a department key reads of usage rows; the rows' labels do.
func scopeAPI(t *testing.T, from, to time.Time) *fixture {
	t.Helper()
	ctx := context.Background()
	s := storetest.New(t)
	var samples []collectors.Sample
	add := func(tenant, dept, gpu string, us uint64) {
		for h := from; h.Before(to); h = h.Add(time.Hour) {
			x := collectors.Sample{Host: "host-" + gpu, GPUUUID: gpu, GPUModel: "H100-SXM5-80GB", SKU: "H100-SXM5-80GB",
				Tenant: tenant, Department: dept, Start: h, End: h.Add(time.Hour),
				Values: meter.Values{GPUMicroseconds: us, SMActiveMicroseconds: us / 10, MemPeakBytes: 8 << 30}}
			if tenant != "" {
				x.Workload = "job-" + tenant
			}
			x.ID = collectors.SampleID(x.Host, x.GPUUUID, x.Tenant, x.Workload, x.Start)
			samples = append(samples, x)
		}
	}
	add("acme", "research", "GPU-acme", 3_600_000_000)
	add("globex", "research", "GPU-globex", 1_800_000_000)
	add("initech", "ops", "GPU-initech", 900_000_000)
	add("wayne", "ops", "GPU-wayne", 1_200_000_000)
	add("umbrella", "lab", "GPU-umbrella-a", 2_400_000_000)
	add("umbrella", "research", "GPU-umbrella-b", 600_000_000)
	add("hydra", "lab", "GPU-hydra-a", 3_000_000_000)
	add("hydra", "physics", "GPU-hydra-b", 300_000_000)
	add("", "", "GPU-idle", 3_600_000_000)
	if err := s.InsertSamples(ctx, samples); err != nil {
		t.Fatal(err)
	}
	// Usage then reads the hourly rollup, insights the raw samples: both
	// carry the rows' departments.
	rollUp(t, s)
	now := time.Now()
	if err := s.InsertAnomalies(ctx, []insights.Anomaly{anomaly("acme", from), anomaly("hydra", from)}, now); err != nil {
		t.Fatal(err)
	}

	path := writeBook(t, scopeBook)
	f := &fixture{store: s, tokens: map[string]string{}, keyIDs: map[string]string{},
		customers: customersOn(path, [2]string{"acme", "research"}, [2]string{"globex", "research"}, [2]string{"initech", "ops"},
			[2]string{"wayne", "sales"}, [2]string{"umbrella", "research"}),
		chargeback: billing.ChargebackConfig{Book: path, Idle: "own_row"}}
	for name, sc := range map[string]auth.Scope{
		"admin":    {Kind: auth.KindAdmin},
		"research": {Kind: auth.KindDepartment, Name: "research"}, // configured customers, one of them with rows of another department
		"lab":      {Kind: auth.KindDepartment, Name: "lab"},      // no configured customers
		"physics":  {Kind: auth.KindDepartment, Name: "physics"},  // no configured customers; a tenant's second label
		"ops":      {Kind: auth.KindDepartment, Name: "ops"},      // rows of a tenant configured in sales
		"sales":    {Kind: auth.KindDepartment, Name: "sales"},    // a configured tenant whose rows say ops
		"acme":     {Kind: auth.KindTenant, Name: "acme"},
		"hydra":    {Kind: auth.KindTenant, Name: "hydra"},
	} {
		f.keyIDs[name], f.tokens[name] = saveKey(t, s, auth.NewKeyRequest{Scope: sc}, now.Add(-time.Minute))
	}
	f.srv, f.stop = f.serve(t, server.DefaultConfig(), time.Now)
	return f
}

func anomaly(tenant string, at time.Time) insights.Anomaly {
	return insights.Anomaly{ID: insights.AnomalyID(tenant, "gpu_hours", "", time.Hour, at), Tenant: tenant, Meter: "gpu_hours",
		Start: at, End: at.Add(time.Hour), Direction: insights.Spike, Observed: decimal.NewFromInt(9), Expected: decimal.NewFromInt(1),
		Spread: decimal.NewFromInt(1), Score: 8, History: 100}
}

// heldByTenant is GPU-microseconds per tenant, idle capacity and
// unattributed time left out (no insight reports them).
type heldByTenant map[string]int64

func (h heldByTenant) tenants() []string {
	return slices.Sorted(maps.Keys(h))
}

// TestInsightsScopeKeysAsUsageDoes: every key reads of the efficiency and
// right-sizing reports exactly the tenants, and of each tenant exactly the
// GPU time, that /v1/usage shows it for the same period and data: a
// department key the rows labelled with its department (whatever the
// tenant's other rows or configured department say), a tenant key its own
// tenant. Department reports name no other department, and their "fleet"
// is the department's. Anomalies and capacity, which carry no department,
// stay closed to department keys; a tenant key lists its own anomalies.
func TestInsightsScopeKeysAsUsageDoes(t *testing.T) {
	from := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	to := from.Add(6 * time.Hour)
	f := scopeAPI(t, from, to)
	get := func(key, path string) (int, []byte) {
		t.Helper()
		code, body, _ := f.get(t, f.tokens[key], path)
		return code, body
	}
	period := "from=" + from.Format(time.RFC3339) + "&to=" + to.Format(time.RFC3339)
	readJSON := func(key, path string, v any) {
		t.Helper()
		code, body := get(key, path)
		if code != http.StatusOK {
			t.Fatalf("%s key, %s: %d %s", key, path, code, body)
		}
		if err := json.Unmarshal(body, v); err != nil {
			t.Fatalf("%s key, %s: %v", key, path, err)
		}
	}
	usage := func(key string) heldByTenant {
		var u struct {
			Points []struct {
				Tenant   string `json:"tenant"`
				GPUHours string `json:"gpu_hours"`
			} `json:"points"`
		}
		readJSON(key, "/v1/usage?"+period+"&step=month&group_by=tenant&meters=gpu_hours", &u)
		out := heldByTenant{}
		for _, p := range u.Points {
			if p.Tenant == "" || p.Tenant == collectors.UnattributedTenant {
				continue
			}
			us := decimal.RequireFromString(p.GPUHours).Mul(decimal.NewFromInt(3_600_000_000))
			if !us.IsInteger() {
				t.Fatalf("%s key: usage of %s is %s GPU-hours, not whole microseconds", key, p.Tenant, p.GPUHours)
			}
			out[p.Tenant] += us.IntPart()
		}
		return out
	}

	for _, tc := range []struct {
		key string
		// want pins the usage each key sees, so that the comparison below
		// compares against the rule and not against an empty answer.
		want heldByTenant
		dept string // the department every row must name; "" for any
	}{
		{"admin", heldByTenant{"acme": 6 * 3_600_000_000, "globex": 6 * 1_800_000_000, "initech": 6 * 900_000_000, "wayne": 6 * 1_200_000_000,
			"umbrella": 6 * 3_000_000_000, "hydra": 6 * 3_300_000_000}, ""},
		{"research", heldByTenant{"acme": 6 * 3_600_000_000, "globex": 6 * 1_800_000_000, "umbrella": 6 * 600_000_000}, "research"},
		{"lab", heldByTenant{"umbrella": 6 * 2_400_000_000, "hydra": 6 * 3_000_000_000}, "lab"},
		{"physics", heldByTenant{"hydra": 6 * 300_000_000}, "physics"},
		{"ops", heldByTenant{"initech": 6 * 900_000_000, "wayne": 6 * 1_200_000_000}, "ops"},
		{"sales", heldByTenant{}, "sales"},
		{"acme", heldByTenant{"acme": 6 * 3_600_000_000}, ""},
		{"hydra", heldByTenant{"hydra": 6 * 3_300_000_000}, ""},
	} {
		t.Run(tc.key, func(t *testing.T) {
			u := usage(tc.key)
			if !equalHeld(u, tc.want) {
				t.Fatalf("/v1/usage for the %s key: %v, want %v", tc.key, u, tc.want)
			}

			var eff insights.EfficiencyReport
			readJSON(tc.key, "/v1/insights/efficiency?"+period, &eff)
			got, fleet := heldByTenant{}, int64(0)
			for _, r := range eff.Tenants {
				got[r.Tenant] += r.HeldGPUMicros
				fleet += r.HeldGPUMicros
				if tc.dept != "" && r.Department != tc.dept {
					t.Errorf("efficiency: tenant %s in department %q", r.Tenant, r.Department)
				}
			}
			if !equalHeld(got, u) {
				t.Errorf("efficiency: tenants %v held %v; /v1/usage: %v held %v", got.tenants(), got, u.tenants(), u)
			}
			if eff.Fleet.HeldGPUMicros != fleet {
				t.Errorf("efficiency: fleet held %d, its tenants %d", eff.Fleet.HeldGPUMicros, fleet)
			}
			for _, d := range eff.Departments {
				if tc.dept != "" && d.Department != tc.dept {
					t.Errorf("efficiency: department %q listed", d.Department)
				}
			}

			var rs insights.RightSizeReport
			readJSON(tc.key, "/v1/insights/rightsize?"+period, &rs)
			got = heldByTenant{}
			for _, r := range rs.Tenants {
				got[r.Tenant] += r.HeldGPUMicros
				if tc.dept != "" && r.Department != tc.dept {
					t.Errorf("rightsize: tenant %s in department %q", r.Tenant, r.Department)
				}
			}
			if !equalHeld(got, u) {
				t.Errorf("rightsize: tenants %v held %v; /v1/usage: %v held %v", got.tenants(), got, u.tenants(), u)
			}
			for _, d := range rs.Demand.Tenants {
				if _, ok := u[d.Tenant]; !ok {
					t.Errorf("rightsize: demand of %s, outside the key's usage", d.Tenant)
				}
			}
			if (rs.Plan != nil) != (tc.key == "admin") {
				t.Errorf("rightsize: a plan of the fleet's layout %v, want only for admin", rs.Plan != nil)
			}

			code, body := get(tc.key, "/v1/insights/anomalies?"+period)
			switch {
			case tc.dept != "":
				if code != http.StatusForbidden {
					t.Errorf("anomalies, department key: %d %s, want 403", code, body)
				}
			default:
				var an struct {
					Anomalies []insights.StoredAnomaly `json:"anomalies"`
				}
				readJSON(tc.key, "/v1/insights/anomalies?"+period, &an)
				seen := heldByTenant{}
				for _, a := range an.Anomalies {
					seen[a.Tenant]++
				}
				if strings.Join(seen.tenants(), ",") != strings.Join(anomalyTenants(tc.key), ",") {
					t.Errorf("anomalies of %v, want %v", seen.tenants(), anomalyTenants(tc.key))
				}
			}
			if code, body := get(tc.key, "/v1/insights/capacity?to="+to.Format(time.RFC3339)); (code == http.StatusForbidden) != (tc.key != "admin") {
				t.Errorf("capacity: %d %s; want 403 exactly for keys other than admin", code, body)
			}
		})
	}
}

func anomalyTenants(key string) []string {
	if key == "admin" {
		return []string{"acme", "hydra"}
	}
	return []string{key}
}

func equalHeld(a, b heldByTenant) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
