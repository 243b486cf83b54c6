package attribution

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// LibvirtNamespace is the XML namespace of gpumeter's element in a libvirt
// domain's <metadata>:
//
//	<metadata>
//	  <gpumeter:owner xmlns:gpumeter="https://gpumeter.dev/xmlns/libvirt/1">
//	    <gpumeter:tenant>acme</gpumeter:tenant>
//	    <gpumeter:department>research</gpumeter:department>
//	  </gpumeter:owner>
//	</metadata>
const LibvirtNamespace = "https://gpumeter.dev/xmlns/libvirt/1"

// Domain is what gpumeter reads of one libvirt domain XML file.
type Domain struct {
	File   string
	Name   string
	UUID   string // lowercase
	Tenant Tenant // from the gpumeter metadata; empty without it
	// Mdevs are the mediated devices (vGPUs) it holds, lowercase UUIDs;
	// PCIs the PCI devices passed through to it, in VMKey's form.
	Mdevs []string
	PCIs  []string
}

type domainXML struct {
	XMLName  xml.Name `xml:"domain"`
	Name     string   `xml:"name"`
	UUID     string   `xml:"uuid"`
	Metadata struct {
		Owner []struct {
			XMLName    xml.Name
			Tenant     string `xml:"tenant"`
			Department string `xml:"department"`
		} `xml:",any"`
	} `xml:"metadata"`
	Devices struct {
		Hostdevs []struct {
			Type   string `xml:"type,attr"`
			Source struct {
				Address struct {
					UUID     string `xml:"uuid,attr"`
					Domain   string `xml:"domain,attr"`
					Bus      string `xml:"bus,attr"`
					Slot     string `xml:"slot,attr"`
					Function string `xml:"function,attr"`
				} `xml:"address"`
			} `xml:"source"`
		} `xml:"hostdev"`
	} `xml:"devices"`
}

// maxDomainXML bounds one domain file: real ones are a few KiB.
const maxDomainXML = 4 << 20

// ParseDomain reads one libvirt domain XML document.
func ParseDomain(r io.Reader) (Domain, error) {
	var x domainXML
	dec := xml.NewDecoder(io.LimitReader(r, maxDomainXML))
	if err := dec.Decode(&x); err != nil {
		line, _ := dec.InputPos()
		return Domain{}, fmt.Errorf("line %d: %w", line, err)
	}
	d := Domain{Name: strings.TrimSpace(x.Name), UUID: strings.ToLower(strings.TrimSpace(x.UUID))}
	if d.Name == "" {
		return Domain{}, errors.New("domain without a <name>")
	}
	for _, o := range x.Metadata.Owner {
		if o.XMLName.Space != LibvirtNamespace || o.XMLName.Local != "owner" {
			continue // other tools' metadata
		}
		d.Tenant = Tenant{Name: strings.TrimSpace(o.Tenant), Department: strings.TrimSpace(o.Department)}
		if d.Tenant.Name == "" {
			return Domain{}, errors.New("gpumeter:owner without a gpumeter:tenant")
		}
		if err := (Mapping{VMs: map[string]Tenant{d.Name: d.Tenant}}).Validate(); err != nil {
			return Domain{}, fmt.Errorf("gpumeter:owner: %w", err)
		}
	}
	for _, h := range x.Devices.Hostdevs {
		a := h.Source.Address
		switch h.Type {
		case "mdev":
			if a.UUID != "" {
				d.Mdevs = append(d.Mdevs, strings.ToLower(a.UUID))
			}
		case "pci":
			key, err := libvirtPCI(a.Domain, a.Bus, a.Slot, a.Function)
			if err != nil {
				return Domain{}, fmt.Errorf("pci hostdev: %w", err)
			}
			d.PCIs = append(d.PCIs, key)
		}
	}
	return d, nil
}

// libvirtPCI turns libvirt's address attributes (0x-prefixed hex) into
// VMKey's PCI form.
func libvirtPCI(domain, bus, slot, function string) (string, error) {
	var v [4]uint64
	for i, s := range []string{domain, bus, slot, function} {
		n, err := strconv.ParseUint(strings.TrimPrefix(strings.ToLower(s), "0x"), 16, 32)
		if err != nil {
			return "", fmt.Errorf("address %s:%s:%s.%s: %w", domain, bus, slot, function, err)
		}
		v[i] = n
	}
	if v[0] > 0xffff || v[1] > 0xff || v[2] > 0x1f || v[3] > 7 {
		return "", fmt.Errorf("address %s:%s:%s.%s out of range", domain, bus, slot, function)
	}
	return fmt.Sprintf("%04x:%02x:%02x.%x", v[0], v[1], v[2], v[3]), nil
}

// LibvirtDomains reads the domain XML files of a directory such as
// /etc/libvirt/qemu, again only when a file changed: at most once per
// RecheckEvery the directory is listed and the files' sizes and times
// compared with the last read.
type LibvirtDomains struct {
	Dir          string
	RecheckEvery time.Duration

	mu      sync.Mutex
	checked time.Time
	stamp   string // names, sizes and mtimes of the files last read
	domains []Domain
}

// NewLibvirtDomains watches dir, re-listing it at most every 10 s.
func NewLibvirtDomains(dir string) *LibvirtDomains {
	return &LibvirtDomains{Dir: dir, RecheckEvery: 10 * time.Second}
}

// Domains returns the domains as of the last change. A file that does not
// parse is an error naming it, and the domains read before stay in use.
func (l *LibvirtDomains) Domains(now time.Time) ([]Domain, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.checked.IsZero() && l.RecheckEvery > 0 && now.Sub(l.checked) < l.RecheckEvery {
		return l.domains, nil
	}
	l.checked = now
	files, err := filepath.Glob(filepath.Join(l.Dir, "*.xml"))
	if err != nil {
		return l.domains, fmt.Errorf("libvirt dir %s: %w", l.Dir, err)
	}
	slices.Sort(files)
	var stamp strings.Builder
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			continue // removed since the listing
		}
		fmt.Fprintf(&stamp, "%s %d %d\n", f, st.Size(), st.ModTime().UnixNano())
	}
	if stamp.String() == l.stamp && l.stamp != "" {
		return l.domains, nil
	}
	var out []Domain
	var errs []error
	for _, f := range files {
		d, err := readDomain(f)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, d)
	}
	if err := errors.Join(errs...); err != nil {
		l.stamp = "" // try again at the next check
		return l.domains, err
	}
	l.domains, l.stamp = out, stamp.String()
	return l.domains, nil
}

func readDomain(path string) (Domain, error) {
	f, err := os.Open(path)
	if err != nil {
		return Domain{}, fmt.Errorf("libvirt domain %s: %w", path, err)
	}
	defer f.Close()
	d, err := ParseDomain(f)
	if err != nil {
		return Domain{}, fmt.Errorf("libvirt domain %s: %w", path, err)
	}
	d.File = path
	return d, nil
}
