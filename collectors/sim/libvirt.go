package sim

import (
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// LibvirtNamespace is the XML namespace of gpumeter's domain metadata.
const LibvirtNamespace = "https://gpumeter.dev/xmlns/libvirt/1"

// LibvirtDir is where the host's libvirt domain XML files are written
// (Root/libvirt/qemu, as /etc/libvirt/qemu); "" without Root.
func (h *Host) LibvirtDir() string {
	if h.cfg.Root == "" {
		return ""
	}
	return h.libvirtDir()
}

func (h *Host) libvirtDir() string { return filepath.Join(h.cfg.Root, "libvirt", "qemu") }

// writeDomain writes a VM's domain XML: name, UUID, gpumeter owner
// metadata when the VM is mapped by metadata, and a host device per vGPU
// (its mdev) and per GPU passed through to it (its PCI address). It is
// replaced atomically, so a reader never sees half a file.
func (h *Host) writeDomain(vm *vmState) error {
	if h.cfg.Root == "" {
		return nil
	}
	var b strings.Builder
	esc := func(s string) string {
		var e strings.Builder
		_ = xml.EscapeText(&e, []byte(s)) // a strings.Builder does not fail
		return e.String()
	}
	b.WriteString("<domain type='kvm'>\n")
	fmt.Fprintf(&b, "  <name>%s</name>\n  <uuid>%s</uuid>\n", esc(vm.Name), esc(vm.UUID))
	if vm.Tenant != "" && vm.Mapping == VMByMetadata {
		b.WriteString("  <metadata>\n")
		fmt.Fprintf(&b, "    <gpumeter:owner xmlns:gpumeter=\"%s\">\n", LibvirtNamespace)
		fmt.Fprintf(&b, "      <gpumeter:tenant>%s</gpumeter:tenant>\n", esc(vm.Tenant))
		if vm.Department != "" {
			fmt.Fprintf(&b, "      <gpumeter:department>%s</gpumeter:department>\n", esc(vm.Department))
		}
		b.WriteString("    </gpumeter:owner>\n  </metadata>\n")
	}
	b.WriteString("  <memory unit='KiB'>67108864</memory>\n  <vcpu placement='static'>16</vcpu>\n")
	b.WriteString("  <os>\n    <type arch='x86_64' machine='pc-q35-8.2'>hvm</type>\n  </os>\n")
	b.WriteString("  <devices>\n    <emulator>/usr/bin/qemu-system-x86_64</emulator>\n")
	gpus := make([]int, 0, len(vm.mdevs))
	for i := range vm.mdevs {
		gpus = append(gpus, i)
	}
	slices.Sort(gpus)
	for _, i := range gpus {
		b.WriteString("    <hostdev mode='subsystem' type='mdev' model='vfio-pci'>\n")
		fmt.Fprintf(&b, "      <source>\n        <address uuid='%s'/>\n      </source>\n", esc(vm.mdevs[i]))
		b.WriteString("    </hostdev>\n")
	}
	if vm.pci != "" {
		domain, bus, slot, fn, err := splitBusID(vm.pci)
		if err != nil {
			return fmt.Errorf("sim host %s: domain %s: %w", h.cfg.Name, vm.Name, err)
		}
		b.WriteString("    <hostdev mode='subsystem' type='pci' managed='yes'>\n")
		fmt.Fprintf(&b, "      <source>\n        <address domain='0x%04x' bus='0x%02x' slot='0x%02x' function='0x%x'/>\n      </source>\n", domain, bus, slot, fn)
		b.WriteString("    </hostdev>\n")
	}
	b.WriteString("  </devices>\n</domain>\n")

	dir := h.libvirtDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("sim host %s: libvirt dir: %w", h.cfg.Name, err)
	}
	path := filepath.Join(dir, vm.Name+".xml")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("sim host %s: domain %s: %w", h.cfg.Name, vm.Name, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("sim host %s: domain %s: %w", h.cfg.Name, vm.Name, err)
	}
	return nil
}

// splitBusID reads NVML's "DDDDDDDD:BB:SS.F" bus id.
func splitBusID(id string) (domain, bus, slot, fn uint64, err error) {
	parts := strings.Split(id, ":")
	if len(parts) != 3 {
		return 0, 0, 0, 0, fmt.Errorf("bus id %q is not domain:bus:slot.function", id)
	}
	slotText, fnText, ok := strings.Cut(parts[2], ".")
	if !ok {
		return 0, 0, 0, 0, fmt.Errorf("bus id %q is not domain:bus:slot.function", id)
	}
	var errs [4]error
	domain, errs[0] = strconv.ParseUint(parts[0], 16, 32)
	bus, errs[1] = strconv.ParseUint(parts[1], 16, 8)
	slot, errs[2] = strconv.ParseUint(slotText, 16, 8)
	fn, errs[3] = strconv.ParseUint(fnText, 16, 8)
	for _, e := range errs {
		if e != nil {
			return 0, 0, 0, 0, fmt.Errorf("bus id %q: %w", id, e)
		}
	}
	return domain, bus, slot, fn, nil
}
