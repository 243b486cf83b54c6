package server

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"
	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/pricing"
)

// UsageRequest is GET /v1/usage: meters summed over [From, To) by step
// (in Location) and the chosen dimensions, in the caller's scope.
type UsageRequest struct {
	Scope    auth.Scope
	From, To time.Time
	Step     string // hour, day or month
	GroupBy  []string
	Meters   []pricing.Meter
	Location *time.Location
}

// Limits of one usage request: its range, and the points of its answer
// (buckets times groups), which the service enforces.
const (
	maxUsageRange = 400 * 24 * time.Hour
	// MaxUsagePoints bounds an answer; more is a 400 asking to narrow it.
	MaxUsagePoints = 50_000
)

var usageDimensions = map[string]bool{"tenant": true, "department": true, "sku": true, "host": true, "workload": true}

func validText(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// parseTime reads RFC 3339 or a date (midnight in loc).
func parseTime(field, v string, loc *time.Location) (time.Time, error) {
	if v == "" {
		return time.Time{}, badRequest{field + ": required (RFC 3339, e.g. 2026-11-01T00:00:00Z, or a date 2026-11-01)"}
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	if t, err := time.ParseInLocation(time.DateOnly, v, loc); err == nil {
		return t, nil
	}
	return time.Time{}, badRequest{fmt.Sprintf("%s %q: not RFC 3339 (2026-11-01T00:00:00Z) or a date (2026-11-01)", field, truncate(v, 64))}
}

// parseUsageRequest validates every parameter; problems are 400s.
func parseUsageRequest(v url.Values, scope auth.Scope) (UsageRequest, error) {
	for k, vals := range v {
		switch k {
		case "from", "to", "step", "group_by", "meters", "tz", "access_token":
		default:
			return UsageRequest{}, badRequest{fmt.Sprintf("unknown parameter %q (want from, to, step, group_by, meters, tz)", truncate(k, 64))}
		}
		if len(vals) > 1 {
			return UsageRequest{}, badRequest{fmt.Sprintf("%s: given %d times; give it once (lists are comma-separated)", k, len(vals))}
		}
		for _, s := range vals {
			if !validText(s) || len(s) > 512 {
				return UsageRequest{}, badRequest{fmt.Sprintf("%s: not valid UTF-8 text of at most 512 bytes", k)}
			}
		}
	}
	q := UsageRequest{Scope: scope, Step: v.Get("step"), Location: time.UTC}
	if tz := v.Get("tz"); tz != "" {
		loc, err := time.LoadLocation(tz)
		if err != nil || strings.HasPrefix(tz, "/") || strings.Contains(tz, "..") {
			return UsageRequest{}, badRequest{fmt.Sprintf("tz %q: not an IANA time zone", truncate(tz, 64))}
		}
		q.Location = loc
	}
	var err error
	if q.From, err = parseTime("from", v.Get("from"), q.Location); err != nil {
		return UsageRequest{}, err
	}
	if q.To, err = parseTime("to", v.Get("to"), q.Location); err != nil {
		return UsageRequest{}, err
	}
	if !q.To.After(q.From) {
		return UsageRequest{}, badRequest{"to: must be after from"}
	}
	if q.To.Sub(q.From) > maxUsageRange {
		return UsageRequest{}, badRequest{fmt.Sprintf("from..to spans %s; at most %d days per request", q.To.Sub(q.From).Round(time.Hour), int(maxUsageRange.Hours()/24))}
	}
	if q.From.Year() < 1971 || q.To.Year() > 2105 {
		return UsageRequest{}, badRequest{"from/to: outside 1971..2105"}
	}
	if q.From.Truncate(time.Hour) != q.From || q.To.Truncate(time.Hour) != q.To {
		return UsageRequest{}, badRequest{"from/to: must be whole hours (usage is kept per hour)"}
	}
	if at, off, ok := wholeHourOffsets(q.From, q.To, q.Location); !ok {
		return UsageRequest{}, badRequest{fmt.Sprintf("tz %s: offset %s at %s is not a whole hour; usage is kept per UTC hour",
			q.Location, time.Duration(off)*time.Second, at.In(q.Location).Format(time.RFC3339))}
	}
	switch q.Step {
	case "":
		q.Step = "day"
	case "hour", "day", "month":
	default:
		return UsageRequest{}, badRequest{fmt.Sprintf("step %q: want hour, day or month", truncate(q.Step, 32))}
	}
	seen := map[string]bool{}
	if g := v.Get("group_by"); g != "" {
		for _, d := range strings.Split(g, ",") {
			d = strings.TrimSpace(d)
			if !usageDimensions[d] {
				return UsageRequest{}, badRequest{fmt.Sprintf("group_by %q: want tenant, department, sku, host or workload", truncate(d, 32))}
			}
			if seen[d] {
				return UsageRequest{}, badRequest{fmt.Sprintf("group_by: %q twice", d)}
			}
			seen[d] = true
			q.GroupBy = append(q.GroupBy, d)
		}
	}
	if m := v.Get("meters"); m != "" {
		seenMeter := map[pricing.Meter]bool{}
		for _, name := range strings.Split(m, ",") {
			meter, err := pricing.ParseMeter(strings.TrimSpace(name))
			if err != nil {
				return UsageRequest{}, badRequest{"meters: " + err.Error()}
			}
			if seenMeter[meter] {
				return UsageRequest{}, badRequest{fmt.Sprintf("meters: %q twice", meter)}
			}
			seenMeter[meter] = true
			q.Meters = append(q.Meters, meter)
		}
	} else {
		q.Meters = pricing.Meters()
	}
	return q, nil
}

// wholeHourOffsets checks loc's UTC offset over every zone period that
// overlaps [from, to], not only at from: a zone may switch to a
// half-hour offset inside the range (Australia/Lord_Howe's daylight
// time is +10:30). It returns the first offending time and offset.
func wholeHourOffsets(from, to time.Time, loc *time.Location) (time.Time, int, bool) {
	for t := from; !t.After(to); {
		_, off := t.In(loc).Zone()
		if off%3600 != 0 {
			return t, off, false
		}
		_, end := t.In(loc).ZoneBounds()
		if end.IsZero() || !end.After(t) {
			break // the zone lasts forever
		}
		t = end
	}
	return time.Time{}, 0, true
}

// UsagePoint is one bucket of one group.
type UsagePoint struct {
	Bucket     time.Time
	Tenant     string
	Department string
	SKU        string
	Host       string
	Workload   string
	Samples    uint64
	Quantities map[pricing.Meter]decimal.Decimal
}

// UsageResult is a usage series: points sorted by bucket, then group.
// RolledUpThrough says up to when hourly rollups served it; later hours
// came from raw samples.
type UsageResult struct {
	Points          []UsagePoint
	RolledUpThrough time.Time
}

func usageResponse(q UsageRequest, res UsageResult) gin.H {
	points := make([]gin.H, 0, len(res.Points))
	for _, p := range res.Points {
		h := gin.H{"bucket": p.Bucket.In(q.Location).Format(time.RFC3339), "samples": p.Samples}
		for _, d := range q.GroupBy {
			h[d] = map[string]string{"tenant": p.Tenant, "department": p.Department, "sku": p.SKU, "host": p.Host, "workload": p.Workload}[d]
		}
		for _, m := range q.Meters {
			h[string(m)] = p.Quantities[m].String()
		}
		points = append(points, h)
	}
	meters := make([]string, len(q.Meters))
	for i, m := range q.Meters {
		meters[i] = string(m)
	}
	groupBy := q.GroupBy
	if groupBy == nil {
		groupBy = []string{}
	}
	return gin.H{"from": q.From.In(q.Location).Format(time.RFC3339), "to": q.To.In(q.Location).Format(time.RFC3339),
		"step": q.Step, "tz": q.Location.String(), "group_by": groupBy, "meters": meters, "scope": q.Scope.String(),
		"rolled_up_through": res.RolledUpThrough.UTC().Format(time.RFC3339), "points": points}
}

// parseInvoiceList reads GET /v1/invoices.
func parseInvoiceList(v url.Values, scope auth.Scope) (billing.InvoiceListRequest, error) {
	q := billing.InvoiceListRequest{Scope: scope, Period: v.Get("period"), Tenant: v.Get("tenant"), After: v.Get("page_token"), Limit: 100}
	for k, vals := range v {
		switch k {
		case "period", "tenant", "page_token", "page_size", "access_token":
		default:
			return q, badRequest{fmt.Sprintf("unknown parameter %q (want period, tenant, page_size, page_token)", truncate(k, 64))}
		}
		if len(vals) > 1 {
			return q, badRequest{fmt.Sprintf("%s: given %d times; give it once", k, len(vals))}
		}
		for _, s := range vals {
			if !validText(s) || len(s) > 256 {
				return q, badRequest{fmt.Sprintf("%s: not valid UTF-8 text of at most 256 bytes", k)}
			}
		}
	}
	if err := q.Validate(); err != nil {
		return q, err
	}
	if ps := v.Get("page_size"); ps != "" {
		n, err := strconv.Atoi(ps)
		if err != nil || n < 1 || n > 1000 {
			return q, badRequest{fmt.Sprintf("page_size %q: want 1 to 1000", truncate(ps, 16))}
		}
		q.Limit = n
	}
	return q, nil
}

type invoiceSummary struct {
	ID       string `json:"id"`
	Number   string `json:"number,omitempty"`
	Status   string `json:"status"`
	Tenant   string `json:"tenant"`
	Period   string `json:"period"`
	Currency string `json:"currency"`
	Subtotal string `json:"subtotal"`
	Tax      string `json:"tax"`
	Total    string `json:"total"`
}

type invoiceList struct {
	Invoices      []invoiceSummary `json:"invoices"`
	NextPageToken string           `json:"next_page_token,omitempty"`
}

func summarize(inv *billing.Invoice) invoiceSummary {
	return invoiceSummary{ID: inv.ID, Number: inv.Number, Status: string(inv.Status), Tenant: inv.Tenant, Period: inv.PeriodLabel,
		Currency: inv.Currency.Code, Subtotal: inv.Money(inv.SubtotalMinor), Tax: inv.Money(inv.TaxMinor), Total: inv.Money(inv.TotalMinor)}
}

// validJSONText is validText for a JSON body, whose whitespace may hold
// newlines, tabs and carriage returns.
func validJSONText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, c := range b { // bytes of multi-byte runes are all >= 0x80
		if (c < 0x20 && c != '\n' && c != '\t' && c != '\r') || c == 0x7f {
			return false
		}
	}
	return true
}
