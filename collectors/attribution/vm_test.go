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
	cases := []struct{ name, in, want string }{
		{"NVML's 8-digit PCI domain", "00000000:07:00.0", "0000:07:00.0"},
		{"4-digit PCI domain", "0000:07:00.4", "0000:07:00.4"},
		{"no PCI domain", "07:00.1", "0000:07:00.1"},
		{"PCI hex in upper case", "0001:A1:1F.7", "0001:a1:1f.7"},
		{"blanks around", " 0000:07:00.0\t", "0000:07:00.0"},
		{"UUID in upper case", "5D6C2A4E-1111-4222-8333-944455556666", "5d6c2a4e-1111-4222-8333-944455556666"},
		{"a domain name keeps its case", "vm-Acme-01", "vm-Acme-01"},
		{"a numeric domain id", "7", "7"},
		{"PCI-shaped, domain above 16 bits: kept as written", "00010000:07:00.0", "00010000:07:00.0"},
		{"PCI-shaped, slot out of range: kept as written", "0000:07:20.0", "0000:07:20.0"},
		{"colons but not hex", "vm:db:01.x", "vm:db:01.x"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := VMKey(tc.in); got != tc.want {
				t.Errorf("VMKey(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestParseMappingVMRules(t *testing.T) {
	m, err := ParseMapping(strings.NewReader(`
# <kind> <key> <tenant> [department]
vm vm-acme-01 acme research
vm	00000000:07:00.0   globex       # a passed-through GPU by its PCI address
vm 5D6C2A4E-1111-4222-8333-944455556666 initech
vm 42 umbrella                        # a numeric libvirt domain id
device GPU-1 acme
`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Tenant{
		"vm-acme-01":                           {"acme", "research"},
		"0000:07:00.0":                         {Name: "globex"},
		"5d6c2a4e-1111-4222-8333-944455556666": {Name: "initech"},
		"42":                                   {Name: "umbrella"},
	}
	if len(m.VMs) != len(want) || len(m.Devices) != 1 {
		t.Fatalf("vm rules %v, devices %v", m.VMs, m.Devices)
	}
	for k, v := range want {
		if m.VMs[k] != v {
			t.Errorf("vm %s = %v, want %v", k, m.VMs[k], v)
		}
	}
}

func TestParseMappingRejectsVMRules(t *testing.T) {
	cases := []struct{ name, file, want string }{
		{"a VM mapped twice", "vm a x\nvm a y\n", `line 2: vm "a" mapped twice`},
		{"one PCI address in two spellings", "vm 0000:07:00.0 x\nvm 00000000:07:00.0 y\n", `line 2: vm "0000:07:00.0" mapped twice`},
		{"one UUID in two cases", "vm 5d6c2a4e-1111-4222-8333-944455556666 x\nvm 5D6C2A4E-1111-4222-8333-944455556666 y\n",
			`line 2: vm "5d6c2a4e-1111-4222-8333-944455556666" mapped twice`},
		{"a vm and a device rule on one key are not duplicates, two vm rules are", "device GPU-1 x\nvm GPU-1 y\nvm GPU-1 z\n", `line 3: vm "GPU-1" mapped twice`},
		{"no tenant", "vm only-key\n", "line 1: want <kind> <key> <tenant> [department], got 2 fields"},
		{"too many fields", "vm k t d extra\n", "line 1: want <kind> <key> <tenant> [department], got 5 fields"},
		{"the reserved tenant", "vm k (unattributed)\n", `line 1: tenant "(unattributed)" is reserved`},
		{"a misspelt kind", "vms k t\n", `line 1: unknown kind "vms" (want device, namespace, account, label or vm)`},
		{"PCI slot out of range", "\nvm 0000:07:20.0 t\n", "line 2: vm key: PCI address 0000:07:20.0: out of range"},
		{"PCI function out of range", "vm 07:00.8 t\n", "line 1: vm key: PCI address 0:07:00.8: out of range"},
		{"PCI domain above 16 bits", "vm 00010000:07:00.0 t\n", "line 1: vm key: PCI address 00010000:07:00.0: domain above 0xffff"},
		{"PCI bus too long", "vm 0000:107:00.0 t\n", "line 1: vm key: PCI address 0000:107:00.0: want [dddd:]bb:ss.f"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseMapping(strings.NewReader(tc.file))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%q: %v, want %q", tc.file, err, tc.want)
			}
		})
	}
	// From a file, the error names it too.
	path := filepath.Join(t.TempDir(), "tenants.map")
	if err := os.WriteFile(path, []byte("vm a x\nvm a y\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadMapping(path); err == nil || !strings.Contains(err.Error(), "map file "+path+": line 2: vm \"a\" mapped twice") {
		t.Errorf("LoadMapping: %v, want the file, line and key", err)
	}
}

func TestMappingValidateVMKeys(t *testing.T) {
	err := Mapping{VMs: map[string]Tenant{"00000000:07:00.0": {Name: "a"}, "0000:07:20.0": {Name: "b"}}}.Validate()
	for _, want := range []string{`vm "00000000:07:00.0": key not in canonical form "0000:07:00.0"`, `vm "0000:07:20.0": PCI address 0000:07:20.0: out of range`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err %v lacks %q", err, want)
		}
	}
	if err := (Mapping{VMs: map[string]Tenant{"0000:07:00.0": {Name: "a"}, "vm-a": {Name: "b"}}}).Validate(); err != nil {
		t.Errorf("canonical keys: %v", err)
	}
}

func TestParseDomainFixtures(t *testing.T) {
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
		len(acme.Mdevs) != 1 || acme.Mdevs[0] != "aaaaaaaa-0000-4000-8000-000000000001" || acme.File != filepath.Join("testdata", "libvirt", "vm-acme.xml") {
		t.Errorf("vm-acme (metadata among other tools', an mdev): %+v", acme)
	}
	if pt.Tenant != (Tenant{Name: "globex"}) || len(pt.PCIs) != 1 || pt.PCIs[0] != "0000:07:00.0" || len(pt.Mdevs) != 0 {
		t.Errorf("vm-pt (no department, a PCI host device): %+v", pt)
	}
	if plain.Tenant != (Tenant{}) || plain.UUID != "7f6c2a4e-1111-4222-8333-944455556666" || len(plain.Mdevs)+len(plain.PCIs) != 0 {
		t.Errorf("vm-plain (no metadata: still known by name and UUID): %+v", plain)
	}
	// A running VM's status file (/run/libvirt/qemu) wraps its domain and
	// knows its numeric id; the hostdev's guest-side <address> is not the
	// host's.
	run, err := NewLibvirtDomains("testdata/libvirt-run").Domains(time.Now())
	if err != nil || len(run) != 1 || run[0].Name != "vm-acme-02" || run[0].ID != "7" || run[0].Tenant != (Tenant{"acme", "vision"}) ||
		len(run[0].Mdevs) != 1 || run[0].Mdevs[0] != "aaaaaaaa-0000-4000-8000-000000000002" || len(run[0].PCIs) != 0 {
		t.Errorf("status file: %+v, %v", run, err)
	}
	_, err = NewLibvirtDomains("testdata/libvirt-bad").Domains(time.Now())
	if err == nil || !strings.Contains(err.Error(), "libvirt domain testdata/libvirt-bad/broken.xml: XML syntax error on line 5") {
		t.Fatalf("a malformed domain file: %v, want its name and line", err)
	}
}

func TestParseDomain(t *testing.T) {
	const owner = `<metadata><g:owner xmlns:g="https://gpumeter.dev/xmlns/libvirt/1"><g:tenant>%s</g:tenant></g:owner></metadata>`
	withOwner := func(tenant string) string { return strings.Replace(owner, "%s", tenant, 1) }
	good := []struct {
		name, doc string
		want      Domain
	}{
		{"a name with blanks is libvirt's to allow", `<domain><name>win 11 desk</name></domain>`, Domain{Name: "win 11 desk"}},
		{"pci hostdev without a domain attribute is PCI domain 0",
			`<domain><name>a</name><devices><hostdev mode='subsystem' type='pci'><source><address bus='0x41' slot='0x00' function='0x1'/></source></hostdev></devices></domain>`,
			Domain{Name: "a", PCIs: []string{"0000:41:00.1"}}},
		{"other hostdevs (usb) are not GPUs",
			`<domain><name>a</name><devices><hostdev mode='subsystem' type='usb'><source><vendor id='0x1234'/></source></hostdev></devices></domain>`,
			Domain{Name: "a"}},
		{"an owner element in another namespace is not ours",
			`<domain><name>a</name><metadata><owner xmlns="https://example.com/x"><tenant>them</tenant></owner></metadata></domain>`,
			Domain{Name: "a"}},
		{"the default-namespace form of our element", `<domain><name>a</name><metadata><owner xmlns="https://gpumeter.dev/xmlns/libvirt/1"><tenant> acme </tenant></owner></metadata></domain>`,
			Domain{Name: "a", Tenant: Tenant{Name: "acme"}}},
	}
	for _, tc := range good {
		t.Run(tc.name, func(t *testing.T) {
			d, err := ParseDomain(strings.NewReader(tc.doc))
			if err != nil {
				t.Fatal(err)
			}
			if d.Name != tc.want.Name || d.Tenant != tc.want.Tenant || strings.Join(d.PCIs, ",") != strings.Join(tc.want.PCIs, ",") || len(d.Mdevs) != 0 {
				t.Errorf("got %+v, want %+v", d, tc.want)
			}
		})
	}
	bad := []struct{ name, doc, want string }{
		{"empty", "", "no <domain> element"},
		{"not XML", "not xml", "no <domain> element"},
		{"another root element, with its line", "\n<network><name>default</name></network>", "line 2: root element <network>, want <domain> or <domstatus>"},
		{"a status file without its domain", "<domstatus state='running'><taint flag='x'/></domstatus>", "no <domain> element"},
		{"unclosed element", "<domain><name>a</name>\n<devices>\n</domain>", "XML syntax error on line 3"},
		{"no name", `<domain><uuid>5d6c2a4e-1111-4222-8333-944455556666</uuid></domain>`, "domain without a <name>"},
		{"a UUID that is not one", `<domain><name>a</name><uuid>x</uuid></domain>`, `domain a: <uuid> "x" is not a UUID`},
		{"owner without tenant", `<domain><name>a</name><metadata><g:owner xmlns:g="https://gpumeter.dev/xmlns/libvirt/1"></g:owner></metadata></domain>`,
			"domain a: gpumeter:owner without a gpumeter:tenant"},
		{"the reserved tenant", `<domain><name>a</name>` + withOwner("(unattributed)") + `</domain>`, `domain a: gpumeter:owner: tenant "(unattributed)" is reserved`},
		{"a tenant with blanks", `<domain><name>a</name>` + withOwner("acme corp") + `</domain>`, "names may not hold blanks"},
		{"two owners", `<domain><name>a</name><metadata><g:owner xmlns:g="https://gpumeter.dev/xmlns/libvirt/1"><g:tenant>x</g:tenant></g:owner><g:owner xmlns:g="https://gpumeter.dev/xmlns/libvirt/1"><g:tenant>y</g:tenant></g:owner></metadata></domain>`,
			"domain a: more than one gpumeter:owner element"},
		{"a PCI bus out of range", `<domain><name>a</name><devices><hostdev type='pci'><source><address domain='0x0000' bus='0x1ff' slot='0' function='0'/></source></hostdev></devices></domain>`,
			"domain a: pci hostdev: PCI address 0x0000:0x1ff:0.0: out of range"},
		{"a PCI slot that is not hex", `<domain><name>a</name><devices><hostdev type='pci'><source><address domain='0x0000' bus='0x07' slot='0xzz' function='0'/></source></hostdev></devices></domain>`,
			"domain a: pci hostdev: PCI address 0x0000:0x07:0xzz.0"},
		{"an mdev UUID that is not one", `<domain><name>a</name><devices><hostdev type='mdev'><source><address uuid='abc'/></source></hostdev></devices></domain>`,
			`domain a: mdev hostdev: "abc" is not a UUID`},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			if d, err := ParseDomain(strings.NewReader(tc.doc)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %+v, %v; want an error with %q", d, err, tc.want)
			}
		})
	}
}

func FuzzParseDomain(f *testing.F) {
	for _, dir := range []string{"testdata/libvirt", "testdata/libvirt-bad"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.xml"))
		if err != nil {
			f.Fatal(err)
		}
		for _, p := range files {
			b, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(string(b))
		}
	}
	f.Fuzz(func(t *testing.T, doc string) {
		d, err := ParseDomain(strings.NewReader(doc))
		if err != nil {
			return
		}
		if d.Name == "" || (d.UUID != "" && !isUUID(d.UUID)) || d.Tenant.Name == collectors.UnattributedTenant {
			t.Fatalf("accepted %+v", d)
		}
		for _, p := range d.PCIs {
			if VMKey(p) != p {
				t.Fatalf("PCI key %q not canonical", p)
			}
		}
		for _, m := range d.Mdevs {
			if !isUUID(m) || m != strings.ToLower(m) {
				t.Fatalf("mdev %q", m)
			}
		}
	})
}

// The directory is listed at most every RecheckEvery and only changed
// files are read again; a broken file is reported at every check until
// fixed, keeps the domain last read from it, and hides no other file.
func TestLibvirtDomainsFollowChanges(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	domain := func(name, tenant string) string {
		return `<domain><name>` + name + `</name><metadata><g:owner xmlns:g="https://gpumeter.dev/xmlns/libvirt/1"><g:tenant>` + tenant + `</g:tenant></g:owner></metadata></domain>`
	}
	tenants := func(ds []Domain) string {
		var s []string
		for _, d := range ds {
			s = append(s, d.Name+"="+d.Tenant.Name)
		}
		return strings.Join(s, " ")
	}
	write("a.xml", domain("a", "acme"))
	write("notes.txt", "not a domain") // only *.xml is read
	l := NewLibvirtDomains(dir)
	l.RecheckEvery = time.Minute
	now := time.Now()
	check := func(at time.Duration, want string, wantErr string) {
		t.Helper()
		ds, err := l.Domains(now.Add(at))
		if got := tenants(ds); got != want {
			t.Errorf("at +%s: domains %q, want %q", at, got, want)
		}
		if (wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), wantErr)) {
			t.Errorf("at +%s: err %v, want %q", at, err, wantErr)
		}
	}
	check(0, "a=acme", "")
	write("b.xml", domain("b", "globex"))
	check(time.Second, "a=acme", "") // not listed again yet
	check(2*time.Minute, "a=acme b=globex", "")
	write("c.xml", "<domain>")
	write("d.xml", domain("d", "initech"))
	check(4*time.Minute, "a=acme b=globex d=initech", "c.xml")
	check(4*time.Minute+time.Second, "a=acme b=globex d=initech", "c.xml") // the cached answer keeps the error
	check(6*time.Minute, "a=acme b=globex d=initech", "c.xml")             // unchanged and still broken
	// b breaks (a half-written edit): its last good reading stays.
	write("b.xml", "<domain><name>b</name")
	check(8*time.Minute, "a=acme b=globex d=initech", "b.xml")
	write("b.xml", domain("b", "umbrella")+"\n")
	write("c.xml", domain("c", "hooli"))
	check(10*time.Minute, "a=acme b=umbrella c=hooli d=initech", "")
	if err := os.Remove(filepath.Join(dir, "a.xml")); err != nil {
		t.Fatal(err)
	}
	check(12*time.Minute, "b=umbrella c=hooli d=initech", "")

	l0 := NewLibvirtDomains(dir)
	l0.RecheckEvery = 0 // every call
	if ds, _ := l0.Domains(now); len(ds) != 3 {
		t.Fatalf("%v", ds)
	}
	write("e.xml", domain("e", "acme"))
	if ds, _ := l0.Domains(now); len(ds) != 4 {
		t.Fatalf("RecheckEvery 0 did not look again: %v", ds)
	}

	if _, err := NewLibvirtDomains(filepath.Join(dir, "missing")).Domains(now); err == nil || !strings.Contains(err.Error(), "libvirt dir") {
		t.Errorf("a missing directory: %v", err)
	}
}

