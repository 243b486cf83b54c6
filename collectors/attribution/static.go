package attribution

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"unicode"

	"github.com/gpumeter/gpumeter/collectors"
)

// Tenant is who pays, and the department its costs are charged back to.
type Tenant struct {
	Name       string
	Department string
}

// Mapping says which tenant a device, a Kubernetes namespace or a Slurm
// account belongs to. It is read from a map file (ParseMapping).
type Mapping struct {
	Devices    map[string]Tenant // GPU or MIG UUID
	Namespaces map[string]Tenant
	Accounts   map[string]Tenant
	// VMs map a virtual machine to a tenant by any of its keys (VMKey):
	// the VM id NVML reports (libvirt domain name or id), the VM UUID,
	// the vGPU instance UUID, the mdev UUID or a PCI address.
	VMs map[string]Tenant
	// Labels map a pod label to a tenant, in file order: the first rule
	// a pod's labels match wins, before its namespace is looked at.
	Labels []LabelRule
}

// LabelRule maps pods carrying label Key=Value to a tenant.
type LabelRule struct {
	Key, Value string
	Tenant     Tenant
}

// Tenancy resolves pods, namespaces and accounts to tenants.
type Tenancy struct {
	Mapping Mapping
	// Pods looks up a pod's labels for the label rules; nil when no source
	// of labels is configured (PodResources carries none).
	Pods PodLabeler
	// NamespaceIsTenant makes an unmapped namespace its own tenant;
	// otherwise its pods' usage is unattributed (workload kept).
	NamespaceIsTenant bool
	// AccountIsTenant does the same for Slurm accounts.
	AccountIsTenant bool
}

// Namespace resolves a Kubernetes namespace.
func (t Tenancy) Namespace(ns string) (Tenant, bool) {
	return resolve(t.Mapping.Namespaces, ns, t.NamespaceIsTenant)
}

// resolve looks name up in mapped; an unmapped name is a tenant of its own
// when nameIsTenant, else nobody's.
func resolve(mapped map[string]Tenant, name string, nameIsTenant bool) (Tenant, bool) {
	if v, ok := mapped[name]; ok {
		return v, true
	}
	if nameIsTenant && name != "" {
		return Tenant{Name: name}, true
	}
	return Tenant{}, false
}

// PodLabeler gives the labels of a pod, ok false when it does not know it.
type PodLabeler interface {
	PodLabels(namespace, name string) (map[string]string, bool)
}

// Pod resolves a Kubernetes pod: the first label rule its labels match,
// else its namespace.
func (t Tenancy) Pod(namespace, name string) (Tenant, bool) {
	if len(t.Mapping.Labels) > 0 && t.Pods != nil {
		if labels, ok := t.Pods.PodLabels(namespace, name); ok {
			for _, r := range t.Mapping.Labels {
				if v, has := labels[r.Key]; has && v == r.Value {
					return r.Tenant, true
				}
			}
		}
	}
	return t.Namespace(namespace)
}

// Account resolves a Slurm account.
func (t Tenancy) Account(account string) (Tenant, bool) {
	return resolve(t.Mapping.Accounts, account, t.AccountIsTenant)
}

func (t Tenant) owner(workload string) collectors.Owner {
	return collectors.Owner{Tenant: t.Name, Department: t.Department, Workload: workload}
}

// LoadMapping reads a map file.
func LoadMapping(path string) (Mapping, error) {
	f, err := os.Open(path)
	if err != nil {
		return Mapping{}, fmt.Errorf("open map file: %w", err)
	}
	defer f.Close()
	m, err := ParseMapping(f)
	if err != nil {
		return Mapping{}, fmt.Errorf("map file %s: %w", path, err)
	}
	return m, nil
}

// ParseMapping reads the map file format: one entry per line,
//
//	<kind> <key> <tenant> [department]
//
// where kind is device (a GPU or MIG UUID), namespace, account, label
// (key=value of a pod label; rules apply in file order, before namespace
// entries) or vm (a virtual machine by its id, UUID, vGPU or mdev UUID,
// or PCI address; see VMKey); fields are separated by blanks and '#'
// starts a comment. Every problem is reported with its line number; a file
// with any problem changes nothing.
func ParseMapping(r io.Reader) (Mapping, error) {
	m := Mapping{Devices: map[string]Tenant{}, Namespaces: map[string]Tenant{}, Accounts: map[string]Tenant{}, VMs: map[string]Tenant{}}
	var errs []error
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		if i := strings.IndexByte(text, '#'); i >= 0 {
			text = text[:i]
		}
		f := strings.Fields(text)
		if len(f) == 0 {
			continue
		}
		if len(f) < 3 || len(f) > 4 {
			errs = append(errs, fmt.Errorf("line %d: want <kind> <key> <tenant> [department], got %d fields", line, len(f)))
			continue
		}
		t := Tenant{Name: f[2]}
		if len(f) == 4 {
			t.Department = f[3]
		}
		if t.Name == collectors.UnattributedTenant {
			errs = append(errs, fmt.Errorf("line %d: tenant %q is reserved", line, t.Name))
			continue
		}
		var dst map[string]Tenant
		switch f[0] {
		case "label":
			k, v, ok := strings.Cut(f[1], "=")
			if !ok || k == "" {
				errs = append(errs, fmt.Errorf("line %d: label %q: want key=value", line, f[1]))
				continue
			}
			if slices.ContainsFunc(m.Labels, func(r LabelRule) bool { return r.Key == k && r.Value == v }) {
				errs = append(errs, fmt.Errorf("line %d: label %q mapped twice", line, f[1]))
				continue
			}
			m.Labels = append(m.Labels, LabelRule{Key: k, Value: v, Tenant: t})
			continue
		case "device":
			dst = m.Devices
		case "namespace":
			dst = m.Namespaces
		case "account":
			dst = m.Accounts
		case "vm":
			dst = m.VMs
			key, err := parseVMKey(f[1])
			if err != nil {
				errs = append(errs, fmt.Errorf("line %d: vm key: %w", line, err))
				continue
			}
			f[1] = key
		default:
			errs = append(errs, fmt.Errorf("line %d: unknown kind %q (want device, namespace, account, label or vm)", line, f[0]))
			continue
		}
		if _, dup := dst[f[1]]; dup {
			errs = append(errs, fmt.Errorf("line %d: %s %q mapped twice", line, f[0], f[1]))
			continue
		}
		dst[f[1]] = t
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, fmt.Errorf("read: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return Mapping{}, err
	}
	return m, m.Validate()
}

