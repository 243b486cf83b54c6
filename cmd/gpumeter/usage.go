package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/pricing"
)

func runUsage(ctx context.Context, g *globals, args []string) error {
	fs := flag.NewFlagSet("usage", flag.ContinueOnError)
	fs.SetOutput(g.stderr)
	from := fs.String("from", "", "start of the range, RFC 3339 or YYYY-MM-DD (required)")
	to := fs.String("to", "", "end of the range, exclusive (default: now)")
	by := fs.String("by", "tenant", "comma-separated grouping: tenant, department, sku")
	bucket := fs.String("bucket", "", "time bucket: hour, day or month (default: whole range)")
	tenant := fs.String("tenant", "", "only this tenant")
	department := fs.String("department", "", "only this department")
	source := fs.String("source", "raw", "raw (deduplicated samples) or hourly (rollups)")
	asJSON := fs.Bool("json", false, "JSON output")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageErrorf("unexpected arguments %v", fs.Args())
	}
	q := store.UsageQuery{Bucket: store.Bucket(*bucket), Tenant: *tenant, Department: *department, Source: store.Source(*source)}
	var err error
	if q.From, err = parseTime(*from); err != nil {
		return usageErrorf("--from: %v", err)
	}
	if *to == "" {
		q.To = time.Now().UTC()
	} else if q.To, err = parseTime(*to); err != nil {
		return usageErrorf("--to: %v", err)
	}
	if *by != "" {
		for _, d := range strings.Split(*by, ",") {
			q.GroupBy = append(q.GroupBy, store.Dimension(strings.TrimSpace(d)))
		}
	}
	if err := q.Validate(); err != nil {
		return usageError{err}
	}
	s, err := openStore(ctx, g)
	if err != nil {
		return err
	}
	defer s.Close()
	rows, err := s.Usage(ctx, q)
	if errors.Is(err, store.ErrTimeOutOfRange) {
		return usageError{err}
	}
	if err != nil {
		return err
	}
	if *asJSON {
		return writeUsageJSON(g.stdout, rows)
	}
	writeUsageTable(g.stdout, rows, q)
	return nil
}

func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, fmt.Errorf("required")
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t.UTC(), nil
	}
	t, err := time.Parse(time.DateOnly, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q: want RFC 3339 or YYYY-MM-DD", s)
	}
	return t, nil
}

type usageJSON struct {
	Bucket         *time.Time `json:"bucket,omitempty"`
	Tenant         string     `json:"tenant,omitempty"`
	Department     string     `json:"department,omitempty"`
	SKU            string     `json:"sku,omitempty"`
	Samples        uint64     `json:"samples"`
	GPUHours       string     `json:"gpu_hours"`
	SMActiveHours  string     `json:"sm_active_hours"`
	MemoryGiBHours string     `json:"memory_gib_hours"`
	EnergyKWh      string     `json:"energy_kwh"`
	PCIeGiB        string     `json:"pcie_gib"`
	NVLinkGiB      string     `json:"nvlink_gib"`
	// Unmeasured: GPU-hours whose samples had no measurement of a meter.
	Unmeasured map[string]string `json:"unmeasured_gpu_hours,omitempty"`
}

// quantities pairs each price-book meter with the row's quantity of it.
func (j usageJSON) quantities() []struct {
	meter    pricing.Meter
	quantity string
} {
	return []struct {
		meter    pricing.Meter
		quantity string
	}{{pricing.GPUHours, j.GPUHours}, {pricing.SMActiveHours, j.SMActiveHours}, {pricing.MemoryGiBHours, j.MemoryGiBHours},
		{pricing.EnergyKWh, j.EnergyKWh}, {pricing.PCIeGiB, j.PCIeGiB}, {pricing.NVLinkGiB, j.NVLinkGiB}}
}

func writeUsageJSON(w io.Writer, rows []store.UsageRow) error {
	out := make([]usageJSON, 0, len(rows))
	for _, r := range rows {
		j := usageJSON{Tenant: r.Tenant, Department: r.Department, SKU: r.SKU, Samples: r.Samples,
			GPUHours: r.GPUHours().String(), SMActiveHours: r.SMActiveHours().String(),
			MemoryGiBHours: r.MemoryGiBHours().String(), EnergyKWh: r.EnergyKWh().String(),
			PCIeGiB: r.PCIeGiB().String(), NVLinkGiB: r.NVLinkGiB().String()}
		for name, us := range map[string]uint64{"sm_active": r.Unmeasured.SMActive, "energy": r.Unmeasured.Energy,
			"pcie": r.Unmeasured.PCIe, "nvlink": r.Unmeasured.NVLink} {
			if us > 0 {
				if j.Unmeasured == nil {
					j.Unmeasured = map[string]string{}
				}
				j.Unmeasured[name] = store.Meters{Meters: collectors.Meters{GPUMicroseconds: us}}.GPUHours().String()
			}
		}
		if !r.Bucket.IsZero() {
			b := r.Bucket
			j.Bucket = &b
		}
		out = append(out, j)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func writeUsageTable(w io.Writer, rows []store.UsageRow, q store.UsageQuery) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	var cols []string
	if q.Bucket != store.BucketNone {
		cols = append(cols, "BUCKET")
	}
	has := map[store.Dimension]bool{}
	for _, d := range q.GroupBy {
		has[d] = true
	}
	for _, d := range []store.Dimension{store.DimTenant, store.DimDepartment, store.DimSKU} {
		if has[d] {
			cols = append(cols, strings.ToUpper(string(d)))
		}
	}
	cols = append(cols, "SAMPLES", "GPU-HOURS", "SM-ACTIVE-H", "MEM-GIB-H", "ENERGY-KWH", "PCIE-GIB", "NVLINK-GIB")
	fmt.Fprintln(tw, strings.Join(cols, "\t")+"\t")
	var total store.Meters
	var samples uint64
	for _, r := range rows {
		var cells []string
		if q.Bucket != store.BucketNone {
			cells = append(cells, r.Bucket.Format("2006-01-02 15:04"))
		}
		if has[store.DimTenant] {
			cells = append(cells, nameOr(r.Tenant, "(idle)"))
		}
		if has[store.DimDepartment] {
			cells = append(cells, nameOr(r.Department, "(none)"))
		}
		if has[store.DimSKU] {
			cells = append(cells, r.SKU)
		}
		cells = append(cells, meterCells(r.Samples, r.Meters)...)
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
		total = total.Add(r.Meters)
		samples += r.Samples
	}
	if len(rows) > 1 {
		cells := make([]string, len(cols)-7)
		if len(cells) > 0 {
			cells[0] = "TOTAL"
		}
		fmt.Fprintln(tw, strings.Join(append(cells, meterCells(samples, total)...), "\t")+"\t")
	}
	tw.Flush()
}

func meterCells(samples uint64, m store.Meters) []string {
	return []string{fmt.Sprint(samples), m.GPUHours().StringFixed(3), m.SMActiveHours().StringFixed(3),
		m.MemoryGiBHours().StringFixed(1), m.EnergyKWh().StringFixed(3), m.PCIeGiB().StringFixed(2), m.NVLinkGiB().StringFixed(2)}
}

func nameOr(s, empty string) string {
	if s == "" {
		return empty
	}
	return s
}
