package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/credits"
	"github.com/gpumeter/gpumeter/internal/server"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
	"github.com/gpumeter/gpumeter/internal/usage"
	"github.com/gpumeter/gpumeter/pricing"
)

// creditsOf is the credit domain over s for the customers cs on the clock
// now.
func creditsOf(t *testing.T, s *store.Store, cs billing.Customers, now func() time.Time) *credits.Service {
	t.Helper()
	customers, err := cs.CreditCustomers()
	if err != nil {
		t.Fatal(err)
	}
	return credits.NewService(s, usage.New(s, cs, now), customers, now)
}

// withCredits serves /v1/credits on api over the fixture's store and
// customers, on the real clock.
func (f *fixture) withCredits(t *testing.T, api server.API) server.API {
	t.Helper()
	api.Credits = creditsOf(t, f.store, f.customers, time.Now)
	api.CreditSettings = credits.DefaultSettings()
	return api
}

// creditRig: tenant ferro (department lab) holds one H100 every hour of
// 1-10 October 2026 (3.00 USD an hour, no tax); acme (lab) and initech
// (ops) hold nothing. The services' clock is 11 October 00:30 UTC: usage
// counts to 00:00, and the month's forecast is a run rate of one
// GPU-hour an hour.
type creditRig struct {
	store  *store.Store
	srv    *httptest.Server
	tokens map[string]string
}

var creditNow = time.Date(2026, 10, 11, 0, 30, 0, 0, time.UTC)

func newCreditRig(t *testing.T) *creditRig {
	t.Helper()
	ctx := context.Background()
	s := storetest.New(t)
	var samples []collectors.Sample
	for h := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC); h.Before(time.Date(2026, 10, 11, 0, 0, 0, 0, time.UTC)); h = h.Add(time.Hour) {
		samples = append(samples, h100Hour("ferro", "lab", "GPU-ferro", "job-ferro", h, 3_600_000_000))
	}
	if err := s.InsertSamples(ctx, samples); err != nil {
		t.Fatal(err)
	}
	rollUp(t, s)
	cs := customersOn(writeBook(t, book), [2]string{"ferro", "lab"}, [2]string{"acme", "lab"}, [2]string{"initech", "ops"})
	now := func() time.Time { return creditNow }
	use := usage.New(s, cs, now)
	api := server.API{Keys: s, Audit: s, Usage: use, Cost: use, Tenants: use, Credits: creditsOf(t, s, cs, now), CreditSettings: credits.DefaultSettings()}
	ts, _, _ := serveAPI(t, server.DefaultConfig(), prometheus.NewRegistry(), api, nil)
	r := &creditRig{store: s, srv: ts, tokens: map[string]string{}}
	for name, scope := range map[string]auth.Scope{"admin": {Kind: auth.KindAdmin}, "ferro": {Kind: auth.KindTenant, Name: "ferro"},
		"acme": {Kind: auth.KindTenant, Name: "acme"}, "lab": {Kind: auth.KindDepartment, Name: "lab"}, "ops": {Kind: auth.KindDepartment, Name: "ops"}} {
		_, r.tokens[name] = saveKey(t, s, auth.NewKeyRequest{Scope: scope}, time.Now())
	}
	return r
}

func (r *creditRig) send(t *testing.T, method, path, key, body string) (int, []byte) {
	t.Helper()
	code, data, _ := send(t, method, r.srv.URL+path, r.tokens[key], body)
	return code, data
}

// grant posts a grant as the admin and returns its id.
func (r *creditRig) grant(t *testing.T, body string) string {
	t.Helper()
	code, data := r.send(t, http.MethodPost, "/v1/credits", "admin", body)
	var g struct {
		ID string `json:"id"`
	}
	if code != http.StatusCreated || json.Unmarshal(data, &g) != nil || g.ID == "" {
		t.Fatalf("grant %s: %d %s", body, code, data)
	}
	return g.ID
}