// vgpuHost is one vGPU host GPU holding the given instances.
func vgpuHost(vgpus ...collectors.VGPUInstance) []collectors.GPUReading {
	return []collectors.GPUReading{{GPU: collectors.GPU{UUID: "GPU-host", PCIBusID: "00000000:41:00.0"}, Virtualization: collectors.VirtHostVGPU, VGPUs: vgpus}}
}

func TestVMAttributorVGPUResolutionOrder(t *testing.T) {
	// The fixtures: vm-acme holds mdev aaaaaaaa-…-0001 and has metadata
	// (acme/research); vm-pt holds PCI 0000:07:00.0 (globex); vm-plain
	// has no metadata.
	const (
		mdev      = "aaaaaaaa-0000-4000-8000-000000000001"
		acmeUUID  = "5d6c2a4e-1111-4222-8333-944455556666"
		plainUUID = "7f6c2a4e-1111-4222-8333-944455556666"
	)
	inst := collectors.VGPUInstance{UUID: "b0b0b0b0-0000-4000-8000-00000000000a", VMID: "vm-acme", VMIDType: "domain",
		MdevUUID: mdev, PCIBusID: "00000000:41:00.4", Type: "A100-4C", GPUInstanceID: -1}
	with := func(f func(v *collectors.VGPUInstance)) collectors.VGPUInstance { v := inst; f(&v); return v }
	allRules := "vm b0b0b0b0-0000-4000-8000-00000000000a by-vgpu\nvm " + mdev + " by-mdev\nvm 0000:41:00.4 by-pci\nvm vm-acme by-vmid\n"
	cases := []struct {
		name  string
		rules string
		dir   string
		v     collectors.VGPUInstance
		want  collectors.Owner
	}{
		{"a rule on the vGPU UUID comes first", allRules, "testdata/libvirt", inst, collectors.Owner{Tenant: "by-vgpu", Workload: "vm/vm-acme"}},
		{"then the mdev UUID", "vm " + mdev + " by-mdev d\nvm 0000:41:00.4 by-pci\nvm vm-acme by-vmid\n", "testdata/libvirt", inst,
			collectors.Owner{Tenant: "by-mdev", Department: "d", Workload: "vm/vm-acme"}},
		{"then the instance's PCI address", "vm 0000:41:00.4 by-pci\nvm vm-acme by-vmid\n", "testdata/libvirt", inst, collectors.Owner{Tenant: "by-pci", Workload: "vm/vm-acme"}},
		{"then the VM id", "vm vm-acme by-vmid\n", "testdata/libvirt", inst, collectors.Owner{Tenant: "by-vmid", Workload: "vm/vm-acme"}},
		{"rules match keys in any spelling", "vm B0B0B0B0-0000-4000-8000-00000000000A by-vgpu\n", "", inst, collectors.Owner{Tenant: "by-vgpu", Workload: "vm/vm-acme"}},
		{"then the domain holding the mdev: its metadata", "", "testdata/libvirt", with(func(v *collectors.VGPUInstance) { v.VMID = "7"; v.MdevUUID = strings.ToUpper(mdev) }),
			collectors.Owner{Tenant: "acme", Department: "research", Workload: "vm/7"}},
		{"metadata beats a rule on the domain's name", "vm vm-acme by-name\n", "testdata/libvirt", with(func(v *collectors.VGPUInstance) { v.VMID = "7" }),
			collectors.Owner{Tenant: "acme", Department: "research", Workload: "vm/7"}},
		{"the domain by its name", "", "testdata/libvirt", with(func(v *collectors.VGPUInstance) { v.MdevUUID = "" }),
			collectors.Owner{Tenant: "acme", Department: "research", Workload: "vm/vm-acme"}},
		{"the domain by its UUID when NVML reports one", "", "testdata/libvirt",
			with(func(v *collectors.VGPUInstance) {
				v.MdevUUID, v.VMID, v.VMIDType = "", strings.ToUpper(acmeUUID), "uuid"
			}),
			collectors.Owner{Tenant: "acme", Department: "research", Workload: "vm/" + strings.ToUpper(acmeUUID)}},
		{"a VM id of type uuid is not a domain name", "", "testdata/libvirt",
			with(func(v *collectors.VGPUInstance) { v.MdevUUID, v.VMIDType = "", "uuid" }),
			collectors.Owner{Tenant: collectors.UnattributedTenant, Workload: "vm/vm-acme"}},
		{"the domain by its pci host device (an SR-IOV VF)", "", "testdata/libvirt",
			with(func(v *collectors.VGPUInstance) { v.MdevUUID, v.VMID, v.PCIBusID = "", "", "00000000:07:00.0" }),
			collectors.Owner{Tenant: "globex", Workload: "vm/vm-pt"}},
		{"a domain without metadata: a rule on its name", "vm vm-plain plain-tenant ops\n", "testdata/libvirt",
			with(func(v *collectors.VGPUInstance) { v.MdevUUID, v.VMID = "", "vm-plain" }),
			collectors.Owner{Tenant: "plain-tenant", Department: "ops", Workload: "vm/vm-plain"}},
		{"a domain without metadata: a rule on its UUID", "vm " + plainUUID + " plain-uuid\n", "testdata/libvirt",
			with(func(v *collectors.VGPUInstance) { v.MdevUUID, v.VMID = "", "vm-plain" }),
			collectors.Owner{Tenant: "plain-uuid", Workload: "vm/vm-plain"}},
		{"a domain nothing maps", "", "testdata/libvirt", with(func(v *collectors.VGPUInstance) { v.MdevUUID, v.VMID = "", "vm-plain" }),
			collectors.Owner{Tenant: collectors.UnattributedTenant, Workload: "vm/vm-plain"}},
		{"a numeric VM id: the running domain with that id (status files)", "", "testdata/libvirt-run",
			with(func(v *collectors.VGPUInstance) { v.MdevUUID, v.VMID = "", "7" }),
			collectors.Owner{Tenant: "acme", Department: "vision", Workload: "vm/7"}},
		{"a numeric VM id no domain is named: nothing but its id", "", "testdata/libvirt", with(func(v *collectors.VGPUInstance) { v.MdevUUID, v.VMID = "", "12" }),
			collectors.Owner{Tenant: collectors.UnattributedTenant, Workload: "vm/12"}},
		{"no VM id: the domain's name is the workload", "", "testdata/libvirt", with(func(v *collectors.VGPUInstance) { v.VMID = "" }),
			collectors.Owner{Tenant: "acme", Department: "research", Workload: "vm/vm-acme"}},
		{"no VM id and no domain: the vGPU UUID is", "", "", with(func(v *collectors.VGPUInstance) { v.VMID = "" }),
			collectors.Owner{Tenant: collectors.UnattributedTenant, Workload: "vm/b0b0b0b0-0000-4000-8000-00000000000a"}},
		{"no libvirt directory: rules only", "", "", inst, collectors.Owner{Tenant: collectors.UnattributedTenant, Workload: "vm/vm-acme"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := ParseMapping(strings.NewReader(tc.rules))
			if err != nil {
				t.Fatal(err)
			}
			gpus := vgpuHost(tc.v)
			if err := NewVM(m, tc.dir, 0).Attribute(context.Background(), gpus); err != nil {
				t.Fatal(err)
			}
			if c := gpus[0].VGPUs[0].Claims; len(c) != 1 || c[0] != tc.want {
				t.Errorf("claims %+v, want %+v", c, tc.want)
			}
			if len(gpus[0].Claims) != 0 {
				t.Errorf("the host GPU was claimed: %+v", gpus[0].Claims)
			}
		})
	}
}

