package quota

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"
)

// A model rule counts every spelling of its model; a model the evaluator
// does not know is refused, never admitted free of the model rules.
func TestModelRulesMatchCanonically(t *testing.T) {
	c := &clock{time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)}
	cfg := testConfig(
		Rule{Tenant: "acme", GPUModel: h100, ConcurrentGPUs: limit("4", "", "")},
		Rule{Tenant: "acme", GPUModel: "l40s", ConcurrentGPUs: limit("2", "", "")}, // outside the catalogue
	)
	fleet := snapshot(c.t, TenantState{Tenant: "acme", Concurrent: map[string]decimal.Decimal{
		"Tesla-T4": d("1"), "h100-sxm5-80gb": d("1")}}) // usage under another spelling counts too
	cases := []struct {
		name, model string
		count       int
		allowed     bool
		invalid     string // part of the error, when refused as invalid
	}{
		{"catalogue key in lower case", "h100-sxm5-80gb", 5, false, ""},
		{"NVML device name", "NVIDIA H100 80GB HBM3", 5, false, ""},
		{"GPU feature discovery label", "NVIDIA-H100-80GB-HBM3", 4, false, ""}, // 1 in use
		{"fits under the rule", "H100-SXM5-80GB", 3, true, ""},
		{"rule model outside the catalogue, other case", "L40S", 3, false, ""},
		{"fleet model outside the catalogue, no model rule", "tesla-t4", 5, true, ""},
		{"unknown string", "foo", 5, false, "unknown GPU model"},
		{"unknown board", "H100", 5, false, "the catalogue's: A100-SXM4-40GB, A100-SXM4-80GB, H100-SXM5-80GB, H200-SXM5-141GB; or a model a quota rule names"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEval(t, cfg, c)
			e.Update(fleet)
			e.Update(fleet) // the fleet's models stay known from one snapshot to the next
			dec, err := e.Admit(Request{Tenant: "acme", GPUModel: tc.model, Count: tc.count, Duration: time.Hour})
			if tc.invalid != "" {
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.invalid) {
					t.Fatalf("%s: %+v, %v; want ErrInvalid with %q", tc.model, dec, err, tc.invalid)
				}
				return
			}
			if err != nil || dec.Allowed != tc.allowed {
				t.Fatalf("%s x %d: %+v, %v; want allowed=%v", tc.model, tc.count, dec, err, tc.allowed)
			}
			if !tc.allowed && !strings.Contains(dec.Reason, "over the hard limit") {
				t.Fatalf("%s x %d: reason %q", tc.model, tc.count, dec.Reason)
			}
		})
	}
	// What is admitted under any spelling shows against the rule.
	e := newEval(t, cfg, c)
	e.Update(fleet)
	if dec, err := e.Admit(Request{Tenant: "acme", GPUModel: "nvidia h100 80gb hbm3", Profile: "3g.40gb", Count: 7, Duration: time.Hour}); err != nil || !dec.Allowed {
		t.Fatalf("7 x 3g.40gb: %+v, %v", dec, err)
	}
	st, _ := e.State()
	if st[0].GPUModel != h100 || !st[0].Used.Equal(d("1")) || !st[0].Admitted.Equal(d("3")) {
		t.Fatalf("H100 rule state: %+v", st[0])
	}
}

func TestConfigValidateOneModelTwoSpellings(t *testing.T) {
	cfg := testConfig(Rule{Tenant: "a", GPUModel: h100, GPUHours: limit("1", "", "")},
		Rule{Tenant: "a", GPUModel: "nvidia h100 80gb hbm3", ConcurrentGPUs: limit("1", "", "")})
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "also has rules[0]") {
		t.Fatalf("two spellings of H100-SXM5-80GB: %v", err)
	}
}
