package reports

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/insights"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/internal/sacct"
	"github.com/gpumeter/gpumeter/internal/webhook"
	"github.com/gpumeter/gpumeter/pricing"
	"github.com/gpumeter/gpumeter/reports/output"
)

// The listing commands print here, in the format their -o asks for. A
// command whose table text came before the shared style (and is read by
// scripts and tests) keeps it for -o table; every other format, and
// every table that had no such text, goes through package output. JSON
// is what each command's --json printed, and YAML the same keys.

// write prints l, or calls table for the table format when the listing
// keeps an older table text.
func write(w io.Writer, f output.Format, l output.Listing, table func() error) error {
	if f == output.Table && table != nil {
		return table()
	}
	return output.Write(w, f, l)
}

func cols(names ...string) []output.Column {
	out := make([]output.Column, len(names))
	for i, n := range names {
		// A trailing '#' marks a number (right-aligned), a leading '+' a
		// wide-only column.
		if strings.HasPrefix(n, "+") {
			n, out[i].Wide = n[1:], true
		}
		if strings.HasSuffix(n, "#") {
			n, out[i].Number = n[:len(n)-1], true
		}
		out[i].Name = n
	}
	return out
}

// UsageListing is the usage rows (not the total) as a listing; its items
// are the JSON rows quote --usage reads.
func UsageListing(t UsageTable) output.Listing {
	var names []string
	if t.ByBucket {
		names = append(names, "bucket")
	}
	for _, g := range t.groups(pricing.UsageRecord{}) {
		names = append(names, g.name)
	}
	names = append(names, "samples#")
	for _, m := range meter.PricedMeters {
		names = append(names, m.Header+"#")
	}
	items := t.Rows
	if items == nil {
		items = []pricing.UsageRecord{}
	}
	l := output.Listing{Columns: cols(names...), Items: items}
	for _, r := range t.Rows {
		var row []string
		if t.ByBucket {
			if r.Bucket != nil {
				row = append(row, output.Time(*r.Bucket))
			} else {
				row = append(row, "")
			}
		}
		for _, g := range t.groups(r) {
			row = append(row, g.value)
		}
		l.Rows = append(l.Rows, append(row, meterCells(r)...))
	}
	return l
}

// WriteUsage prints a usage summary: the table keeps WriteUsageTable's
// text (with its total row).
func WriteUsage(w io.Writer, f output.Format, t UsageTable) error {
	return write(w, f, UsageListing(t), func() error { return WriteUsageTable(w, t) })
}

// keyItem is a key as JSON and YAML print it: never its secret's hash.
type keyItem struct {
	ID        string `json:"id"`
	Scope     string `json:"scope"`
	Kind      string `json:"kind"`
	CreatedAt string `json:"created_at"`
	ExpiresAt string `json:"expires_at,omitempty"`
	RevokedAt string `json:"revoked_at,omitempty"`
	Note      string `json:"note,omitempty"`
}

// WriteKeysAs prints keys; the table keeps WriteKeys's text.
func WriteKeysAs(w io.Writer, f output.Format, keys []auth.Key) error {
	l := output.Listing{Columns: cols("id", "scope", "kind", "created", "expires", "revoked", "note")}
	items := []keyItem{}
	for _, k := range keys {
		kind := "api"
		if k.Portal {
			kind = "portal"
		}
		it := keyItem{k.ID, k.Scope.String(), kind, output.Time(k.CreatedAt), output.Time(k.ExpiresAt), output.Time(k.RevokedAt), k.Note}
		items = append(items, it)
		l.Rows = append(l.Rows, []string{it.ID, it.Scope, it.Kind, it.CreatedAt, it.ExpiresAt, it.RevokedAt, it.Note})
	}
	l.Items = items
	return write(w, f, l, func() error { return WriteKeys(w, keys) })
}