func TestVMAttributorPassthrough(t *testing.T) {
	pt := func(uuid, pci string) []collectors.GPUReading {
		return []collectors.GPUReading{{GPU: collectors.GPU{UUID: uuid, PCIBusID: pci}, Virtualization: collectors.VirtPassthrough}}
	}
	cases := []struct {
		name  string
		rules string
		dir   string
		gpus  []collectors.GPUReading
		want  []collectors.Owner // nil: left unclaimed
	}{
		{"the domain with its pci host device", "", "testdata/libvirt", pt("GPU-pt", "00000000:07:00.0"), []collectors.Owner{{Tenant: "globex", Workload: "vm/vm-pt"}}},
		{"a rule on its PCI address, named by the rule key", "vm 0000:08:00.0 initech hw\n", "", pt("GPU-pt", "00000000:08:00.0"),
			[]collectors.Owner{{Tenant: "initech", Department: "hw", Workload: "vm/0000:08:00.0"}}},
		{"a rule on its UUID", "vm GPU-pt initech\n", "", pt("GPU-pt", "00000000:08:00.0"), []collectors.Owner{{Tenant: "initech", Workload: "vm/GPU-pt"}}},
		{"a rule beats the domain's metadata, the domain names the workload", "vm GPU-pt initech\n", "testdata/libvirt", pt("GPU-pt", "00000000:07:00.0"),
			[]collectors.Owner{{Tenant: "initech", Workload: "vm/vm-pt"}}},
		{"the metadata beats a rule on the domain's name", "vm vm-pt umbrella\n", "testdata/libvirt", pt("GPU-pt", "00000000:07:00.0"), []collectors.Owner{{Tenant: "globex", Workload: "vm/vm-pt"}}},
		{"a GPU no VM is known to hold", "vm vm-pt umbrella\n", "testdata/libvirt", pt("GPU-pt2", "00000000:08:00.0"), nil},
		{"a GPU without a PCI address", "", "testdata/libvirt", pt("GPU-pt2", ""), nil},
		{"bare metal is not a VM's, whatever the rules", "vm GPU-bare x\n", "testdata/libvirt",
			[]collectors.GPUReading{{GPU: collectors.GPU{UUID: "GPU-bare", PCIBusID: "00000000:07:00.0"}}}, nil},
		{"nor a vSGA host's GPU", "vm GPU-sga x\n", "testdata/libvirt",
			[]collectors.GPUReading{{GPU: collectors.GPU{UUID: "GPU-sga", PCIBusID: "00000000:07:00.0"}, Virtualization: collectors.VirtHostVSGA}}, nil},
		{"nor a vGPU guest's", "vm GPU-guest x\n", "",
			[]collectors.GPUReading{{GPU: collectors.GPU{UUID: "GPU-guest"}, Virtualization: collectors.VirtVGPUGuest}}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := ParseMapping(strings.NewReader(tc.rules))
			if err != nil {
				t.Fatal(err)
			}
			if err := NewVM(m, tc.dir, 0).Attribute(context.Background(), tc.gpus); err != nil {
				t.Fatal(err)
			}
			got := tc.gpus[0].Claims
			if len(got) != len(tc.want) || (len(got) == 1 && got[0] != tc.want[0]) {
				t.Errorf("claims %+v, want %+v", got, tc.want)
			}
		})
	}
}

