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
	"unicode"

	"github.com/gpumeter/gpumeter/collectors"
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
	File string
	Name string
	// ID is the numeric domain id of a running VM, known only from its
	// status file (a definition in /etc/libvirt/qemu has none).
	ID     string
	UUID   string // lowercase
	Tenant Tenant // from the gpumeter metadata; empty without it
	// Mdevs are the mediated devices (vGPUs) it holds, lowercase UUIDs;
	// PCIs the PCI devices passed through to it, in VMKey's form.
	Mdevs []string
	PCIs  []string
}

type domainXML struct {
	XMLName  xml.Name `xml:"domain"`
	ID       string   `xml:"id,attr"` // only in a running VM's status file
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

// ParseDomain reads one libvirt domain XML document: a <domain> as in
// /etc/libvirt/qemu, or libvirt's run-time status file (/run/libvirt/qemu)
// whose <domstatus> wraps the <domain> of a running VM.
func ParseDomain(r io.Reader) (Domain, error) {
	dec := xml.NewDecoder(io.LimitReader(r, maxDomainXML))
	x, err := decodeDomain(dec)
	if err != nil {
		var syntax *xml.SyntaxError
		switch {
		case errors.Is(err, io.EOF):
			return Domain{}, errors.New("no <domain> element")
		case errors.As(err, &syntax):
			return Domain{}, err // names its line already
		}
		line, _ := dec.InputPos()
		return Domain{}, fmt.Errorf("line %d: %w", line, err)
	}
	d := Domain{Name: strings.TrimSpace(x.Name), ID: strings.TrimSpace(x.ID), UUID: strings.ToLower(strings.TrimSpace(x.UUID))}
	if d.Name == "" {
		return Domain{}, errors.New("domain without a <name>")
	}
	// A UUID we cannot read would silently never match NVML's VM id.
	if d.UUID != "" && !isUUID(d.UUID) {
		return Domain{}, fmt.Errorf("domain %s: <uuid> %q is not a UUID", d.Name, d.UUID)
	}
	owners := 0
	for _, o := range x.Metadata.Owner {
		if o.XMLName.Space != LibvirtNamespace || o.XMLName.Local != "owner" {
			continue // other tools' metadata
		}
		// libvirt keeps one element per namespace; two are a hand edit
		// whose intent we cannot guess.
		if owners++; owners > 1 {
			return Domain{}, fmt.Errorf("domain %s: more than one gpumeter:owner element", d.Name)
		}
		d.Tenant = Tenant{Name: strings.TrimSpace(o.Tenant), Department: strings.TrimSpace(o.Department)}
		if d.Tenant.Name == "" {
			return Domain{}, fmt.Errorf("domain %s: gpumeter:owner without a gpumeter:tenant", d.Name)
		}
		// The map file's rules for names (a domain name may hold blanks;
		// a tenant may not, anywhere).
		switch {
		case d.Tenant.Name == collectors.UnattributedTenant:
			return Domain{}, fmt.Errorf("domain %s: gpumeter:owner: tenant %q is reserved", d.Name, d.Tenant.Name)
		case strings.ContainsFunc(d.Tenant.Name+d.Tenant.Department, unicode.IsSpace):
			return Domain{}, fmt.Errorf("domain %s: gpumeter:owner: tenant %q, department %q: names may not hold blanks", d.Name, d.Tenant.Name, d.Tenant.Department)
		}
	}
	for _, h := range x.Devices.Hostdevs {
		a := h.Source.Address
		switch h.Type {
		case "mdev":
			if a.UUID == "" {
				continue
			}
			if !isUUID(a.UUID) {
				return Domain{}, fmt.Errorf("domain %s: mdev hostdev: %q is not a UUID", d.Name, a.UUID)
			}
			d.Mdevs = append(d.Mdevs, strings.ToLower(a.UUID))
		case "pci":
			if a.Domain == "" {
				a.Domain = "0" // libvirt's default PCI domain
			}
			key, err := libvirtPCI(a.Domain, a.Bus, a.Slot, a.Function)
			if err != nil {
				return Domain{}, fmt.Errorf("domain %s: pci hostdev: %w", d.Name, err)
			}
			d.PCIs = append(d.PCIs, key)
		}
	}
	return d, nil
}

// decodeDomain finds the <domain> element, at the root or as a child of
// a root <domstatus>, and decodes it.
func decodeDomain(dec *xml.Decoder) (domainXML, error) {
	var x domainXML
	inStatus := false
	for {
		tok, err := dec.Token()
		if err != nil {
			return x, err
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		switch {
		case se.Name.Local == "domain":
			return x, dec.DecodeElement(&x, &se)
		case inStatus:
			if err := dec.Skip(); err != nil { // the status's other parts
				return x, err
			}
		case se.Name.Local == "domstatus":
			inStatus = true
		default:
			return x, fmt.Errorf("root element <%s>, want <domain> or <domstatus>", se.Name.Local)
		}
	}
}

// libvirtPCI turns libvirt's address attributes (0x-prefixed hex) into
// VMKey's PCI form.
func libvirtPCI(domain, bus, slot, function string) (string, error) {
	var v [4]uint64
	for i, s := range []string{domain, bus, slot, function} {
		n, err := strconv.ParseUint(strings.TrimPrefix(strings.ToLower(s), "0x"), 16, 32)
		if err != nil {
			return "", fmt.Errorf("PCI address %s:%s:%s.%s: %w", domain, bus, slot, function, err)
		}
		v[i] = n
	}
	if v[0] > 0xffff || v[1] > 0xff || v[2] > 0x1f || v[3] > 7 {
		return "", fmt.Errorf("PCI address %s:%s:%s.%s: out of range", domain, bus, slot, function)
	}
	return fmt.Sprintf("%04x:%02x:%02x.%x", v[0], v[1], v[2], v[3]), nil
}

// LibvirtDomains reads the domain XML files of a directory such as
// /etc/libvirt/qemu. At most once per RecheckEvery (0: at every call) it
// lists the directory and reads again only the files whose size or
// modification time changed, so a poll costs one stat per domain.
type LibvirtDomains struct {
	Dir          string
	RecheckEvery time.Duration

	mu      sync.Mutex
	checked time.Time
	files   map[string]domainFile
	domains []Domain
	err     error // the problems of the last check, reported until fixed
}

// domainFile is what one file held when it was last read.
type domainFile struct {
	size    int64
	modTime time.Time
	domain  Domain
	ok      bool  // domain was read from this file at some point
	err     error // the file as it is now does not parse
}

// NewLibvirtDomains watches dir, re-listing it at most every 10 s.
func NewLibvirtDomains(dir string) *LibvirtDomains {
	return &LibvirtDomains{Dir: dir, RecheckEvery: 10 * time.Second}
}

// Domains returns the domains as of the last check, in file name order.
// A file that does not parse is an error naming it, returned at every
// check until it is fixed or removed; meanwhile the domain last read from
// it (if any) stays in use, and the other files are read as usual, so one
// broken file cannot hide new VMs.
func (l *LibvirtDomains) Domains(now time.Time) ([]Domain, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.checked.IsZero() && l.RecheckEvery > 0 && now.Sub(l.checked) < l.RecheckEvery {
		return l.domains, l.err
	}
	l.checked = now
	paths, err := filepath.Glob(filepath.Join(l.Dir, "*.xml"))
	if err != nil { // only a malformed pattern, i.e. a Dir with glob syntax
		l.err = fmt.Errorf("libvirt dir %s: %w", l.Dir, err)
		return l.domains, l.err
	}
	if len(paths) == 0 {
		// Glob hides a missing or unreadable directory: say so.
		if _, err := os.ReadDir(l.Dir); err != nil {
			l.err = fmt.Errorf("libvirt dir: %w", err)
			return l.domains, l.err
		}
	}
	slices.Sort(paths)
	files := make(map[string]domainFile, len(paths))
	var out []Domain
	var errs []error
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil || st.IsDir() {
			continue // removed since the listing, or not a file
		}
		f, seen := l.files[p]
		if !seen || f.size != st.Size() || !f.modTime.Equal(st.ModTime()) {
			d, err := readDomain(p)
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			f.size, f.modTime, f.err = st.Size(), st.ModTime(), err
			if err == nil {
				f.domain, f.ok = d, true
			}
		}
		files[p] = f
		if f.err != nil {
			errs = append(errs, f.err)
		}
		if f.ok {
			out = append(out, f.domain)
		}
	}
	l.files, l.domains, l.err = files, out, errors.Join(errs...)
	return l.domains, l.err
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
