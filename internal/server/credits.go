package server

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/credits"
	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/internal/usage"
	"github.com/gpumeter/gpumeter/pricing"
)

// CreditsService is the credit domain (credits.Service).
type CreditsService interface {
	Account(ctx context.Context, r credits.AccountRequest) (credits.Account, error)
	Grant(ctx context.Context, g credits.Grant) (credits.Grant, error)
	Void(ctx context.Context, r credits.VoidRequest) (credits.Grant, error)
}

// maxGrantBody bounds a grant's JSON body: a grant is a few hundred bytes.
const maxGrantBody = 16 << 10

// creditsRoute answers 404 where no credit service is wired, 403 to a
// write by anything but an admin key (a portal token's write is refused
// before), and otherwise runs h.
func (s *Server) creditsRoute(api API, write bool, h func(c *gin.Context)) gin.HandlerFunc {
	return func(c *gin.Context) {
		if api.Credits == nil {
			writeError(c, http.StatusNotFound, "not_found", "credits are not served here")
			return
		}
		if write && scopeOf(c).Kind != auth.KindAdmin {
			s.respondError(c, fmt.Errorf("granting and voiding credit is for admin keys: %w", ErrForbidden))
			return
		}
		h(c)
	}
}

// getCredits answers GET /v1/credits: one customer's account with tenant
// (a tenant key's own only), or, without, the summary of every customer
// in the key's scope that has a grant, soonest depletion first.
func (s *Server) getCredits(api API) gin.HandlerFunc {
	return s.creditsRoute(api, false, func(c *gin.Context) {
		v := c.Request.URL.Query()
		if err := onlyParams(v, 128, "tenant"); err != nil {
			s.respondError(c, err)
			return
		}
		ctx, scope := c.Request.Context(), scopeOf(c)
		visible, err := api.Tenants.Tenants(ctx, scope)
		if err != nil {
			s.respondError(c, err)
			return
		}
		if tenant := v.Get("tenant"); tenant != "" {
			// Another tenant than a tenant key's own, or one outside a
			// department's: absent, as /v1/cost answers it.
			if !slices.ContainsFunc(visible, func(t usage.TenantInfo) bool { return t.Tenant == tenant }) {
				s.respondError(c, fault.NotFoundf("tenant %q: not found", tenant))
				return
			}
			acc, err := api.Credits.Account(ctx, s.accountRequest(api, scope, tenant))
			if err != nil {
				s.respondError(c, err)
				return
			}
			c.JSON(http.StatusOK, creditAccountBody(acc))
			return
		}
		out := creditSummary{Customers: []creditCustomer{}}
		for _, t := range visible {
			acc, err := api.Credits.Account(ctx, s.accountRequest(api, scope, t.Tenant))
			if err != nil {
				s.respondError(c, err)
				return
			}
			if len(acc.Balances) == 0 {
				continue // no credit to show
			}
			out.Customers = append(out.Customers, creditCustomerOf(acc))
		}
		slices.SortStableFunc(out.Customers, func(a, b creditCustomer) int {
			switch {
			case a.Depletion == nil && b.Depletion != nil:
				return 1
			case a.Depletion != nil && b.Depletion == nil:
				return -1
			case a.Depletion != nil:
				if n := cmp.Compare(*a.DaysLeft, *b.DaysLeft); n != 0 {
					return n
				}
			}
			return cmp.Compare(a.Tenant, b.Tenant)
		})
		c.JSON(http.StatusOK, out)
	})
}

// accountRequest asks for tenant's account, its depletion date read from
// the month's priced forecast of /v1/cost.
func (s *Server) accountRequest(api API, scope auth.Scope, tenant string) credits.AccountRequest {
	return credits.AccountRequest{Tenant: tenant, ExpiringDays: api.CreditSettings.ExpiringDays,
		Forecast: func(ctx context.Context) (credits.Forecast, error) {
			r, err := api.Cost.Cost(ctx, usage.CostRequest{Scope: scope, Tenant: tenant})
			if err != nil {
				return credits.Forecast{}, err
			}
			return forecastOf(r), nil
		}}
}

// forecastOf is the cost forecast's running total per day, as credits
// reads it: each point of the path covers its day up to the next one's
// start (the last, to the month's end).
func forecastOf(r usage.CostResult) credits.Forecast {
	fc := credits.Forecast{AsOf: r.Cost.AsOf, SoFar: r.Cost.SoFar.Total}
	for i, p := range r.Cost.Path {
		end := r.End
		if i+1 < len(r.Cost.Path) {
			end = r.Cost.Path[i+1].At
		}
		fc.Days = append(fc.Days, credits.ForecastDay{Start: p.At, End: end, Total: p.Total})
	}
	return fc
}