// Claims an earlier attributor set (the static map, say) are never
// overwritten, on instances or on whole GPUs.
func TestVMAttributorKeepsEarlierClaims(t *testing.T) {
	m, err := ParseMapping(strings.NewReader("vm vm-acme rule-tenant\nvm GPU-pt rule-tenant\n"))
	if err != nil {
		t.Fatal(err)
	}
	earlier := []collectors.Owner{{Tenant: "earlier", Workload: "ns/pod"}}
	gpus := vgpuHost(
		collectors.VGPUInstance{UUID: "vgpu-claimed", VMID: "vm-acme", VMIDType: "domain", Claims: append([]collectors.Owner(nil), earlier...)},
		collectors.VGPUInstance{UUID: "vgpu-free", VMID: "vm-acme", VMIDType: "domain"},
	)
	gpus = append(gpus, collectors.GPUReading{GPU: collectors.GPU{UUID: "GPU-pt", PCIBusID: "00000000:07:00.0"}, Virtualization: collectors.VirtPassthrough,
		Claims: append([]collectors.Owner(nil), earlier...)})
	if err := NewVM(m, "testdata/libvirt", 0).Attribute(context.Background(), gpus); err != nil {
		t.Fatal(err)
	}
	if c := gpus[0].VGPUs[0].Claims; len(c) != 1 || c[0] != earlier[0] {
		t.Errorf("claimed instance: %+v", c)
	}
	if c := gpus[0].VGPUs[1].Claims; len(c) != 1 || c[0] != (collectors.Owner{Tenant: "rule-tenant", Workload: "vm/vm-acme"}) {
		t.Errorf("free instance: %+v", c)
	}
	if c := gpus[1].Claims; len(c) != 1 || c[0] != earlier[0] {
		t.Errorf("claimed passthrough GPU: %+v", c)
	}
}

