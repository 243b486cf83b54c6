package attribution

import (
	"context"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
)

// VMKey is the form a VM key takes in the map file and in lookups: a PCI
// address as "dddd:bb:ss.f" (NVML's "00000000:07:00.0" and libvirt's
// domain/bus/slot/function attributes both become "0000:07:00.0"), a UUID
// in lowercase, anything else (a domain name or id) as written.
func VMKey(k string) string {
	k = strings.TrimSpace(k)
	if pci, ok := pciKey(k); ok {
		return pci
	}
	if isUUID(k) {
		return strings.ToLower(k)
	}
	return k
}

// pciKey reads "[domain:]bus:slot.function" in hex.
func pciKey(k string) (string, bool) {
	parts := strings.Split(k, ":")
	if len(parts) == 2 {
		parts = append([]string{"0"}, parts...)
	}
	if len(parts) != 3 {
		return "", false
	}
	slot, fn, ok := strings.Cut(parts[2], ".")
	if !ok || len(parts[0]) > 8 || len(parts[1]) > 2 || len(slot) > 2 || len(fn) != 1 {
		return "", false
	}
	domain := parts[0]
	if len(domain) > 4 { // NVML's 8-digit domain; only the low 16 bits are used
		if strings.Trim(domain[:len(domain)-4], "0") != "" {
			return "", false
		}
		domain = domain[len(domain)-4:]
	}
	key, err := libvirtPCI(domain, parts[1], slot, fn)
	return key, err == nil
}

func isUUID(k string) bool {
	if len(k) != 36 {
		return false
	}
	for i, c := range k {
		switch {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if c != '-' {
				return false
			}
		case (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'):
		default:
			return false
		}
	}
	return true
}

// VM attributes virtual machines: on a vGPU host each vGPU instance to
// the VM that holds it, and a GPU passed through to a VM to that VM. A
// VM's tenant comes from a `vm` rule of the map file on any of its keys,
// or from the gpumeter metadata of its libvirt domain; an unmapped VM's
// usage is kept as (unattributed) with workload vm/<VM id>. Claims an
// earlier attributor set are left alone.
type VM struct {
	rules   map[string]Tenant
	libvirt *LibvirtDomains // nil without a libvirt directory
	now     func() time.Time
}

// NewVM returns the VM attributor for the map file's vm rules and, when
// libvirtDir is not empty, the domain XML files there, looked at again
// for changes at most every recheck (0: every poll).
func NewVM(m Mapping, libvirtDir string, recheck time.Duration) *VM {
	v := &VM{rules: m.VMs, now: time.Now}
	if libvirtDir != "" {
		v.libvirt = NewLibvirtDomains(libvirtDir)
		v.libvirt.RecheckEvery = recheck
	}
	return v
}

// Attribute claims vGPU instances and passed-through GPUs.
func (a *VM) Attribute(_ context.Context, gpus []collectors.GPUReading) error {
	var domains []Domain
	var loadErr error
	loaded := false
	load := func() []Domain {
		if !loaded && a.libvirt != nil {
			domains, loadErr = a.libvirt.Domains(a.now())
			loaded = true
		}
		return domains
	}
	for gi := range gpus {
		g := &gpus[gi]
		switch g.Virtualization {
		case collectors.VirtHostVGPU:
			for i := range g.VGPUs {
				v := &g.VGPUs[i]
				if len(v.Claims) == 0 {
					v.Claims = []collectors.Owner{a.vgpuOwner(v, load)}
				}
			}
		case collectors.VirtPassthrough:
			if len(g.Claims) == 0 {
				if o, ok := a.passthroughOwner(g, load); ok {
					g.Claims = []collectors.Owner{o}
				}
			}
		}
	}
	return loadErr
}

func (a *VM) vgpuOwner(v *collectors.VGPUInstance, load func() []Domain) collectors.Owner {
	id := v.VMID
	for _, k := range []string{v.UUID, v.MdevUUID, v.PCIBusID, v.VMID} {
		if t, ok := a.rule(k); ok {
			return t.owner("vm/" + workloadID(id, "", v.UUID))
		}
	}
	if d, ok := domainOf(load(), v); ok {
		workload := "vm/" + workloadID(id, d.Name, v.UUID)
		if d.Tenant.Name != "" {
			return d.Tenant.owner(workload)
		}
		for _, k := range []string{d.Name, d.UUID} {
			if t, ok := a.rule(k); ok {
				return t.owner(workload)
			}
		}
		return collectors.Owner{Tenant: collectors.UnattributedTenant, Workload: workload}
	}
	return collectors.Owner{Tenant: collectors.UnattributedTenant, Workload: "vm/" + workloadID(id, "", v.UUID)}
}

func (a *VM) passthroughOwner(g *collectors.GPUReading, load func() []Domain) (collectors.Owner, bool) {
	for _, k := range []string{g.GPU.PCIBusID, g.GPU.UUID} {
		if t, ok := a.rule(k); ok {
			return t.owner("vm/" + VMKey(k)), true
		}
	}
	pci := VMKey(g.GPU.PCIBusID)
	for _, d := range load() {
		for _, p := range d.PCIs {
			if g.GPU.PCIBusID == "" || p != pci {
				continue
			}
			if d.Tenant.Name != "" {
				return d.Tenant.owner("vm/" + d.Name), true
			}
			for _, k := range []string{d.Name, d.UUID} {
				if t, ok := a.rule(k); ok {
					return t.owner("vm/" + d.Name), true
				}
			}
			return collectors.Owner{Tenant: collectors.UnattributedTenant, Workload: "vm/" + d.Name}, true
		}
	}
	return collectors.Owner{}, false
}

func (a *VM) rule(k string) (Tenant, bool) {
	if k == "" || len(a.rules) == 0 {
		return Tenant{}, false
	}
	t, ok := a.rules[VMKey(k)]
	return t, ok
}

// domainOf finds the libvirt domain holding a vGPU: by its mdev, else by
// the VM id (a domain name, or a UUID when NVML says so).
func domainOf(domains []Domain, v *collectors.VGPUInstance) (Domain, bool) {
	mdev := strings.ToLower(v.MdevUUID)
	for _, d := range domains {
		for _, m := range d.Mdevs {
			if mdev != "" && m == mdev {
				return d, true
			}
		}
	}
	for _, d := range domains {
		if (v.VMIDType == "uuid" && d.UUID != "" && d.UUID == strings.ToLower(v.VMID)) || (v.VMIDType != "uuid" && d.Name == v.VMID) {
			return d, true
		}
	}
	return Domain{}, false
}

// workloadID is the VM's id as NVML reported it, else its domain name,
// else the vGPU's UUID.
func workloadID(vmID, domain, vgpu string) string {
	switch {
	case vmID != "":
		return vmID
	case domain != "":
		return domain
	}
	return vgpu
}
