package attribution

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
)

// VMKey is the form a VM key takes in the map file and in lookups: a PCI
// address as "dddd:bb:ss.f" (NVML's "00000000:07:00.0" and libvirt's
// domain/bus/slot/function attributes both become "0000:07:00.0"), a UUID
// in lowercase, anything else (a domain name or id) as written.
func VMKey(k string) string {
	key, _ := parseVMKey(k)
	return key
}

// parseVMKey is VMKey that also says when k looks like a PCI address but
// is not one (a slot above 0x1f, say): a map file rule with such a key
// could never match, so ParseMapping refuses it. The key is then k as
// written.
func parseVMKey(k string) (string, error) {
	k = strings.TrimSpace(k)
	if pci, shaped, err := pciKey(k); shaped {
		if err != nil {
			return k, err
		}
		return pci, nil
	}
	if isUUID(k) {
		return strings.ToLower(k), nil
	}
	return k, nil
}

// pciKey reads "[domain:]bus:slot.function" in hex. shaped says k has
// that form (hex digits, two or three ':'-separated parts, one '.'),
// whether or not the numbers are in range.
func pciKey(k string) (key string, shaped bool, err error) {
	parts := strings.Split(k, ":")
	if len(parts) == 2 {
		parts = append([]string{"0"}, parts...)
	}
	if len(parts) != 3 {
		return "", false, nil
	}
	slot, fn, ok := strings.Cut(parts[2], ".")
	if !ok || !isHex(parts[0]) || !isHex(parts[1]) || !isHex(slot) || !isHex(fn) {
		return "", false, nil
	}
	domain := parts[0]
	if len(domain) > 4 { // NVML's 8-digit domain; only the low 16 bits are used
		if strings.Trim(domain[:len(domain)-4], "0") != "" {
			return "", true, fmt.Errorf("PCI address %s: domain above 0xffff", k)
		}
		domain = domain[len(domain)-4:]
	}
	if len(parts[1]) > 2 || len(slot) > 2 || len(fn) > 1 {
		return "", true, fmt.Errorf("PCI address %s: want [dddd:]bb:ss.f", k)
	}
	key, err = libvirtPCI(domain, parts[1], slot, fn)
	return key, true, err
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

// vgpuOwner resolves a vGPU instance: vm rules on the instance's own keys
// first (the most specific), then the libvirt domain holding it.
func (a *VM) vgpuOwner(v *collectors.VGPUInstance, load func() []Domain) collectors.Owner {
	d, found := domainOf(load(), v)
	workload := "vm/" + workloadID(v.VMID, d.Name, v.UUID)
	for _, k := range []string{v.UUID, v.MdevUUID, v.PCIBusID, v.VMID} {
		if t, ok := a.rule(k); ok {
			return t.owner(workload)
		}
	}
	if found {
		if t, ok := a.domainTenant(d); ok {
			return t.owner(workload)
		}
	}
	return collectors.Owner{Tenant: collectors.UnattributedTenant, Workload: workload}
}

// passthroughOwner resolves a GPU passed through whole: vm rules on its
// PCI address and UUID, then the libvirt domain with that PCI host
// device. ok is false when neither knows the GPU: it is not a VM's.
func (a *VM) passthroughOwner(g *collectors.GPUReading, load func() []Domain) (collectors.Owner, bool) {
	d, found := domainWithPCI(load(), g.GPU.PCIBusID)
	for _, k := range []string{g.GPU.PCIBusID, g.GPU.UUID} {
		if t, ok := a.rule(k); ok {
			workload := "vm/" + VMKey(k)
			if found {
				workload = "vm/" + d.Name
			}
			return t.owner(workload), true
		}
	}
	if !found {
		return collectors.Owner{}, false
	}
	if t, ok := a.domainTenant(d); ok {
		return t.owner("vm/" + d.Name), true
	}
	return collectors.Owner{Tenant: collectors.UnattributedTenant, Workload: "vm/" + d.Name}, true
}

// domainTenant is a domain's gpumeter metadata, else a vm rule on its
// name or UUID.
func (a *VM) domainTenant(d Domain) (Tenant, bool) {
	if d.Tenant.Name != "" {
		return d.Tenant, true
	}
	for _, k := range []string{d.Name, d.UUID} {
		if t, ok := a.rule(k); ok {
			return t, true
		}
	}
	return Tenant{}, false
}

func (a *VM) rule(k string) (Tenant, bool) {
	if k == "" || len(a.rules) == 0 {
		return Tenant{}, false
	}
	t, ok := a.rules[VMKey(k)]
	return t, ok
}

// domainOf finds the libvirt domain holding a vGPU: by its mdev, else by
// its virtual function's PCI address (SR-IOV vGPU handed to the VM as a
// PCI host device), else by the VM id: a domain name, a numeric domain id
// (found only in status files of running VMs; otherwise it finds
// nothing), or a UUID when NVML says so.
func domainOf(domains []Domain, v *collectors.VGPUInstance) (Domain, bool) {
	if mdev := strings.ToLower(v.MdevUUID); mdev != "" {
		for _, d := range domains {
			if slices.Contains(d.Mdevs, mdev) {
				return d, true
			}
		}
	}
	if d, ok := domainWithPCI(domains, v.PCIBusID); ok {
		return d, true
	}
	if v.VMID == "" {
		return Domain{}, false
	}
	for _, d := range domains {
		byUUID := v.VMIDType == "uuid" && d.UUID != "" && d.UUID == strings.ToLower(v.VMID)
		byDomain := v.VMIDType != "uuid" && (d.Name == v.VMID || (d.ID != "" && d.ID == v.VMID))
		if byUUID || byDomain {
			return d, true
		}
	}
	return Domain{}, false
}

// domainWithPCI finds the libvirt domain a PCI device is passed through
// to.
func domainWithPCI(domains []Domain, busID string) (Domain, bool) {
	if busID == "" {
		return Domain{}, false
	}
	pci := VMKey(busID)
	for _, d := range domains {
		if slices.Contains(d.PCIs, pci) {
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