func (r *creditRig) ledger(t *testing.T) []credits.Grant {
	t.Helper()
	gs, err := r.store.Grants(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	return gs
}

type creditAccountJSON struct {
	Tenant, Currency, Settlement string
	MoneyRemaining               string `json:"money_remaining"`
	Uncovered                    string
	Balances                     []struct {
		Grant struct {
			ID, Kind   string
			VoidReason string     `json:"void_reason"`
			VoidedAt   *time.Time `json:"voided_at"`
		}
		Granted, Used, Expired, Voided, Remaining string
		RolledOver                                string `json:"rolled_over"`
	}
	Daily []struct {
		Date              string
		End               time.Time
		MoneyRemaining    string                              `json:"money_remaining"`
		IncludedRemaining []struct{ Meter, Remaining string } `json:"included_remaining"`
	}
	Expiring []struct {
		Grant     struct{ ID string }
		Remaining string
	}
	Depletion       *string
	DaysLeft        *int       `json:"days_left"`
	ForecastThrough *time.Time `json:"forecast_through"`
}

// The account of ferro, every figure derived by hand: an included grant
// of 30 H100 hours, prepaid 1000 USD (priority 1), promotional 100 USD
// from 5 October (priority 0, so used before the prepaid), and 5 A100
// hours expiring on the 14th that ferro's H100 usage never touches.
func TestCreditsAccountByHand(t *testing.T) {
	r := newCreditRig(t)
	ids := map[string]string{
		"inc": r.grant(t, `{"tenant":"ferro","kind":"included","amount":"30","meter":"gpu_hours","sku_class":"H100-SXM5-80GB",
			"effective_at":"2026-10-01T00:00:00Z","expires_at":"2026-10-06T00:00:00Z","source":"plan","note":"October's hours"}`),
		"pre": r.grant(t, `{"tenant":"ferro","kind":"prepaid","amount":"1000","priority":1,"effective_at":"2026-10-01T00:00:00Z"}`),
		"promo": r.grant(t, `{"tenant":"ferro","kind":"promotional","amount":"100.00","currency":"USD","priority":0,
			"effective_at":"2026-10-05T00:00:00Z"}`),
		"a100": r.grant(t, `{"tenant":"ferro","kind":"included","amount":"5","meter":"gpu_hours","sku_class":"A100-SXM4-80GB",
			"effective_at":"2026-10-01T00:00:00Z","expires_at":"2026-10-14T00:00:00Z"}`),
	}
	code, data := r.send(t, http.MethodGet, "/v1/credits?tenant=ferro", "ferro", "")
	var acc creditAccountJSON
	if code != http.StatusOK || json.Unmarshal(data, &acc) != nil {
		t.Fatalf("ferro's account: %d %s", code, data)
	}
	// 72 USD a day (24 H100 hours at 3.00). inc covers 1 October and the
	// first 6 hours of the 2nd; the rest of the 2nd is 54 USD of prepaid.
	// From the 5th promo (priority 0) goes first: 72 on the 5th, 28 on the
	// 6th with 44 of prepaid. A grant counts at the end of a day from its
	// start, so promo's 100 is in the 4th's figure.
	wantMoney := []string{"1000", "946", "874", "902", "830", "758", "686", "614", "542", "470", "470"}
	wantIncluded := []string{"11", "5", "5", "5", "5", "5", "5", "5", "5", "5", "5"}
	if len(acc.Daily) != len(wantMoney) {
		t.Fatalf("%d days, want 1-11 October: %s", len(acc.Daily), data)
	}
	for i, d := range acc.Daily {
		date := time.Date(2026, 10, i+1, 0, 0, 0, 0, time.UTC)
		end := date.AddDate(0, 0, 1)
		if i == 10 {
			end = creditNow // today: what is left now
		}
		if d.Date != date.Format(time.DateOnly) || !d.End.Equal(end) || !eq(d.MoneyRemaining, wantMoney[i]) ||
			len(d.IncludedRemaining) != 1 || d.IncludedRemaining[0].Meter != "gpu_hours" || !eq(d.IncludedRemaining[0].Remaining, wantIncluded[i]) {
			t.Errorf("day %d: %+v, want money %s and %s GPU-hours included at %s", i+1, d, wantMoney[i], wantIncluded[i], end)
		}
	}
	want := map[string][5]string{ // granted, used, expired, remaining, kind
		ids["inc"]:   {"30", "30", "0", "0", "included"},
		ids["pre"]:   {"1000", "530", "0", "470", "prepaid"},
		ids["promo"]: {"100", "100", "0", "0", "promotional"},
		ids["a100"]:  {"5", "0", "0", "5", "included"},
	}
	if len(acc.Balances) != 4 {
		t.Fatalf("%d balances: %s", len(acc.Balances), data)
	}
	for _, b := range acc.Balances {
		w := want[b.Grant.ID]
		if !eq(b.Granted, w[0]) || !eq(b.Used, w[1]) || !eq(b.Expired, w[2]) || !eq(b.Remaining, w[3]) || b.Grant.Kind != w[4] ||
			!eq(b.Voided, "0") || !eq(b.RolledOver, "0") {
			t.Errorf("balance of %s: %+v, want %v", b.Grant.ID, b, w)
		}
	}
	if !eq(acc.MoneyRemaining, "470") || !eq(acc.Uncovered, "0") || acc.Currency != "USD" || acc.Settlement != "credit_then_invoice" {
		t.Errorf("money %s, uncovered %s, %s, %s", acc.MoneyRemaining, acc.Uncovered, acc.Currency, acc.Settlement)
	}
	// Expiring within 7 days of 11 October with something left: a100.
	if len(acc.Expiring) != 1 || acc.Expiring[0].Grant.ID != ids["a100"] || !eq(acc.Expiring[0].Remaining, "5") {
		t.Errorf("expiring %+v, want a100's 5 hours", acc.Expiring)
	}
	// The forecast runs on at 1 GPU-hour an hour: 72 USD a day from 11
	// October, 470 left: 398, 326, 254, 182, 110 and 38 at the ends of the
	// 11th-16th, gone on the 17th, six days from today.
	if acc.Depletion == nil || *acc.Depletion != "2026-10-17" || acc.DaysLeft == nil || *acc.DaysLeft != 6 {
		t.Errorf("depletion %v in %v days, want 2026-10-17 in 6", acc.Depletion, acc.DaysLeft)
	}
	if acc.ForecastThrough == nil || !acc.ForecastThrough.Equal(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("forecast through %v, want the month's end", acc.ForecastThrough)
	}

	// The summary: ferro alone has grants; a department's key sees its own.
	for _, key := range []string{"admin", "lab"} {
		code, data = r.send(t, http.MethodGet, "/v1/credits", key, "")
		var sum struct {
			Customers []struct {
				Tenant, Depletion string
				MoneyRemaining    string `json:"money_remaining"`
				DaysLeft          int    `json:"days_left"`
			}
		}
		if code != http.StatusOK || json.Unmarshal(data, &sum) != nil || len(sum.Customers) != 1 || sum.Customers[0].Tenant != "ferro" ||
			sum.Customers[0].Depletion != "2026-10-17" || sum.Customers[0].DaysLeft != 6 || !eq(sum.Customers[0].MoneyRemaining, "470") {
			t.Errorf("%s's summary: %d %s", key, code, data)
		}
	}
	if code, data = r.send(t, http.MethodGet, "/v1/credits", "ops", ""); code != http.StatusOK || string(data) != `{"customers":[]}` {
		t.Errorf("ops' summary: %d %s, want no customer", code, data)
	}
}

func eq(a, b string) bool {
	x, err1 := decimal.NewFromString(a)
	y, err2 := decimal.NewFromString(b)
	return err1 == nil && err2 == nil && x.Equal(y)
}

// Reads are scoped like /v1/cost; writes are an admin key's only; bad
// input is a 400 naming the field with nothing stored; a grant and its
// void round-trip.
func TestCreditsScopesValidationAndVoid(t *testing.T) {
	r := newCreditRig(t)
	id := r.grant(t, `{"tenant":"ferro","kind":"prepaid","amount":"50","effective_at":"2026-10-01T00:00:00Z"}`)

	// Another tenant's account: the refusal /v1/cost gives, word for word.
	for _, c := range []struct{ key, tenant string }{{"acme", "ferro"}, {"ops", "ferro"}, {"lab", "initech"}, {"admin", "nosuch"}} {
		code, data := r.send(t, http.MethodGet, "/v1/credits?tenant="+c.tenant, c.key, "")
		costCode, costData := r.send(t, http.MethodGet, "/v1/cost?tenant="+c.tenant, c.key, "")
		if code != http.StatusNotFound || code != costCode || string(data) != string(costData) || strings.Contains(string(data), "50") {
			t.Errorf("%s reading %s's credits: %d %s; /v1/cost says %d %s", c.key, c.tenant, code, data, costCode, costData)
		}
	}
	for _, key := range []string{"ferro", "lab", "admin"} {
		if code, data := r.send(t, http.MethodGet, "/v1/credits?tenant=ferro", key, ""); code != http.StatusOK || !strings.Contains(string(data), id) {
			t.Errorf("%s reading ferro's credits: %d %.200s", key, code, data)
		}
	}
	if code, data := r.send(t, http.MethodGet, "/v1/credits?tenant=ferro&month=2026-10", "admin", ""); code != http.StatusBadRequest ||
		!strings.Contains(string(data), "month") {
		t.Errorf("an unknown parameter: %d %s", code, data)
	}

	before := r.ledger(t)
	ok := `"tenant":"ferro","kind":"prepaid","amount":"10"`
	for _, c := range []struct {
		name, key, body string
		status          int
		names           string // what the message must name
	}{
		{"a tenant key", "ferro", "{" + ok + "}", http.StatusForbidden, "admin"},
		{"a department key", "lab", "{" + ok + "}", http.StatusForbidden, "admin"},
		{"a negative amount", "admin", `{"tenant":"ferro","kind":"prepaid","amount":"-5"}`, http.StatusBadRequest, "amount -5"},
		{"a zero amount", "admin", `{"tenant":"ferro","kind":"prepaid","amount":"0"}`, http.StatusBadRequest, "amount 0"},
		{"an amount that is no number", "admin", `{"tenant":"ferro","kind":"prepaid","amount":"lots"}`, http.StatusBadRequest, "amount"},
		{"an amount as a JSON number", "admin", `{"tenant":"ferro","kind":"prepaid","amount":10}`, http.StatusBadRequest, "amount"},
		{"no amount", "admin", `{"tenant":"ferro","kind":"prepaid"}`, http.StatusBadRequest, "amount"},
		{"expiry before effect", "admin", "{" + ok + `,"effective_at":"2026-10-05T00:00:00Z","expires_at":"2026-10-04T00:00:00Z"}`, http.StatusBadRequest, "expires_at"},
		{"a time that is none", "admin", "{" + ok + `,"expires_at":"soon"}`, http.StatusBadRequest, "expires_at"},
		{"an unknown SKU class", "admin", `{"tenant":"ferro","kind":"included","amount":"5","meter":"gpu_hours","sku_class":"Z900"}`, http.StatusBadRequest, "sku_class"},
		{"an unknown meter", "admin", `{"tenant":"ferro","kind":"included","amount":"5","meter":"furlongs"}`, http.StatusBadRequest, "meter"},
		{"another currency", "admin", "{" + ok + `,"currency":"EUR"}`, http.StatusBadRequest, "currency"},
		{"an unknown customer", "admin", `{"tenant":"nosuch","kind":"prepaid","amount":"10"}`, http.StatusBadRequest, "tenant"},
		{"an unknown kind", "admin", `{"tenant":"ferro","kind":"gift","amount":"10"}`, http.StatusBadRequest, "kind"},
		{"an unknown field", "admin", "{" + ok + `,"colour":"red"}`, http.StatusBadRequest, "colour"},
		{"malformed JSON", "admin", `{"tenant":"ferro",`, http.StatusBadRequest, "body"},
		{"two objects", "admin", "{" + ok + "}{" + ok + "}", http.StatusBadRequest, "one JSON object"},
		{"no body", "admin", "", http.StatusBadRequest, "body"},
		{"a priority that is text", "admin", "{" + ok + `,"priority":"high"}`, http.StatusBadRequest, "priority"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, data := r.send(t, http.MethodPost, "/v1/credits", c.key, c.body)
			var e struct{ Code, Message string }
			if code != c.status || json.Unmarshal(data, &e) != nil || !strings.Contains(e.Message, c.names) {
				t.Errorf("%d %s, want %d naming %q", code, data, c.status, c.names)
			}
		})
	}
	if after := r.ledger(t); len(after) != len(before) {
		t.Fatalf("refused grants were stored: %d grants, %d before", len(after), len(before))
	}

	// A grant, then its void: both kept in the ledger, the void once.
	gid := r.grant(t, `{"tenant":"ferro","kind":"promotional","amount":"25","effective_at":"2026-10-20T00:00:00Z","note":"launch"}`)
	for _, c := range []struct {
		key, path, body string
		status          int
	}{
		{"ferro", "/v1/credits/" + gid + "/void", `{"reason":"mine"}`, http.StatusForbidden},
		{"admin", "/v1/credits/" + gid + "/void", `{}`, http.StatusBadRequest},
		{"admin", "/v1/credits/" + gid + "/void", `{"reason":"  "}`, http.StatusBadRequest},
		{"admin", "/v1/credits/" + gid + "/void", `{"reason":"x","why":"y"}`, http.StatusBadRequest},
		{"admin", "/v1/credits/cg_000000000000/void", `{"reason":"gone"}`, http.StatusNotFound},
	} {
		if code, data := r.send(t, http.MethodPost, c.path, c.key, c.body); code != c.status {
			t.Errorf("void %s by %s: %d %s, want %d", c.body, c.key, code, data, c.status)
		}
	}
	var voided struct {
		ID         string     `json:"id"`
		VoidedAt   *time.Time `json:"voided_at"`
		VoidReason string     `json:"void_reason"`
		Amount     string     `json:"amount"`
	}
	code, data := r.send(t, http.MethodPost, "/v1/credits/"+gid+"/void", "admin", `{"reason":"launch cancelled"}`)
	if code != http.StatusOK || json.Unmarshal(data, &voided) != nil || voided.ID != gid || voided.VoidedAt == nil ||
		!voided.VoidedAt.Equal(creditNow) || voided.VoidReason != "launch cancelled" || voided.Amount != "25" {
		t.Fatalf("void: %d %s", code, data)
	}
	code, data = r.send(t, http.MethodPost, "/v1/credits/"+gid+"/void", "admin", `{"reason":"again"}`)
	if code != http.StatusOK || !strings.Contains(string(data), `"void_reason":"launch cancelled"`) {
		t.Errorf("a second void: %d %s, want the first kept", code, data)
	}
	var acc creditAccountJSON
	_, data = r.send(t, http.MethodGet, "/v1/credits?tenant=ferro", "ferro", "")
	if err := json.Unmarshal(data, &acc); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, b := range acc.Balances {
		if b.Grant.ID == gid {
			found = b.Grant.VoidedAt != nil && b.Grant.VoidReason == "launch cancelled" && eq(b.Used, "0")
		}
	}
	if !found {
		t.Errorf("the voided grant in ferro's account: %s", data)
	}
	ledger := r.ledger(t)
	if len(ledger) != len(before)+1 {
		t.Errorf("%d grants in the ledger, want %d", len(ledger), len(before)+1)
	}
}