// A broken domain file is reported, and the VMs are still attributed by
// the rules and the files that parse.
func TestVMAttributorWithABrokenDomainFile(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"good.xml":   `<domain><name>vm-good</name><metadata><g:owner xmlns:g="https://gpumeter.dev/xmlns/libvirt/1"><g:tenant>acme</g:tenant></g:owner></metadata></domain>`,
		"broken.xml": "<domain><name>vm-broken</name>\n<metadata>",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m, err := ParseMapping(strings.NewReader("vm vm-ruled globex\n"))
	if err != nil {
		t.Fatal(err)
	}
	gpus := vgpuHost(
		collectors.VGPUInstance{UUID: "v1", VMID: "vm-good", VMIDType: "domain"},
		collectors.VGPUInstance{UUID: "v2", VMID: "vm-ruled", VMIDType: "domain"},
		collectors.VGPUInstance{UUID: "v3", VMID: "vm-broken", VMIDType: "domain"},
	)
	err = NewVM(m, dir, 0).Attribute(context.Background(), gpus)
	if err == nil || !strings.Contains(err.Error(), "broken.xml") {
		t.Fatalf("err %v, want the broken file named", err)
	}
	want := []string{"acme", "globex", collectors.UnattributedTenant}
	for i, v := range gpus[0].VGPUs {
		if len(v.Claims) != 1 || v.Claims[0].Tenant != want[i] || v.Claims[0].Workload != "vm/"+v.VMID {
			t.Errorf("%s: %+v, want tenant %s", v.UUID, v.Claims, want[i])
		}
	}
}