// postCredits answers POST /v1/credits: a grant, validated whole before
// anything is stored; 201 with the stored grant.
func (s *Server) postCredits(api API) gin.HandlerFunc {
	return s.creditsRoute(api, true, func(c *gin.Context) {
		var b grantRequest
		if err := decodeStrict(c.Request.Body, &b, grantFields); err != nil {
			s.respondError(c, err)
			return
		}
		g, err := b.grant()
		if err != nil {
			s.respondError(c, err)
			return
		}
		stored, err := api.Credits.Grant(c.Request.Context(), g)
		if err != nil {
			s.respondError(c, err)
			return
		}
		c.JSON(http.StatusCreated, grantBodyOf(stored))
	})
}

// postVoid answers POST /v1/credits/{id}/void: the grant voided from now
// on, its record kept with the reason.
func (s *Server) postVoid(api API) gin.HandlerFunc {
	return s.creditsRoute(api, true, func(c *gin.Context) {
		var b struct {
			Reason string `json:"reason"`
		}
		if err := decodeStrict(c.Request.Body, &b, `(want {"reason"})`); err != nil {
			s.respondError(c, err)
			return
		}
		id := c.Param("id")
		if !validText(id) || len(id) > 64 || !validText(b.Reason) || len(b.Reason) > 1024 {
			s.respondError(c, badRequest{"id and reason: text of at most 64 and 1024 bytes, no control characters"})
			return
		}
		g, err := api.Credits.Void(c.Request.Context(), credits.VoidRequest{ID: id, Reason: b.Reason})
		if err != nil {
			s.respondError(c, err)
			return
		}
		c.JSON(http.StatusOK, grantBodyOf(g))
	})
}

// decimalText is an amount as the API writes decimals, 40 characters at
// most.
var decimalText = regexp.MustCompile(`^-?[0-9]{1,30}(\.[0-9]{1,9})?$`)

const grantFields = `(want {"tenant","kind","amount","currency","meter","sku_class","priority","effective_at","expires_at","source","note"})`

// decodeStrict reads one JSON object into v: no unknown field, nothing
// after it, a field of the wrong type named. Problems are 400s.
func decodeStrict(r io.Reader, v any, fields string) error {
	data, err := io.ReadAll(io.LimitReader(r, maxGrantBody+1))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return badRequest{"body over the server's limit"}
		}
		return badRequest{"read body: " + err.Error()}
	}
	switch {
	case len(data) > maxGrantBody:
		return badRequest{fmt.Sprintf("body over %d bytes", maxGrantBody)}
	case len(bytes.TrimSpace(data)) == 0:
		return badRequest{"body: required, a JSON object " + fields}
	case !validJSONText(data):
		return badRequest{"body: not valid UTF-8 text"}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return badRequest{fmt.Sprintf("%s: want a JSON %s, not %s %s", te.Field, jsonKind(te.Type.Kind().String()), te.Value, fields)}
		}
		return badRequest{"body: " + strings.TrimPrefix(err.Error(), "json: ") + " " + fields}
	}
	if dec.More() {
		return badRequest{"body: one JSON object only"}
	}
	return nil
}

// jsonKind names a Go kind as JSON has it.
func jsonKind(k string) string {
	switch {
	case k == "string":
		return "string"
	case strings.HasPrefix(k, "int"), strings.HasPrefix(k, "uint"), strings.HasPrefix(k, "float"):
		return "number"
	case k == "bool":
		return "boolean"
	}
	return "object"
}

// grantRequest is POST /v1/credits's body: amounts are decimal strings,
// times RFC 3339.
type grantRequest struct {
	Tenant      string `json:"tenant"`
	Kind        string `json:"kind"`
	Amount      string `json:"amount"`
	Currency    string `json:"currency"`
	Meter       string `json:"meter"`
	SKUClass    string `json:"sku_class"`
	Priority    int    `json:"priority"`
	EffectiveAt string `json:"effective_at"`
	ExpiresAt   string `json:"expires_at"`
	Source      string `json:"source"`
	Note        string `json:"note"`
}