// WriteInvoiceList prints stored invoices; JSON and YAML are their
// canonical documents.
func WriteInvoiceList(w io.Writer, f output.Format, invs []billing.StoredInvoice) error {
	l := output.Listing{Columns: cols("period", "tenant", "id", "number", "status", "total#", "currency")}
	docs := make([]json.RawMessage, 0, len(invs))
	for _, si := range invs {
		inv := si.Invoice
		docs = append(docs, si.Document)
		l.Rows = append(l.Rows, []string{inv.PeriodLabel, inv.Tenant, inv.ID, dash(inv.Number), string(inv.Status),
			inv.Money(inv.TotalMinor), inv.Currency.Code})
	}
	l.Items = docs
	return output.Write(w, f, l)
}

// Outcome is one customer's outcome of an invoice run, as JSON prints it.
type Outcome struct {
	Tenant string `json:"tenant"`
	Action string `json:"action"`
	ID     string `json:"invoice_id,omitempty"`
	Number string `json:"number,omitempty"`
	Total  string `json:"total,omitempty"`
	Curr   string `json:"currency,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// Outcomes is an invoice run's report as JSON prints it.
type Outcomes struct {
	Outcomes     []Outcome `json:"outcomes"`
	ClosedMonths []string  `json:"closed_months"`
}

// OutcomesOf is rep as JSON prints it.
func OutcomesOf(rep billing.Report) Outcomes {
	out := Outcomes{Outcomes: []Outcome{}, ClosedMonths: []string{}}
	for _, o := range rep.Outcomes {
		j := Outcome{Tenant: o.Tenant, Action: o.Action, Detail: o.Detail}
		if inv := o.Invoice; inv != nil {
			j.ID, j.Number, j.Total, j.Curr = inv.ID, inv.Number, inv.Money(inv.TotalMinor), inv.Currency.Code
		}
		out.Outcomes = append(out.Outcomes, j)
	}
	for _, m := range rep.ClosedMonths {
		out.ClosedMonths = append(out.ClosedMonths, m.Format("2006-01"))
	}
	return out
}

// WriteOutcomes prints an invoice run's outcomes; the table keeps the
// run's text: a line per customer, then the counts.
func WriteOutcomes(w io.Writer, f output.Format, rep billing.Report) error {
	doc := OutcomesOf(rep)
	l := output.Listing{Columns: cols("tenant", "action", "+invoice id", "number", "total#", "currency", "detail"), Items: doc}
	for _, o := range doc.Outcomes {
		l.Rows = append(l.Rows, []string{o.Tenant, o.Action, o.ID, o.Number, o.Total, o.Curr, o.Detail})
	}
	return write(w, f, l, func() error {
		ew := &errWriter{w: w}
		for _, o := range rep.Outcomes {
			fmt.Fprintln(ew, o)
		}
		fmt.Fprintln(ew, summarize(rep))
		return ew.err
	})
}

// summarize counts outcomes by action.
func summarize(rep billing.Report) string {
	counts := map[string]int{}
	for _, o := range rep.Outcomes {
		counts[o.Action]++
	}
	var parts []string
	for _, a := range []string{billing.ActionFinalized, billing.ActionCreated, billing.ActionUpdated, billing.ActionUnchanged,
		billing.ActionWaiting, billing.ActionFailed} {
		if counts[a] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[a], a))
		}
	}
	s := fmt.Sprintf("%d customer(s): %s", len(rep.Outcomes), strings.Join(parts, ", "))
	for _, m := range rep.ClosedMonths {
		s += fmt.Sprintf("; closed %s (UTC)", m.Format("2006-01"))
	}
	return s
}

// eventItem is an outbox event with its deliveries, as JSON prints it.
type eventItem struct {
	ID         string             `json:"id"`
	Type       string             `json:"type"`
	CreatedAt  string             `json:"created_at"`
	Deliveries []webhook.Delivery `json:"deliveries"`
}

// WriteEvents prints the outbox: each event and where it stands with
// every endpoint (of c) that wants it.
func WriteEvents(w io.Writer, f output.Format, evs []webhook.Status, c webhook.Config) error {
	l := output.Listing{Columns: cols("event", "type", "created", "deliveries")}
	items := []eventItem{}
	for _, st := range evs {
		ds := c.Deliveries(st)
		var parts []string
		for _, d := range ds {
			switch d.State {
			case "delivered":
				parts = append(parts, fmt.Sprintf("%s: delivered (%d attempts)", d.Endpoint, d.Attempts))
			case "failed":
				parts = append(parts, fmt.Sprintf("%s: failed after %d attempts (replay it)", d.Endpoint, d.Attempts))
			default:
				parts = append(parts, fmt.Sprintf("%s: pending (%d attempts)", d.Endpoint, d.Attempts))
			}
		}
		if len(parts) == 0 {
			parts = []string{"no endpoint wants it"}
		}
		if ds == nil {
			ds = []webhook.Delivery{}
		}
		it := eventItem{st.Event.ID, st.Event.Type, output.Time(st.Event.CreatedAt), ds}
		items = append(items, it)
		l.Rows = append(l.Rows, []string{it.ID, it.Type, it.CreatedAt, strings.Join(parts, "; ")})
	}
	l.Items = items
	return output.Write(w, f, l)
}

func gpuHours(us int64) string { return insights.GPUHours(us).StringFixed(2) }

func share(f float64, ok bool) string {
	if !ok {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*f)
}

func money(m *insights.Money) string {
	if m == nil {
		return "-"
	}
	return m.Amount.String() + " " + m.Currency
}

// WriteEfficiency prints held and held-but-idle GPU time per tenant and
// department, then the fleet's.
func WriteEfficiency(w io.Writer, f output.Format, rep insights.EfficiencyReport) error {
	l := output.Listing{Columns: cols("tenant", "department", "held GPU-h#", "utilization#", "unmeasured GPU-h#",
		"idle GPU-h#", "idle share#", "idle cost#"), Items: rep}
	for _, t := range rep.Tenants {
		l.Rows = append(l.Rows, []string{t.Tenant, t.Department, gpuHours(t.HeldGPUMicros), share(t.Utilization()),
			gpuHours(t.UnmeasuredGPUMicros), gpuHours(t.IdleGPUMicros), share(t.IdleShare()), money(t.IdleCost)})
	}
	fl := rep.Fleet
	l.Rows = append(l.Rows, []string{"fleet", "", gpuHours(fl.HeldGPUMicros), share(fl.Utilization()),
		gpuHours(fl.UnmeasuredGPUMicros), gpuHours(fl.IdleGPUMicros), share(fl.IdleShare()), ""})
	return output.Write(w, f, l)
}

// WriteRightSize prints each tenant's verdict; the tables add the layout
// of the right-sized MIG demand.
func WriteRightSize(w io.Writer, f output.Format, rep insights.RightSizeReport) error {
	l := output.Listing{Columns: cols("tenant", "current", "action", "recommended", "mem p99 GB#", "SM p99 GPUs#",
		"saved GPU-h#", "saving#", "reason"), Items: rep}
	for _, r := range rep.Tenants {
		rec := "-"
		if r.Action == insights.Downsize {
			rec = r.Recommended.SKU
		}
		l.Rows = append(l.Rows, []string{r.Tenant, r.Current.SKU, string(r.Action), rec, fmt.Sprintf("%.1f", float64(r.MemBytes)/1e9),
			fmt.Sprintf("%.3f", r.SMGPUs), gpuHours(r.SavedGPUMicros), money(r.Saving), r.Reason})
	}
	if err := output.Write(w, f, l); err != nil {
		return err
	}
	if rep.Plan != nil && (f == output.Table || f == output.Wide) {
		_, err := fmt.Fprintf(w, "\nlayout of the right-sized MIG demand: %d GPUs used, %d instances unmet\n", rep.GPUsUsed, rep.Plan.Summary.UnmetInstanceCount)
		return err
	}
	return nil
}

// WriteAnomalies prints the anomalies found; JSON and YAML hold them
// under "anomalies".
func WriteAnomalies(w io.Writer, f output.Format, as []insights.Anomaly) error {
	l := output.Listing{Columns: cols("id", "tenant", "meter", "+sku", "start", "+end", "direction", "observed#", "expected#", "spread#"),
		Items: struct {
			Anomalies []insights.Anomaly `json:"anomalies"`
		}{append([]insights.Anomaly{}, as...)}}
	for _, a := range as {
		l.Rows = append(l.Rows, []string{a.ID, a.Tenant, a.Meter, a.SKU, output.Time(a.Start), output.Time(a.End), string(a.Direction),
			output.Decimal(a.Observed, 2), output.Decimal(a.Expected, 2), output.Decimal(a.Spread, 2)})
	}
	return output.Write(w, f, l)
}

// WriteCapacity prints when each model's demand outgrows its target
// share of the GPUs; JSON and YAML hold them under "models".
func WriteCapacity(w io.Writer, f output.Format, fc []insights.CapacityForecast) error {
	l := output.Listing{Columns: cols("model", "GPUs#", "target#", "history peak#", "+history peak at", "peak forecast#", "full at", "demand at full#"),
		Items: struct {
			Models []insights.CapacityForecast `json:"models"`
		}{append([]insights.CapacityForecast{}, fc...)}}
	for _, c := range fc {
		at, demand := "not before the horizon", ""
		if c.Exceeds {
			at, demand = output.Time(c.At), output.Decimal(c.Demand, 1)
		}
		l.Rows = append(l.Rows, []string{c.Model, c.CapacityGPUs.String(), c.Target.String(), output.Decimal(c.HistoryPeak, 1),
			output.Time(c.HistoryPeakAt), output.Decimal(c.PeakForecast, 1), at, demand})
	}
	return output.Write(w, f, l)
}

// WriteSlurm prints a Slurm comparison; the table keeps
// WriteSlurmComparison's text (accounts, then the jobs that differ), the
// other formats list the accounts, JSON and YAML the whole comparison.
func WriteSlurm(w io.Writer, f output.Format, cmp sacct.Comparison, tolerance float64) error {
	l := output.Listing{Columns: cols("account", "jobs#", "allocated GPU-h#", "measured GPU-h#", "difference#"), Items: slurmDoc(cmp)}
	hours := func(h float64) string { return fmt.Sprintf("%.2f", h) }
	for _, a := range cmp.Accounts {
		l.Rows = append(l.Rows, []string{a.Account, fmt.Sprint(a.Jobs), hours(a.Allocated.Hours()), hours(a.Measured.Hours()),
			hours((a.Measured - a.Allocated).Hours())})
	}
	return write(w, f, l, func() error { return WriteSlurmComparison(w, cmp, tolerance) })
}

// WriteQuoteAs prints a priced result; the table keeps WriteQuote's text,
// the other formats list its lines, JSON and YAML the whole result.
func WriteQuoteAs(w io.Writer, f output.Format, r pricing.Result) error {
	l := output.Listing{Columns: cols("sku", "meter", "kind", "from", "to", "quantity#", "unit", "unit price#", "amount#", "rounded#",
		"+description"), Items: r}
	for _, ln := range r.Lines {
		price := ""
		if ln.UnitPrice != nil {
			price = ln.UnitPrice.String()
		}
		l.Rows = append(l.Rows, []string{ln.SKU, string(ln.Meter), string(ln.Kind), output.Time(ln.From.In(r.Start.Location())),
			output.Time(ln.To.In(r.Start.Location())), ln.Quantity.String(), ln.Unit, price,
			output.Decimal(ln.Amount, pricing.StoragePlaces), output.Decimal(ln.AmountRounded, r.Currency.MinorUnits), ln.Description})
	}
	return write(w, f, l, func() error { return WriteQuote(w, r) })
}
