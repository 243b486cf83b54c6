package partition

import (
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/gpucatalog"
)

// checkValidation fails t unless err is what a Validate test case wants:
// nil for "", else a validation error saying want.
func checkValidation(t *testing.T, err error, want string) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatalf("Validate: %v", err)
		}
		return
	}
	if !fault.IsValidation(err) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Validate error %v, want a validation error saying %q", err, want)
	}
}

// decodeAndValidate decodes the YAML doc into v as ReadFile does, unknown
// keys refused, and then validates it.
func decodeAndValidate(doc string, v interface{ Validate() error }) error {
	dec := yaml.NewDecoder(strings.NewReader(doc))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		return err
	}
	return v.Validate()
}

// Counts are bounded per demand line and in total, so that no sum of the
// planner can wrap and no count asks it for unbounded work.
func TestDemandValidateBoundsCounts(t *testing.T) {
	line := func(n int) Request { return Request{Profile: "1g.10gb", Count: n} }
	lines := func(k, n int) []Request {
		out := make([]Request, k)
		for i := range out {
			out[i] = line(n)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		reqs []Request
		want string // "" = valid
	}{
		{"one instance", []Request{line(1)}, ""},
		{"the largest count a line may ask", []Request{line(1_000_000)}, ""},
		{"one more than the largest", []Request{line(1_000_001)}, "reserved[0]: count 1000001 exceeds the limit of 1000000 per line"},
		{"ten million", []Request{line(10_000_000)}, "count 10000000 exceeds the limit of 1000000 per line"},
		{"2^63-1", []Request{line(1<<63 - 1)}, "count 9223372036854775807 exceeds the limit"},
		{"two lines of 2^62, whose sum wraps", []Request{line(1 << 62), line(1 << 62)}, "reserved[1]: count 4611686018427387904 exceeds the limit"},
		{"a thousand full lines", lines(1000, 1_000_000), ""},
		{"more than the total limit", lines(1001, 1_000_000), "demand asks for more than 1000000000 instances in all"},
		{"zero", []Request{line(0)}, "count 0 is not positive"},
		{"negative", []Request{line(-1 << 63)}, "count -9223372036854775808 is not positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Demand{Tenants: []TenantDemand{{Tenant: "a", Reserved: tc.reqs}}}.Validate()
			checkValidation(t, err, tc.want)
		})
	}
}

// YAML decoders turn a float into an int by truncation (count: 1.5 became
// 1); a count that is not an integer literal is refused by Validate with its
// field path and the text as written.
func TestDemandRefusesCountsThatAreNotIntegers(t *testing.T) {
	for _, tc := range []struct {
		count string
		want  string // "" = valid
		n     int
	}{
		{"3", "", 3},
		{"+3", "", 3},
		{"1_000", "", 1000},
		{"0x10", "", 16},
		{"1.5", "tenants[0] (a): pending[1]: count 1.5 is not an integer", 0},
		{"2.0", "count 2.0 is not an integer", 0},
		{"1e3", "count 1e3 is not an integer", 0},
		{"-.inf", "count -.inf is not an integer", 0},
	} {
		t.Run(tc.count, func(t *testing.T) {
			doc := "tenants:\n  - tenant: a\n    pending:\n      - {profile: 3g.40gb, count: 1}\n" +
				"      - {model: H100-SXM5-80GB, profile: 1g.10gb, count: " + tc.count + "}\n"
			var d Demand
			err := decodeAndValidate(doc, &d)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("count %s: %v", tc.count, err)
				}
				if got := d.Tenants[0].Pending[1].Count; got != tc.n {
					t.Fatalf("count %s decoded as %d, want %d", tc.count, got, tc.n)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("count %s: error %v, want %q", tc.count, err, tc.want)
			}
		})
	}
	// The strict decoding of the rest of the line is unchanged.
	if err := decodeAndValidate("tenants:\n  - {tenant: a, pending: [{profile: 3g.40gb, cuont: 1}]}\n", &Demand{}); err == nil || !strings.Contains(err.Error(), "field cuont not found") {
		t.Errorf("misspelt key: %v", err)
	}
}

func TestFleetValidateRefusesRepeatedIndexesAndMIGUUIDs(t *testing.T) {
	h100 := gpucatalog.H100SXM5_80GB
	mig := func(uuid string, start int) Instance {
		return Instance{Profile: "1g.10gb", Start: ptr(start), UUID: uuid}
	}
	for _, tc := range []struct {
		name string
		gpus []GPU
		want string // "" = valid
	}{
		{"same index on two hosts", []GPU{
			{Host: "n1", UUID: "GPU-1", Model: h100, Index: ptr(0)},
			{Host: "n2", UUID: "GPU-2", Model: h100, Index: ptr(0)},
		}, ""},
		{"same index twice on one host", []GPU{
			{Host: "n1", UUID: "GPU-1", Model: h100, Index: ptr(0)},
			{Host: "n1", UUID: "GPU-2", Model: h100, Index: ptr(1)},
			{Host: "n1", UUID: "GPU-3", Model: h100, Index: ptr(0)},
		}, `gpus[2] (GPU-3): index 0 on host "n1" repeats gpus[0]`},
		{"GPUs without an index", []GPU{
			{Host: "n1", UUID: "GPU-1", Model: h100},
			{Host: "n1", UUID: "GPU-2", Model: h100},
		}, ""},
		{"MIG UUID twice on one GPU", []GPU{
			{Host: "n1", UUID: "GPU-1", Model: h100, Instances: []Instance{mig("MIG-1", 0), mig("MIG-1", 1)}},
		}, "gpus[0] (GPU-1): instances[1]: uuid MIG-1 repeats gpus[0] instances[0]"},
		{"MIG UUID on two GPUs", []GPU{
			{Host: "n1", UUID: "GPU-1", Model: h100, Instances: []Instance{mig("MIG-1", 0)}},
			{Host: "n2", UUID: "GPU-2", Model: h100, Instances: []Instance{mig("MIG-2", 0), mig("MIG-1", 1)}},
		}, "gpus[1] (GPU-2): instances[1]: uuid MIG-1 repeats gpus[0] instances[0]"},
		{"instances without a UUID", []GPU{
			{Host: "n1", UUID: "GPU-1", Model: h100, Instances: []Instance{mig("", 0), mig("", 1)}},
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Fleet{GPUs: tc.gpus}.Validate()
			checkValidation(t, err, tc.want)
		})
	}
}

// A GPU index or an instance start written as 1.5 is refused, not
// truncated to 1 (issue 9, defect 8, fleet side).
func TestFleetIndexAndStartMustBeIntegers(t *testing.T) {
	for _, tc := range []struct {
		index, start, want string // want "" = valid
	}{
		{"0", "0", ""},
		{"0x1", "4", ""},
		{"1.5", "0", "gpus[0] (GPU-a): index 1.5 is not an integer"},
		{"0", "2.0", "gpus[0] (GPU-a): instances[0]: start 2.0 is not an integer"},
		{"1e0", "0", "index 1e0 is not an integer"},
	} {
		t.Run(tc.index+"/"+tc.start, func(t *testing.T) {
			doc := "gpus:\n  - host: h\n    uuid: GPU-a\n    model: H100-SXM5-80GB\n    index: " + tc.index +
				"\n    instances:\n      - {profile: 3g.40gb, start: " + tc.start + "}\n"
			err := decodeAndValidate(doc, &Fleet{})
			if tc.want == "" {
				if err != nil {
					t.Fatalf("%v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}