// grant decodes the body's text into a grant; credits.Grant.Validate,
// called by the service, checks the rest (tenant, kind, amount above zero,
// currency, meter, SKU class, expiry after effect).
func (b grantRequest) grant() (credits.Grant, error) {
	var errs []error
	for _, f := range []struct{ name, v string }{{"tenant", b.Tenant}, {"kind", b.Kind}, {"currency", b.Currency}, {"meter", b.Meter},
		{"sku_class", b.SKUClass}, {"source", b.Source}, {"note", b.Note}} {
		if !validText(f.v) || len(f.v) > 1024 {
			errs = append(errs, fmt.Errorf("%s: text of at most 1024 bytes, no control characters", f.name))
		}
	}
	g := credits.Grant{Tenant: b.Tenant, Kind: credits.Kind(b.Kind), Currency: b.Currency, Meter: pricing.Meter(b.Meter), SKUClass: b.SKUClass,
		Priority: b.Priority, Source: b.Source, Note: b.Note}
	var err error
	switch {
	case b.Amount == "":
		errs = append(errs, errors.New("amount: required (a decimal string, e.g. \"100.00\")"))
	case !decimalText.MatchString(b.Amount):
		// Plain digits only: an exponent ("1e-999999999") would make a
		// number whose text alone fills the memory.
		errs = append(errs, fmt.Errorf("amount %q: not a decimal number of at most 40 digits, e.g. \"100.00\"", truncate(b.Amount, 64)))
	default:
		if g.Amount, err = decimal.NewFromString(b.Amount); err != nil {
			errs = append(errs, fmt.Errorf("amount %q: not a decimal number", truncate(b.Amount, 64)))
		}
	}
	for _, t := range []struct {
		name string
		v    string
		to   *time.Time
	}{{"effective_at", b.EffectiveAt, &g.EffectiveAt}, {"expires_at", b.ExpiresAt, &g.ExpiresAt}} {
		if t.v == "" {
			continue
		}
		at, err := time.Parse(time.RFC3339, t.v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %q: not RFC 3339 (2026-11-01T00:00:00Z)", t.name, truncate(t.v, 64)))
			continue
		}
		if at.Year() < 1971 || at.Year() > 2105 { // what the ledger's DateTime holds
			errs = append(errs, fmt.Errorf("%s: outside 1971..2105", t.name))
			continue
		}
		*t.to = at.UTC()
	}
	if len(errs) > 0 {
		return credits.Grant{}, fault.Validation(errors.Join(errs...))
	}
	return g, nil
}

// grantBody is a grant as the API shows it: every property present,
// amounts exact decimal strings, times RFC 3339 in UTC, null when none.
type grantBody struct {
	ID          string     `json:"id"`
	Tenant      string     `json:"tenant"`
	Kind        string     `json:"kind"`
	Amount      string     `json:"amount"`
	Currency    string     `json:"currency"`
	Meter       string     `json:"meter"`
	SKUClass    string     `json:"sku_class"`
	Priority    int        `json:"priority"`
	EffectiveAt time.Time  `json:"effective_at"`
	ExpiresAt   *time.Time `json:"expires_at"`
	Series      string     `json:"series"`
	RolloverCap *string    `json:"rollover_cap"`
	Source      string     `json:"source"`
	Note        string     `json:"note"`
	CreatedAt   time.Time  `json:"created_at"`
	VoidedAt    *time.Time `json:"voided_at"`
	VoidReason  string     `json:"void_reason"`
}

func grantBodyOf(g credits.Grant) grantBody {
	b := grantBody{ID: g.ID, Tenant: g.Tenant, Kind: string(g.Kind), Amount: g.Amount.String(), Currency: g.Currency, Meter: string(g.Meter),
		SKUClass: g.SKUClass, Priority: g.Priority, EffectiveAt: g.EffectiveAt.UTC(), Series: g.Series, Source: g.Source, Note: g.Note,
		CreatedAt: g.CreatedAt.UTC(), VoidReason: g.VoidReason}
	if !g.ExpiresAt.IsZero() {
		t := g.ExpiresAt.UTC()
		b.ExpiresAt = &t
	}
	if g.RolloverCap != nil {
		s := g.RolloverCap.String()
		b.RolloverCap = &s
	}
	if g.VoidedAt != nil {
		t := g.VoidedAt.UTC()
		b.VoidedAt = &t
	}
	return b
}

// creditBalance is one grant's account.
type creditBalance struct {
	Grant      grantBody `json:"grant"`
	Granted    string    `json:"granted"`
	Used       string    `json:"used"`
	Expired    string    `json:"expired"`
	Voided     string    `json:"voided"`
	RolledOver string    `json:"rolled_over"`
	Remaining  string    `json:"remaining"`
}