// withCreditGrants serves credits on api over the fixture and gives its
// customers grants whose accounts hold every property of the API's
// answers: acme's prepaid dollar and ten included H100 hours, both used
// up in October, and its promotional credit expiring in three days (its
// depletion read from a forecast); globex's prepaid dollar, used up in
// October (its money depleted today); initech's
// monthly allowance of included hours with a rollover cap (config,
// recurring); and a prepaid grant of acme's to void, whose id it returns.
func (f *fixture) withCreditGrants(t *testing.T, api server.API) (server.API, string) {
	t.Helper()
	ctx := context.Background()
	cs := f.customers
	cs.Customers = slices.Clone(cs.Customers)
	capTwo := decimal.NewFromInt(2)
	for i, c := range cs.Customers {
		if c.Tenant == "initech" {
			cs.Customers[i].Credits = credits.Plan{Recurring: []credits.Recurring{{Series: "monthly", Kind: credits.Included,
				Amount: decimal.NewFromInt(5), Meter: pricing.GPUHours, Start: "2026-10", RolloverCap: &capTwo, Note: "five hours a month"}}}
		}
	}
	svc := creditsOf(t, f.store, cs, time.Now)
	now := time.Now().UTC()
	month := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	oct := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	var voidable string
	for i, g := range []credits.Grant{
		{Tenant: "acme", Kind: credits.Prepaid, Amount: decimal.NewFromInt(1), EffectiveAt: oct},
		{Tenant: "acme", Kind: credits.Included, Amount: decimal.NewFromInt(10), Meter: pricing.GPUHours, SKUClass: "H100-SXM5-80GB",
			EffectiveAt: oct, ExpiresAt: oct.AddDate(0, 1, 0)},
		{Tenant: "acme", Kind: credits.Promotional, Amount: decimal.NewFromInt(3), EffectiveAt: month, ExpiresAt: now.Add(72 * time.Hour),
			Source: "campaign", Note: "welcome"},
		{Tenant: "globex", Kind: credits.Prepaid, Amount: decimal.NewFromInt(1), EffectiveAt: oct},
		{Tenant: "acme", Kind: credits.Prepaid, Amount: decimal.NewFromInt(2)},
	} {
		stored, err := svc.Grant(ctx, g)
		if err != nil {
			t.Fatalf("grant %d: %v", i, err)
		}
		voidable = stored.ID
	}
	api.Credits, api.CreditSettings = svc, credits.DefaultSettings()
	return api, voidable
}
