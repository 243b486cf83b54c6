package attribution

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/gpumeter/gpumeter/collectors"
)

func TestLoadMapping(t *testing.T) {
	m, err := LoadMapping("testdata/tenants.map")
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Devices["GPU-5d7e9c1e-0f0a-4a52-9d2c-7b1f7f6b1a01"]; got != (Tenant{Name: "acme", Department: "research"}) {
		t.Errorf("device: %+v", got)
	}
	if got := m.Devices["MIG-2c3d4e5f-6a7b-4c8d-9e0f-1a2b3c4d5e6f"]; got != (Tenant{Name: "globex"}) {
		t.Errorf("mig device: %+v", got)
	}
	if got := m.Namespaces["ml-platform"]; got != (Tenant{Name: "globex", Department: "platform"}) {
		t.Errorf("namespace: %+v", got)
	}
	if got := m.Accounts["physics"]; got != (Tenant{Name: "uni", Department: "physics-dept"}) {
		t.Errorf("account: %+v", got)
	}
	if got := m.VMs["vm-acme-01"]; got != (Tenant{Name: "acme", Department: "research"}) {
		t.Errorf("vm: %+v", got)
	}
	if got := m.VMs["0000:07:00.0"]; got != (Tenant{Name: "globex"}) {
		t.Errorf("vm by PCI address: %+v (keys %v)", got, m.VMs)
	}
	if _, err := LoadMapping("testdata/missing.map"); err == nil {
		t.Error("missing file accepted")
	}
}