// What docs/collector.md shows operators to copy parses as it says.
func TestDocumentedVMExamplesParse(t *testing.T) {
	doc, err := os.ReadFile("../../docs/collector.md")
	if err != nil {
		t.Fatal(err)
	}
	block := func(start string) string {
		t.Helper()
		_, rest, ok := strings.Cut(string(doc), start)
		if !ok {
			t.Fatalf("docs/collector.md lost its example starting %q", start)
		}
		body, _, _ := strings.Cut(rest, "```")
		return start + body
	}
	m, err := ParseMapping(strings.NewReader(block("# vm  <key>")))
	if err != nil {
		t.Fatalf("vm rule example: %v", err)
	}
	if len(m.VMs) != 4 || m.VMs["0000:07:00.0"] != (Tenant{"initech", "hw"}) || m.VMs["17"].Name != "acme" {
		t.Fatalf("vm rule example: %+v", m.VMs)
	}
	d, err := ParseDomain(strings.NewReader(block("<domain type='kvm'>")))
	if err != nil {
		t.Fatalf("domain XML example: %v", err)
	}
	if d.Name != "vm-acme-01" || d.Tenant != (Tenant{"acme", "research"}) || len(d.Mdevs) != 1 || len(d.PCIs) != 1 || d.PCIs[0] != "0000:07:00.0" {
		t.Fatalf("domain XML example: %+v", d)
	}
}
