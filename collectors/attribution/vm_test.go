package attribution

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
)

func TestVMKey(t *testing.T) {
	cases := map[string]string{
		"00000000:07:00.0":                     "0000:07:00.0", // NVML
		"0000:07:00.4":                         "0000:07:00.4",
		"07:00.1":                              "0000:07:00.1",
		"0001:A1:1F.7":                         "0001:a1:1f.7",
		"5D6C2A4E-1111-4222-8333-944455556666": "5d6c2a4e-1111-4222-8333-944455556666",
		"vm-Acme-01":                           "vm-Acme-01",       // a domain name keeps its case
		"00010000:07:00.0":                     "00010000:07:00.0", // not a PCI domain we know: kept
		"7":                                    "7",
	}
	for in, want := range cases {
		if got := VMKey(in); got != want {
			t.Errorf("VMKey(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseMappingVMRules(t *testing.T) {
	m, err := ParseMapping(strings.NewReader(`
vm vm-acme-01 acme research
vm 00000000:07:00.0 globex       # a passed-through GPU by its PCI address
vm 5D6C2A4E-1111-4222-8333-944455556666 initech
`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Tenant{
		"vm-acme-01":                           {"acme", "research"},
		"0000:07:00.0":                         {Name: "globex"},
		"5d6c2a4e-1111-4222-8333-944455556666": {Name: "initech"},
	}
	if len(m.VMs) != len(want) {
		t.Fatalf("vm rules: %v", m.VMs)
	}
	for k, v := range want {
		if m.VMs[k] != v {
			t.Errorf("vm %s = %v, want %v", k, m.VMs[k], v)
		}
	}
	for _, tc := range []struct{ file, want string }{
		{"vm a x\nvm a y\n", `line 2: vm "a" mapped twice`},
		{"vm 0000:07:00.0 x\nvm 00000000:07:00.0 y\n", `line 2: vm "0000:07:00.0" mapped twice`},
		{"vm only-key\n", "line 1: want <kind> <key> <tenant> [department], got 2 fields"},
		{"vm k (unattributed)\n", `line 1: tenant "(unattributed)" is reserved`},
		{"vms k t\n", `unknown kind "vms" (want device, namespace, account, label or vm)`},
	} {
		if _, err := ParseMapping(strings.NewReader(tc.file)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.file, err, tc.want)
		}
	}
}

func TestParseLibvirtDomains(t *testing.T) {
	l := NewLibvirtDomains("testdata/libvirt")
	ds, err := l.Domains(time.Now())
	if err != nil || len(ds) != 3 {
		t.Fatalf("domains %+v, %v", ds, err)
	}
	byName := map[string]Domain{}
	for _, d := range ds {
		byName[d.Name] = d
	}
	acme, pt, plain := byName["vm-acme"], byName["vm-pt"], byName["vm-plain"]
	if acme.Tenant != (Tenant{"acme", "research"}) || acme.UUID != "5d6c2a4e-1111-4222-8333-944455556666" ||
		len(acme.Mdevs) != 1 || acme.Mdevs[0] != "aaaaaaaa-0000-4000-8000-000000000001" {
		t.Errorf("vm-acme: %+v", acme)
	}
	if pt.Tenant.Name != "globex" || len(pt.PCIs) != 1 || pt.PCIs[0] != "0000:07:00.0" {
		t.Errorf("vm-pt: %+v", pt)
	}
	if plain.Tenant.Name != "" || plain.Name != "vm-plain" {
		t.Errorf("vm-plain: %+v", plain)
	}
	_, err = NewLibvirtDomains("testdata/libvirt-bad").Domains(time.Now())
	if err == nil || !strings.Contains(err.Error(), "broken.xml") || !strings.Contains(err.Error(), "line ") {
		t.Fatalf("a malformed domain file: %v, want its name and line", err)
	}
	for _, doc := range []string{
		`<domain><uuid>x</uuid></domain>`,
		`<domain><name>a</name><metadata><g:owner xmlns:g="https://gpumeter.dev/xmlns/libvirt/1"></g:owner></metadata></domain>`,
		`<domain><name>a</name><devices><hostdev type='pci'><source><address domain='0x0000' bus='0x1ff' slot='0' function='0'/></source></hostdev></devices></domain>`,
		`not xml`,
	} {
		if _, err := ParseDomain(strings.NewReader(doc)); err == nil {
			t.Errorf("ParseDomain(%q) accepted", doc)
		}
	}
}

// A changed domain file is read again at the next check; a file that
// breaks keeps the domains read before.
func TestLibvirtDomainsFollowChanges(t *testing.T) {
	dir := t.TempDir()
	write := func(name, tenant string) {
		doc := `<domain><name>` + name + `</name><metadata><g:owner xmlns:g="https://gpumeter.dev/xmlns/libvirt/1"><g:tenant>` + tenant + `</g:tenant></g:owner></metadata></domain>`
		if err := os.WriteFile(filepath.Join(dir, name+".xml"), []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a", "acme")
	l := NewLibvirtDomains(dir)
	l.RecheckEvery = time.Minute
	now := time.Now()
	if ds, err := l.Domains(now); err != nil || len(ds) != 1 {
		t.Fatalf("%v %v", ds, err)
	}
	write("b", "globex")
	if ds, _ := l.Domains(now.Add(time.Second)); len(ds) != 1 {
		t.Fatalf("re-read before RecheckEvery: %v", ds)
	}
	if ds, _ := l.Domains(now.Add(2 * time.Minute)); len(ds) != 2 {
		t.Fatalf("not re-read after a change: %v", ds)
	}
	if err := os.WriteFile(filepath.Join(dir, "c.xml"), []byte("<domain>"), 0o644); err != nil {
		t.Fatal(err)
	}
	ds, err := l.Domains(now.Add(4 * time.Minute))
	if err == nil || len(ds) != 2 {
		t.Fatalf("a broken file: %v, %v; want an error and the last good domains", ds, err)
	}
}

func TestVMAttributor(t *testing.T) {
	m, err := ParseMapping(strings.NewReader("vm vgpu-ruled rule-tenant ops\nvm vm-plain plain-tenant\n"))
	if err != nil {
		t.Fatal(err)
	}
	a := NewVM(m, "testdata/libvirt", 0)
	inst := func(uuid, vm, mdev string) collectors.VGPUInstance {
		return collectors.VGPUInstance{UUID: uuid, VMID: vm, VMIDType: "domain", MdevUUID: mdev, Type: "A100-4C", GPUInstanceID: -1}
	}
	claimed := inst("vgpu-claimed", "vm-x", "")
	claimed.Claims = []collectors.Owner{{Tenant: "earlier", Workload: "vm/vm-x"}}
	byUUID := inst("vgpu-by-uuid", "5D6C2A4E-1111-4222-8333-944455556666", "")
	byUUID.VMIDType = "uuid"
	gpus := []collectors.GPUReading{
		{GPU: collectors.GPU{UUID: "GPU-host"}, Virtualization: collectors.VirtHostVGPU, VGPUs: []collectors.VGPUInstance{
			inst("vgpu-ruled", "vm-acme", "aaaaaaaa-0000-4000-8000-000000000001"), // a rule beats the metadata
			inst("vgpu-meta", "7", "AAAAAAAA-0000-4000-8000-000000000001"),        // by mdev → vm-acme's metadata
			inst("vgpu-plain", "vm-plain", ""),                                    // domain without metadata, a rule on its name
			inst("vgpu-unknown", "vm-nobody", ""),
			claimed, byUUID,
		}},
		{GPU: collectors.GPU{UUID: "GPU-pt", PCIBusID: "00000000:07:00.0"}, Virtualization: collectors.VirtPassthrough},
		{GPU: collectors.GPU{UUID: "GPU-pt2", PCIBusID: "00000000:08:00.0"}, Virtualization: collectors.VirtPassthrough},
		{GPU: collectors.GPU{UUID: "GPU-bare", PCIBusID: "00000000:07:00.0"}}, // not virtualized: not the VM's
	}
	if err := a.Attribute(context.Background(), gpus); err != nil {
		t.Fatal(err)
	}
	want := map[string]collectors.Owner{
		"vgpu-ruled":   {Tenant: "rule-tenant", Department: "ops", Workload: "vm/vm-acme"},
		"vgpu-meta":    {Tenant: "acme", Department: "research", Workload: "vm/7"},
		"vgpu-plain":   {Tenant: "plain-tenant", Workload: "vm/vm-plain"},
		"vgpu-unknown": {Tenant: collectors.UnattributedTenant, Workload: "vm/vm-nobody"},
		"vgpu-claimed": {Tenant: "earlier", Workload: "vm/vm-x"},
		"vgpu-by-uuid": {Tenant: "acme", Department: "research", Workload: "vm/5D6C2A4E-1111-4222-8333-944455556666"},
	}
	for _, v := range gpus[0].VGPUs {
		if len(v.Claims) != 1 || v.Claims[0] != want[v.UUID] {
			t.Errorf("%s: claims %+v, want %+v", v.UUID, v.Claims, want[v.UUID])
		}
	}
	if c := gpus[1].Claims; len(c) != 1 || c[0] != (collectors.Owner{Tenant: "globex", Workload: "vm/vm-pt"}) {
		t.Errorf("passthrough GPU: %+v", c)
	}
	if len(gpus[2].Claims) != 0 || len(gpus[3].Claims) != 0 {
		t.Errorf("claims on GPUs no VM holds: %+v / %+v", gpus[2].Claims, gpus[3].Claims)
	}
}