func TestParseMappingRejects(t *testing.T) {
	cases := []struct {
		name, input string
		want        []string
	}{
		{"unknown kind", "pool gpu-a acme\n", []string{"line 1: unknown kind \"pool\""}},
		{"label without =", "label team acme\n", []string{"line 1: label \"team\": want key=value"}},
		{"label with empty key", "label =a acme\n", []string{"want key=value"}},
		{"a label mapped twice", "label team=a t1\nlabel team=a t2\n", []string{"line 2: label \"team=a\" mapped twice"}},
		{"too few fields", "device GPU-1\n", []string{"line 1: want <kind> <key> <tenant> [department], got 2 fields"}},
		{"too many fields", "device GPU-1 acme dept extra\n", []string{"got 5 fields"}},
		{"a key mapped twice", "namespace a t1\nnamespace a t2\n", []string{"line 2: namespace \"a\" mapped twice"}},
		{"the reserved tenant", "account x (unattributed)\n", []string{"line 1: tenant \"(unattributed)\" is reserved"}},
		{"every problem at once", "\n# ok\nbogus a b\ndevice GPU-1\n", []string{"line 3:", "line 4:"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseMapping(strings.NewReader(tc.input))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestMappingValidate(t *testing.T) {
	bad := Mapping{
		Devices:    map[string]Tenant{"GPU-1": {}},
		Namespaces: map[string]Tenant{"ns": {Name: collectors.UnattributedTenant}},
		Accounts:   map[string]Tenant{"a": {Name: "two words"}},
	}
	err := bad.Validate()
	for _, want := range []string{"device \"GPU-1\"", "reserved", "blanks"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err %v lacks %q", err, want)
		}
	}
	if err := (Mapping{}).Validate(); err != nil {
		t.Errorf("empty mapping: %v", err)
	}
}

func FuzzParseMapping(f *testing.F) {
	f.Add("device GPU-1 acme research\nnamespace ns acme\n")
	f.Add("# comment only\n\n")
	f.Add("account a b c d e\n")
	f.Add("vm 00000000:07:00.0 acme\nvm 5D6C2A4E-1111-4222-8333-944455556666 globex ops\nvm 0000:07:20.0 x\n")
	f.Fuzz(func(t *testing.T, input string) {
		m, err := ParseMapping(strings.NewReader(input))
		if err != nil {
			return
		}
		for k := range m.VMs {
			if VMKey(k) != k {
				t.Fatalf("vm key %q not canonical", k)
			}
		}
		for _, table := range []map[string]Tenant{m.Devices, m.Namespaces, m.Accounts, m.VMs} {
			for k, v := range table {
				if k == "" || v.Name == "" || strings.ContainsAny(k+v.Name+v.Department, " \t\n#") {
					t.Fatalf("bad entry %q → %+v", k, v)
				}
			}
		}
	})
}

func TestTenancy(t *testing.T) {
	ty := Tenancy{Mapping: Mapping{Namespaces: map[string]Tenant{"a": {Name: "alpha"}}, Accounts: map[string]Tenant{"x": {Name: "xeno"}}}}
	if got, ok := ty.Namespace("a"); !ok || got.Name != "alpha" {
		t.Errorf("mapped namespace: %+v %v", got, ok)
	}
	if _, ok := ty.Namespace("b"); ok {
		t.Error("unmapped namespace resolved without NamespaceIsTenant")
	}
	ty.NamespaceIsTenant, ty.AccountIsTenant = true, true
	if got, ok := ty.Namespace("b"); !ok || got.Name != "b" {
		t.Errorf("unmapped namespace with NamespaceIsTenant: %+v", got)
	}
	if got, ok := ty.Account("y"); !ok || got.Name != "y" {
		t.Errorf("unmapped account with AccountIsTenant: %+v", got)
	}
	if _, ok := ty.Account(""); ok {
		t.Error("empty account resolved")
	}
}

func TestStaticAttribution(t *testing.T) {
	m := Mapping{Devices: map[string]Tenant{
		"GPU-rented": {Name: "acme", Department: "research"},
		"MIG-1":      {Name: "globex"},
		"GPU-mig":    {Name: "initech"},
	}}
	kubelet := collectors.Owner{Tenant: "kube", Workload: "ns/pod"}
	gpus := []collectors.GPUReading{
		{GPU: collectors.GPU{UUID: "GPU-rented"}, Processes: []collectors.Process{{PID: 1}, {PID: 2, Owner: collectors.Owner{Workload: "slurm/9"}}}},
		{GPU: collectors.GPU{UUID: "GPU-claimed"}, Claims: []collectors.Owner{kubelet}},
		{GPU: collectors.GPU{UUID: "GPU-mig"}, MIG: true,
			Instances: []collectors.MIGInstance{{UUID: "MIG-1"}, {UUID: "MIG-2"}, {UUID: "MIG-3", Claims: []collectors.Owner{kubelet}}},
			Processes: []collectors.Process{{PID: 3, MIGUUID: "MIG-1"}, {PID: 4, MIGUUID: "MIG-2"}}},
		{GPU: collectors.GPU{UUID: "GPU-other"}, Processes: []collectors.Process{{PID: 5}}},
	}
	if err := NewStatic(m).Attribute(context.Background(), gpus); err != nil {
		t.Fatal(err)
	}
	acme := collectors.Owner{Tenant: "acme", Department: "research"}
	if len(gpus[0].Claims) != 1 || gpus[0].Claims[0] != acme {
		t.Errorf("rented gpu claims %+v", gpus[0].Claims)
	}
	if gpus[0].Processes[0].Owner != acme {
		t.Errorf("process on rented gpu: %+v", gpus[0].Processes[0].Owner)
	}
	if got := gpus[0].Processes[1].Owner; got != (collectors.Owner{Tenant: "acme", Department: "research", Workload: "slurm/9"}) {
		t.Errorf("process with a workload keeps it: %+v", got)
	}
	if len(gpus[1].Claims) != 1 || gpus[1].Claims[0] != kubelet {
		t.Errorf("earlier claim replaced: %+v", gpus[1].Claims)
	}
	insts := gpus[2].Instances
	if insts[0].Claims[0].Tenant != "globex" || insts[1].Claims[0].Tenant != "initech" || insts[2].Claims[0] != kubelet {
		t.Errorf("mig claims %+v %+v %+v", insts[0].Claims, insts[1].Claims, insts[2].Claims)
	}
	if gpus[2].Processes[0].Owner.Tenant != "globex" || gpus[2].Processes[1].Owner.Tenant != "initech" {
		t.Errorf("mig processes %+v", gpus[2].Processes)
	}
	if len(gpus[3].Claims) != 0 || !gpus[3].Processes[0].Owner.IsZero() {
		t.Errorf("unmapped gpu touched: %+v", gpus[3])
	}
}

type fakeLabels map[string]map[string]string

func (f fakeLabels) PodLabels(ns, name string) (map[string]string, bool) {
	l, ok := f[ns+"/"+name]
	return l, ok
}

func TestTenancyPodLabelRulesComeFirstInFileOrder(t *testing.T) {
	m, err := ParseMapping(strings.NewReader(
		"label gpumeter.io/tenant=acme acme research\n" +
			"label team=ml mlteam\n" +
			"namespace shared shared-tenant ops\n"))
	if err != nil {
		t.Fatal(err)
	}
	ty := Tenancy{Mapping: m, NamespaceIsTenant: true, Pods: fakeLabels{
		"shared/train": {"gpumeter.io/tenant": "acme", "team": "ml"}, // both rules match: the first wins
		"shared/infer": {"team": "ml"},
		"shared/plain": {"app": "x"},
		"other/job":    {"team": "web"},
	}}
	cases := []struct {
		ns, pod string
		want    Tenant
	}{
		{"shared", "train", Tenant{Name: "acme", Department: "research"}},
		{"shared", "infer", Tenant{Name: "mlteam"}},
		{"shared", "plain", Tenant{Name: "shared-tenant", Department: "ops"}},
		{"shared", "unknown-pod", Tenant{Name: "shared-tenant", Department: "ops"}},
		{"other", "job", Tenant{Name: "other"}},
	}
	for _, tc := range cases {
		if got, ok := ty.Pod(tc.ns, tc.pod); !ok || got != tc.want {
			t.Errorf("Pod(%s, %s) = %+v, %v; want %+v", tc.ns, tc.pod, got, ok, tc.want)
		}
	}
	ty.Pods = nil // no label source: namespaces only
	if got, _ := ty.Pod("shared", "train"); got.Name != "shared-tenant" {
		t.Errorf("without a label source: %+v", got)
	}
}

func TestDocumentedMapFileExampleParses(t *testing.T) {
	doc, err := os.ReadFile("../../docs/collector.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "# <kind>")
	if !ok {
		t.Fatal("docs/collector.md lost its map file example")
	}
	example, _, _ := strings.Cut(rest, "```")
	m, err := ParseMapping(strings.NewReader("# <kind>" + example))
	if err != nil {
		t.Fatalf("documented example: %v", err)
	}
	if len(m.Labels) != 1 || m.Labels[0].Key != "gpumeter.io/tenant" || m.Labels[0].Tenant.Name != "globex" {
		t.Fatalf("label rule = %+v", m.Labels)
	}
}
