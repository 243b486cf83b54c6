package server

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/usage"
	"github.com/gpumeter/gpumeter/pricing"
)

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

// parseUsageRequest decodes GET /v1/usage: the parameters, their text,
// times and meter names; the request's own checks (usage.Request.Validate)
// follow. Problems are 400s.
func parseUsageRequest(v url.Values, scope auth.Scope) (usage.Request, error) {
	for k, vals := range v {
		switch k {
		case "from", "to", "step", "group_by", "meters", "tz", "access_token":
		default:
			return usage.Request{}, badRequest{fmt.Sprintf("unknown parameter %q (want from, to, step, group_by, meters, tz)", truncate(k, 64))}
		}
		if len(vals) > 1 {
			return usage.Request{}, badRequest{fmt.Sprintf("%s: given %d times; give it once (lists are comma-separated)", k, len(vals))}
		}
		for _, s := range vals {
			if !validText(s) || len(s) > 512 {
				return usage.Request{}, badRequest{fmt.Sprintf("%s: not valid UTF-8 text of at most 512 bytes", k)}
			}
		}
	}
	q := usage.Request{Scope: scope, Step: v.Get("step"), Location: time.UTC}
	if tz := v.Get("tz"); tz != "" {
		loc, err := time.LoadLocation(tz)
		if err != nil || strings.HasPrefix(tz, "/") || strings.Contains(tz, "..") {
			return usage.Request{}, badRequest{fmt.Sprintf("tz %q: not an IANA time zone", truncate(tz, 64))}
		}
		q.Location = loc
	}
	var err error
	if q.From, err = parseTime("from", v.Get("from"), q.Location); err != nil {
		return usage.Request{}, err
	}
	if q.To, err = parseTime("to", v.Get("to"), q.Location); err != nil {
		return usage.Request{}, err
	}
	if q.Step == "" {
		q.Step = "day"
	}
	if g := v.Get("group_by"); g != "" {
		for _, d := range strings.Split(g, ",") {
			q.GroupBy = append(q.GroupBy, usage.Dimension(strings.TrimSpace(d)))
		}
	}
	if m := v.Get("meters"); m != "" {
		for _, name := range strings.Split(m, ",") {
			meter, err := pricing.ParseMeter(strings.TrimSpace(name))
			if err != nil {
				return usage.Request{}, badRequest{"meters: " + err.Error()}
			}
			q.Meters = append(q.Meters, meter)
		}
	} else {
		q.Meters = pricing.Meters()
	}
	if err := q.Validate(); err != nil {
		// A parameter's problem, as the parser's own are.
		return usage.Request{}, badRequest{err.Error()}
	}
	return q, nil
}

func usageResponse(q usage.Request, res usage.Result) gin.H {
	points := make([]gin.H, 0, len(res.Points))
	for _, p := range res.Points {
		h := gin.H{"bucket": p.Bucket.In(q.Location).Format(time.RFC3339), "samples": p.Samples}
		for _, d := range q.GroupBy {
			h[string(d)] = map[usage.Dimension]string{usage.DimTenant: p.Tenant, usage.DimDepartment: p.Department, usage.DimSKU: p.SKU,
				usage.DimHost: p.Host, usage.DimWorkload: p.Workload}[d]
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
		groupBy = []usage.Dimension{}
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