// Validate reports every entry without a key or tenant, with the reserved
// tenant, with blanks in a name (which the file format cannot hold), or a
// vm key not in VMKey's form.
func (m Mapping) Validate() error {
	var errs []error
	for kind, table := range map[string]map[string]Tenant{"device": m.Devices, "namespace": m.Namespaces, "account": m.Accounts, "vm": m.VMs} {
		for key, t := range table {
			switch {
			case key == "" || t.Name == "":
				errs = append(errs, fmt.Errorf("%s %q: key and tenant are required", kind, key))
			case t.Name == collectors.UnattributedTenant:
				errs = append(errs, fmt.Errorf("%s %q: tenant %q is reserved", kind, key, t.Name))
			case strings.ContainsFunc(key+t.Name+t.Department, unicode.IsSpace):
				errs = append(errs, fmt.Errorf("%s %q: names may not hold blanks", kind, key))
			}
		}
	}
	// Lookups normalize their keys (VMKey): a rule kept in another form,
	// built in code rather than parsed, would never match.
	for key := range m.VMs {
		if k, err := parseVMKey(key); err != nil {
			errs = append(errs, fmt.Errorf("vm %q: %w", key, err))
		} else if k != key {
			errs = append(errs, fmt.Errorf("vm %q: key not in canonical form %q", key, k))
		}
	}
	for _, r := range m.Labels {
		switch {
		case r.Key == "" || r.Tenant.Name == "":
			errs = append(errs, fmt.Errorf("label %q: key and tenant are required", r.Key+"="+r.Value))
		case r.Tenant.Name == collectors.UnattributedTenant:
			errs = append(errs, fmt.Errorf("label %q: tenant %q is reserved", r.Key+"="+r.Value, r.Tenant.Name))
		case strings.ContainsFunc(r.Key+r.Value+r.Tenant.Name+r.Tenant.Department, unicode.IsSpace):
			errs = append(errs, fmt.Errorf("label %q: names may not hold blanks", r.Key+"="+r.Value))
		}
	}
	return errors.Join(errs...)
}

// Static attributes devices from the map file: a GPU or MIG device mapped
// to a tenant is claimed by it (its unused time is the tenant's, as with a
// rented GPU), and processes on it that nothing else attributed are the
// tenant's too. A GPU's entry also covers its MIG devices.
type Static struct {
	devices map[string]Tenant
}

// NewStatic returns the static attributor for m.
func NewStatic(m Mapping) *Static { return &Static{devices: m.Devices} }

// Attribute claims mapped devices that nothing claimed yet.
func (s *Static) Attribute(_ context.Context, gpus []collectors.GPUReading) error {
	if len(s.devices) == 0 {
		return nil
	}
	for gi := range gpus {
		g := &gpus[gi]
		gpuTenant, gpuMapped := s.devices[g.GPU.UUID]
		if !g.MIG {
			if !gpuMapped {
				continue
			}
			if len(g.Claims) == 0 {
				g.Claims = []collectors.Owner{gpuTenant.owner("")}
			}
			fillProcesses(g, "", gpuTenant)
			continue
		}
		for ii := range g.Instances {
			in := &g.Instances[ii]
			t, ok := s.devices[in.UUID]
			if !ok {
				t, ok = gpuTenant, gpuMapped
			}
			if !ok {
				continue
			}
			if len(in.Claims) == 0 {
				in.Claims = []collectors.Owner{t.owner("")}
			}
			fillProcesses(g, in.UUID, t)
		}
	}
	return nil
}

// fillProcesses gives the processes of one slot without a tenant the
// tenant t, keeping a workload an earlier attributor found.
func fillProcesses(g *collectors.GPUReading, migUUID string, t Tenant) {
	for i := range g.Processes {
		p := &g.Processes[i]
		if p.MIGUUID == migUUID && p.Owner.Tenant == "" {
			p.Owner.Tenant, p.Owner.Department = t.Name, t.Department
		}
	}
}
