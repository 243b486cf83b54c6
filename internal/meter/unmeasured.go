package meter

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Unmeasured is a set of meters a sample has no measurement for: their
// quantities are 0 because nothing was measured, not because nothing was
// used ("not supported is not zero"). Bit i is Groups[i].
type Unmeasured uint8

// The groups' places in Groups, UnmeasuredTime and the Unmeasured bits.
const (
	GroupSMActive = iota
	GroupEnergy
	GroupPCIe
	GroupNVLink
)

const (
	UnmeasuredSMActive Unmeasured = 1 << GroupSMActive
	UnmeasuredEnergy   Unmeasured = 1 << GroupEnergy
	UnmeasuredPCIe     Unmeasured = 1 << GroupPCIe
	UnmeasuredNVLink   Unmeasured = 1 << GroupNVLink

	// UnmeasuredAll is every flag of Groups.
	UnmeasuredAll Unmeasured = 1<<NumGroups - 1
)

// Group is one flag of Unmeasured: the meters it covers go missing
// together (PCIe's two directions come from one NVML call).
type Group struct {
	Name string // in import files and the API, e.g. "nvlink"
	// Column is usage_hourly's sum of the GPU-microseconds of samples
	// without this measurement.
	Column string
}

// Groups lists the Unmeasured flags in bit order.
var Groups = [...]Group{
	GroupSMActive: {Name: "sm_active", Column: "sm_unmeasured_microseconds"},
	GroupEnergy:   {Name: "energy", Column: "energy_unmeasured_microseconds"},
	GroupPCIe:     {Name: "pcie", Column: "pcie_unmeasured_microseconds"},
	GroupNVLink:   {Name: "nvlink", Column: "nvlink_unmeasured_microseconds"},
}

// NumGroups is the number of Unmeasured flags (at most 8: a UInt8 column).
const NumGroups = len(Groups)

var _ [8 - NumGroups]struct{} // Unmeasured is a uint8

// Flag is group i's bit.
func Flag(i int) Unmeasured { return 1 << i }

// Has reports whether every meter of m is unmeasured.
func (u Unmeasured) Has(m Unmeasured) bool { return u&m == m }

// String lists the groups, e.g. "energy;nvlink" (the import format).
func (u Unmeasured) String() string {
	var parts []string
	for i, g := range Groups {
		if u.Has(Flag(i)) {
			parts = append(parts, g.Name)
		}
	}
	return strings.Join(parts, ";")
}

// ParseUnmeasured reads a ';'-separated list of group names; an empty
// string is none.
func ParseUnmeasured(s string) (Unmeasured, error) {
	var u Unmeasured
	for _, part := range strings.Split(s, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		found := false
		for i, g := range Groups {
			if g.Name == part {
				u |= Flag(i)
				found = true
			}
		}
		if !found {
			return 0, fmt.Errorf("unknown meter %q (want %s, separated by ';')", part, groupNames())
		}
	}
	return u, nil
}

func groupNames() string {
	var b strings.Builder
	for i, g := range Groups {
		switch {
		case i == len(Groups)-1:
			b.WriteString(" or ")
		case i > 0:
			b.WriteString(", ")
		}
		b.WriteString(g.Name)
	}
	return b.String()
}

// UnmeasuredTime is, per Unmeasured group, the GPU-microseconds whose
// samples had no measurement of it: a meter's total covers the rest only.
type UnmeasuredTime [NumGroups]uint64

// Add sums two.
func (t UnmeasuredTime) Add(o UnmeasuredTime) UnmeasuredTime {
	for i := range t {
		t[i] += o[i]
	}
	return t
}

// Of is the unmeasured time of one sample: its GPU time under each flag
// it carries.
func Of(u Unmeasured, gpuMicroseconds uint64) UnmeasuredTime {
	var t UnmeasuredTime
	for i := range t {
		if u.Has(Flag(i)) {
			t[i] = gpuMicroseconds
		}
	}
	return t
}

// MarshalJSON writes the time as an object keyed by group name
// ({"sm_active": 0, "energy": 3600000000, ...}), every group present.
func (t UnmeasuredTime) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	for i, g := range Groups {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, "%q:%d", g.Name, t[i])
	}
	return append(b, '}'), nil
}

// UnmarshalJSON reads an object keyed by group name; a group left out is
// 0, an unknown name is an error.
func (t *UnmeasuredTime) UnmarshalJSON(b []byte) error {
	var m map[string]uint64
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	*t = UnmeasuredTime{}
	for name, v := range m {
		i := slices.IndexFunc(Groups[:], func(g Group) bool { return g.Name == name })
		if i < 0 {
			return fmt.Errorf("unmeasured: unknown meter %q (want %s)", name, groupNames())
		}
		t[i] = v
	}
	return nil
}