func creditBalancesOf(bs []credits.Balance) []creditBalance {
	out := make([]creditBalance, 0, len(bs))
	for _, b := range bs {
		out = append(out, creditBalance{Grant: grantBodyOf(b.Grant), Granted: b.Granted.String(), Used: b.Used.String(), Expired: b.Expired.String(),
			Voided: b.Voided.String(), RolledOver: b.RolledOver.String(), Remaining: b.Remaining.String()})
	}
	return out
}

// includedLeft is what is left of a meter's included grants.
type includedLeft struct {
	Meter     string `json:"meter"`
	Remaining string `json:"remaining"`
}

func includedOf(ms []credits.MeterQuantity) []includedLeft {
	out := make([]includedLeft, 0, len(ms))
	for _, m := range ms {
		out = append(out, includedLeft{Meter: string(m.Meter), Remaining: m.Remaining.String()})
	}
	return out
}

// creditDay is what was left at the end of a day.
type creditDay struct {
	Date              string         `json:"date"` // in the customer's zone
	End               time.Time      `json:"end"`
	MoneyRemaining    string         `json:"money_remaining"`
	IncludedRemaining []includedLeft `json:"included_remaining"`
}

// creditAccount is GET /v1/credits?tenant=T's answer.
type creditAccount struct {
	Tenant            string          `json:"tenant"`
	Currency          string          `json:"currency"`
	TimeZone          string          `json:"time_zone"`
	Settlement        string          `json:"settlement"`
	AsOf              time.Time       `json:"as_of"`
	MoneyRemaining    string          `json:"money_remaining"`
	IncludedRemaining []includedLeft  `json:"included_remaining"`
	Uncovered         string          `json:"uncovered"`
	Balances          []creditBalance `json:"balances"`
	Daily             []creditDay     `json:"daily"`
	Expiring          []creditBalance `json:"expiring"`
	Depletion         *string         `json:"depletion"`
	DaysLeft          *int            `json:"days_left"`
	ForecastThrough   *time.Time      `json:"forecast_through"`
}

func settlementOf(c credits.Customer) string {
	return string(cmp.Or(c.Plan.Settlement, credits.CreditThenInvoice))
}

func zoneOf(c credits.Customer) *time.Location {
	if c.Location == nil {
		return time.UTC
	}
	return c.Location
}

func depletionOf(acc credits.Account) *string {
	if acc.Depletion == nil {
		return nil
	}
	d := acc.Depletion.In(zoneOf(acc.Customer)).Format(time.DateOnly)
	return &d
}

func creditAccountBody(acc credits.Account) creditAccount {
	loc := zoneOf(acc.Customer)
	out := creditAccount{Tenant: acc.Customer.Tenant, Currency: acc.Customer.Currency, TimeZone: loc.String(), Settlement: settlementOf(acc.Customer),
		AsOf: acc.AsOf.UTC(), MoneyRemaining: acc.Money.String(), IncludedRemaining: includedOf(acc.Included), Uncovered: acc.Uncovered.String(),
		Balances: creditBalancesOf(acc.Balances), Daily: []creditDay{}, Expiring: creditBalancesOf(acc.Expiring),
		Depletion: depletionOf(acc), DaysLeft: acc.DaysLeft}
	for _, d := range acc.Daily {
		out.Daily = append(out.Daily, creditDay{Date: d.Start.In(loc).Format(time.DateOnly), End: d.End.UTC(), MoneyRemaining: d.Money.String(),
			IncludedRemaining: includedOf(d.Included)})
	}
	if !acc.ForecastThrough.IsZero() {
		t := acc.ForecastThrough.UTC()
		out.ForecastThrough = &t
	}
	return out
}

// creditSummary is GET /v1/credits's answer without a tenant.
type creditSummary struct {
	Customers []creditCustomer `json:"customers"`
}

// creditCustomer is one customer of the summary.
type creditCustomer struct {
	Tenant            string         `json:"tenant"`
	Currency          string         `json:"currency"`
	Settlement        string         `json:"settlement"`
	MoneyRemaining    string         `json:"money_remaining"`
	IncludedRemaining []includedLeft `json:"included_remaining"`
	Depletion         *string        `json:"depletion"`
	DaysLeft          *int           `json:"days_left"`
}

func creditCustomerOf(acc credits.Account) creditCustomer {
	return creditCustomer{Tenant: acc.Customer.Tenant, Currency: acc.Customer.Currency, Settlement: settlementOf(acc.Customer),
		MoneyRemaining: acc.Money.String(), IncludedRemaining: includedOf(acc.Included), Depletion: depletionOf(acc), DaysLeft: acc.DaysLeft}
}
