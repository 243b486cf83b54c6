//go:build chdb

package store

import (
	"encoding/json"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/auth"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/credits"
	"github.com/gpumeter/gpumeter/internal/quota"
	"github.com/gpumeter/gpumeter/internal/rollup"
	"github.com/gpumeter/gpumeter/internal/usage"
	"github.com/gpumeter/gpumeter/internal/webhook"
	"github.com/gpumeter/gpumeter/pricing"
)

// Statement is one SQL statement the store builds, with its bind arguments,
// exported so that a check can run the store's own SQL on another server
// (internal/chdbcheck runs it on chDB, ClickHouse 26.x, beside 18.16).
type Statement struct {
	Name string
	SQL  string
	Args []any
	// Exec: the statement writes (INSERT … SELECT, ALTER) and returns no
	// rows.
	Exec bool
	// Rows: the statement is an INSERT naming its columns, sent as one
	// batch of these rows, as the store sends it (PrepareBatch); Args is
	// empty. Exec is set.
	Rows [][]any
	// Empty: the read is expected to return no rows (what it checks is
	// that nothing is left).
	Empty bool
	// ServerTime lists the result columns stamped with the server's clock
	// (now()): two servers stamp them apart, so a check compares them as
	// "close to now" rather than exactly.
	ServerTime []int
}

// Database is the argument that stands for the database a statement runs
// in (the store passes its configured database): a check binds each
// server's own.
type Database struct{}

// CheckedStatements is a representative set of the statements the store
// runs, in an order that works on a migrated database holding samples in
// [from, to): the hourly rollup and its tombstones (at version) first, then
// reads of raw samples and of the rollups, for every tenant and for tenant.
// Every read has a deterministic row order (ORDER BY, or a caller sorts).
func CheckedStatements(from, to time.Time, tenant string, version uint64) []Statement {
	from, to = from.UTC(), to.UTC()
	var out []Statement
	out = append(out,
		Statement{Name: "rollup", SQL: rollupSQL, Args: []any{version, from, to}, Exec: true},
		Statement{Name: "rollup tombstones", SQL: tombstoneSQL, Args: []any{version, from, to, version, from, to}, Exec: true},
	)
	usage := []struct {
		name string
		q    usageQuery
	}{
		{"usage raw total", usageQuery{From: from, To: to}},
		{"usage raw by tenant, department, sku per hour", usageQuery{From: from, To: to, Bucket: usage.BucketHour,
			GroupBy: []usage.Dimension{usage.DimTenant, usage.DimDepartment, usage.DimSKU}}},
		{"usage raw by host, workload per day", usageQuery{From: from, To: to, Bucket: usage.BucketDay,
			GroupBy: []usage.Dimension{usage.DimHost, usage.DimWorkload}}},
		{"usage raw of a tenant per month", usageQuery{From: from, To: to, Bucket: usage.BucketMonth, Tenant: tenant,
			GroupBy: []usage.Dimension{usage.DimSKU}}},
		{"usage hourly by tenant, sku per hour", usageQuery{From: from, To: to, Bucket: usage.BucketHour, Source: usage.SourceHourly,
			GroupBy: []usage.Dimension{usage.DimTenant, usage.DimSKU}}},
		{"usage hourly of a tenant per day", usageQuery{From: from, To: to, Bucket: usage.BucketDay, Source: usage.SourceHourly,
			Tenant: tenant, GroupBy: []usage.Dimension{usage.DimDepartment}}},
	}
	for _, u := range usage {
		sql, args := u.q.toSQL()
		out = append(out, Statement{Name: u.name, SQL: sql, Args: args})
	}
	sql, args := billingUsageSQL(from, to, "")
	out = append(out, Statement{Name: "billing usage", SQL: sql, Args: args})
	sql, args = billingUsageSQL(from, to, tenant)
	out = append(out, Statement{Name: "billing usage of a tenant", SQL: sql, Args: args})
	out = append(out, tenantHoursStatements(from, to)...)
	out = append(out, Statement{Name: "live concurrency (argMax)", SQL: liveConcurrencySQL, Args: []any{from, to}})
	out = append(out,
		Statement{Name: "chargeback usage", SQL: chargebackUsageSQL, Args: []any{from, to}},
		Statement{Name: "rollup versions", SQL: rollupVersionsSQL, Args: []any{from, to}},
		// Every copy of the check's data was inserted after 1970.
		Statement{Name: "hours inserted since", SQL: hoursInsertedSinceSQL, Args: []any{time.Unix(1, 0).UTC(), to}},
	)
	sql, args = FleetQuery{Window: to.Sub(from)}.toSQL(from)
	out = append(out, Statement{Name: "fleet", SQL: sql, Args: args})
	out = append(out, Statement{Name: "slurm job usage", SQL: slurmJobUsageSQL, Args: []any{from, to}})

	// Insights (internal/insights): holdings, hourly series, model demand.
	for _, iq := range []struct {
		name string
		q    InsightsQuery
	}{{"insights", InsightsQuery{From: from, To: to}}, {"insights of a tenant", InsightsQuery{From: from, To: to, Tenant: tenant}},
		{"insights of a department key", InsightsQuery{From: from, To: to, Scope: auth.Scope{Kind: auth.KindDepartment, Name: "ml"}}}} {
		sql, args = iq.q.holdingsSQL()
		out = append(out, Statement{Name: iq.name + " holdings", SQL: sql, Args: args})
		sql, args = iq.q.hourlyGPUSQL()
		out = append(out, Statement{Name: iq.name + " hourly gpu_hours", SQL: sql, Args: args})
	}
	sql, args = InsightsQuery{From: from, To: to}.demandSQL()
	out = append(out,
		Statement{Name: "insights model demand", SQL: sql, Args: args},
		Statement{Name: "insights gpus by model", SQL: gpusByModelSQL, Args: []any{from, to}},
		Statement{Name: "insights first hour", SQL: firstHourSQL},
	)
	return out
}

// tenantHoursStatements are the fleet's reads of usage per tenant
// (credit_usage.go), of both sources, for every tenant.
func tenantHoursStatements(from, to time.Time) []Statement {
	var out []Statement
	for _, src := range []usage.Source{usage.SourceHourly, usage.SourceRaw} {
		sql, args := tenantHoursQuery{From: from, To: to, FirstTenant: "", LastTenant: "zzzz", Source: src}.toSQL()
		out = append(out, Statement{Name: "tenant hours " + string(src), SQL: sql, Args: args})
	}
	return out
}

// CheckedRecords is every statement of invoices.go, keys.go, leases.go,
// webhooks.go and retention.go, with rows made at at: each write followed
// by the reads that show what it stored. Run them once, in order, on a
// migrated database whose raw samples all lie in rawMonth: the last writes
// close that month, record it dropped and drop its raw partition
// (retention), and the last read checks it is gone. at should be recent:
// newer servers expire operational logs by TTL (schemas/0013).
func CheckedRecords(at, rawMonth time.Time) ([]Statement, error) {
	at = at.UTC().Truncate(time.Second)
	month := time.Date(rawMonth.UTC().Year(), rawMonth.UTC().Month(), 1, 0, 0, 0, 0, time.UTC)
	var out []Statement
	read := func(name, sql string, args ...any) {
		out = append(out, Statement{Name: name, SQL: sql, Args: args})
	}
	batch := func(name, sql string, rows ...[]any) {
		out = append(out, Statement{Name: name, SQL: sql, Rows: rows, Exec: true})
	}

	// API keys: two saved, one revoked (written again at version 2), and
	// the audit of a key, with quotes and backslashes in its text.
	admin := auth.Key{ID: "k-admin", SecretSHA256: "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8",
		Scope: auth.Scope{Kind: auth.KindAdmin}, Note: "ops: Ann's key", CreatedAt: at.Add(-48 * time.Hour)}
	portal := auth.Key{ID: "k-portal", SecretSHA256: "6b86b273ff34fce19d6b804eff5a3f5747ada4ea2d2d9e8f8b1a0d8b3b4e5f60",
		Scope: auth.Scope{Kind: auth.KindTenant, Name: "acme"}, Portal: true, Note: `C:\acme "portal"`,
		CreatedAt: at.Add(-time.Hour), ExpiresAt: at.Add(30 * 24 * time.Hour)}
	batch("save keys", insertKeySQL, keyRow(admin, 1), keyRow(portal, 1))
	read("keys", keysSQL)
	read("key", keySQL, portal.ID)
	revoked := portal
	revoked.RevokedAt = at
	batch("revoke key", insertKeySQL, keyRow(revoked, 2))
	read("revoked key", keySQL, portal.ID)
	read("keys after a revocation", keysSQL)

	// Credit grants: two saved (one with a rollover cap, one never
	// expiring), one voided (written again at version 2).
	cap30 := decimal.RequireFromString("30")
	prepaid := credits.Grant{ID: "cg_1", Tenant: "acme", Kind: credits.Prepaid, Amount: decimal.RequireFromString("500.123456789"),
		Currency: "USD", EffectiveAt: at, CreatedAt: at, Note: `C:\acme "first"`}
	hours := credits.Grant{ID: "cg_2", Tenant: "acme", Kind: credits.Included, Amount: decimal.RequireFromString("100"),
		Meter: pricing.GPUHours, SKUClass: "H100-SXM5-80GB", EffectiveAt: at, ExpiresAt: at.AddDate(0, 1, 0), Series: "plan",
		RolloverCap: &cap30, CreatedAt: at}
	batch("save grants", insertGrantSQL, grantRow(prepaid, 1), grantRow(hours, 1))
	read("grants of a tenant", grantsSQL, "acme", "acme")
	voided := prepaid
	voided.VoidedAt, voided.VoidReason = &at, "granted twice"
	batch("void grant", insertGrantSQL, grantRow(voided, 2))
	read("voided grant", grantSQL, "cg_1")
	read("all grants", grantsSQL, "", "")

	// Quota admissions: two parts held, one released at version 2.
	held := quota.Admitted{ID: "adm-1-1", Tenant: "acme", Department: "research", GPUModel: "H100-SXM5-80GB",
		Demand: quota.Demand{GPUs: decimal.RequireFromString("0.375"), GPUHours: decimal.RequireFromString("0.75")}, Expires: at.Add(10 * time.Minute)}
	second := held
	second.Part = 1
	batch("save admissions", insertAdmissionSQL, admissionRow(held), admissionRow(second))
	held.Released = true
	batch("release admission", insertAdmissionSQL, admissionRow(held))
	read("held admissions", heldAdmissionsSQL, at)
	// Credit holds: money only, and money with included hours of a class
	// and of any SKU.
	batch("save credit holds", insertCreditHoldSQL, append(
		creditHoldRows(quota.CreditHold{Tenant: "astro", Hold: credits.Hold{ID: "adm-1-4", Money: decimal.RequireFromString("12.5"), Until: at.Add(time.Hour)}}),
		creditHoldRows(quota.CreditHold{Tenant: "astro", Hold: credits.Hold{ID: "adm-1-5", Money: decimal.Zero, Until: at.Add(time.Hour),
			Hours: map[string]decimal.Decimal{"H100-SXM5-80GB": decimal.RequireFromString("0.428571428571428571"), "": decimal.RequireFromString("1")}}})...)...)
	read("credit holds", creditHoldsSQL, at.Add(-24*time.Hour))
	// Retention prunes what ended past the admission log's retention: an
	// old part and hold are deleted, the reads above stay as they were
	// whether or not the delete (a background mutation) has finished.
	// Nothing reads the ended rows: 26.x may expire them by TTL (0018)
	// as soon as they are written.
	pruneBefore := at.Add(-rollup.AdmissionLogRetention)
	ended := pruneBefore.Add(-time.Hour)
	old := quota.Admitted{ID: "adm-0-1", Tenant: "acme", GPUModel: "H100-SXM5-80GB", Demand: quota.Demand{GPUs: decimal.NewFromInt(1)}, Expires: ended}
	batch("save an ended admission", insertAdmissionSQL, admissionRow(old))
	batch("save an ended credit hold", insertCreditHoldSQL,
		creditHoldRows(quota.CreditHold{Tenant: "astro", Hold: credits.Hold{ID: "adm-0-1", Money: decimal.NewFromInt(3), Until: ended}})...)
	for _, t := range admissionLogTables {
		out = append(out, Statement{Name: "prune " + t.table, SQL: pruneEndedSQL(t.table, t.end), Args: []any{pruneBefore}, Exec: true})
	}
	read("held admissions after pruning", heldAdmissionsSQL, at)
	read("credit holds after pruning", creditHoldsSQL, at.Add(-24*time.Hour))
	batch("record audit", insertAuditSQL,
		auditRow(auth.AuditEntry{At: at, KeyID: admin.ID, Scope: "admin", Method: "GET", Route: "/v1/usage",
			Path: "/v1/usage?tenant=o'brien&x=a\\b", Status: 200, Remote: "10.0.0.7:51234", RequestID: "req-1"}),
		auditRow(auth.AuditEntry{At: at.Add(time.Second), KeyID: admin.ID, Scope: "admin", Method: "POST", Route: "/v1/keys",
			Path: "/v1/keys", Status: 403, Remote: "[::1]:40000", RequestID: "req-2"}),
		auditRow(auth.AuditEntry{At: at, KeyID: portal.ID, Scope: "tenant:acme", Method: "GET", Route: "/v1/invoices",
			Path: "/v1/invoices", Status: 200, Remote: "10.0.0.8:1", RequestID: "req-3"}))
	read("audit of a key", auditSQL, admin.ID)

	// The billing lease: two claims, one renewed, the other released.
	const lease = "invoices/gpu-cloud"
	out = append(out,
		Statement{Name: "claim lease", SQL: claimLeaseSQL, Args: []any{lease, "host-a:101"}, Exec: true},
		Statement{Name: "claim lease again", SQL: claimLeaseSQL, Args: []any{lease, "host-b:202"}, Exec: true},
		Statement{Name: "renew lease", SQL: renewLeaseSQL, Args: []any{lease, "host-a:101"}, Exec: true},
		Statement{Name: "release lease", SQL: releaseLeaseSQL, Args: []any{lease, "host-b:202"}, Exec: true},
		Statement{Name: "lease claims", SQL: leaseClaimsSQL, Args: []any{lease}, ServerTime: []int{1, 2}},
	)

	// Webhooks: two events in the outbox and three delivery attempts.
	var events [][]any
	for _, ev := range []webhook.Event{
		{ID: "ev-1", Type: "quota.soft_limit", CreatedAt: at, Data: json.RawMessage(`{"tenant":"acme","used":"0.8"}`)},
		{ID: "ev-2", Type: "invoice.finalized", CreatedAt: at.Add(time.Minute), Data: json.RawMessage(`{"number":"GC-2026-0001","note":"it's \"done\""}`)},
	} {
		row, err := eventRow(ev)
		if err != nil {
			return nil, err
		}
		events = append(events, row)
	}
	batch("save events", insertEventSQL, events...)
	batch("record attempts", insertAttemptSQL,
		attemptRow(webhook.Attempt{EventID: "ev-1", Endpoint: "https://hooks.example/a", N: 1, At: at.Add(time.Second),
			Status: 503, Error: "503 Service Unavailable", Duration: 1500 * time.Millisecond}),
		attemptRow(webhook.Attempt{EventID: "ev-1", Endpoint: "https://hooks.example/a", N: 2, At: at.Add(31 * time.Second),
			Status: 200, Duration: 42 * time.Millisecond}),
		attemptRow(webhook.Attempt{EventID: "ev-2", Endpoint: "https://hooks.example/b", N: 1, At: at.Add(time.Minute),
			Error: "dial tcp: connection refused", Duration: 3 * time.Millisecond}))
	read("events", eventsSQL, at)
	read("events of a type", eventsOfTypeSQL, webhook.TypeInvoiceFinalized, at)
	read("attempts", attemptsSQL, at)

	// Invoices: acme's draft, then finalized at revision 2; globex's draft.
	acme, err := checkedInvoice(at, "acme", "ml", nil)
	if err != nil {
		return nil, err
	}
	final, err := checkedInvoice(at, "acme", "ml", func(inv *billing.Invoice) {
		inv.Status, inv.Number, inv.Seq, inv.SequenceKey = billing.StatusFinalized, "GC-2026-0001", 1, "gpu-cloud/2026"
	})
	if err != nil {
		return nil, err
	}
	final.Revision = 2
	globex, err := checkedInvoice(at, "globex", "research", nil)
	if err != nil {
		return nil, err
	}
	batch("save invoice lines", insertInvoiceLinesSQL, append(invoiceLineRows(acme), invoiceLineRows(globex)...)...)
	batch("save invoices", insertInvoicesSQL, invoiceRow(acme, at), invoiceRow(globex, at))
	batch("save finalized invoice lines", insertInvoiceLinesSQL, invoiceLineRows(final)...)
	batch("save finalized invoice", insertInvoicesSQL, invoiceRow(final, at.Add(time.Minute)))
	read("invoices of an issuer", invoicesSQL, "gpu-cloud")
	for _, q := range []struct {
		name string
		q    InvoiceQuery
	}{
		{"invoices for admin", InvoiceQuery{Issuer: "gpu-cloud", Scope: auth.Scope{Kind: auth.KindAdmin}, Drafts: true}},
		{"invoices for a tenant", InvoiceQuery{Issuer: "gpu-cloud", Scope: auth.Scope{Kind: auth.KindTenant, Name: "acme"},
			Period: acme.Invoice.PeriodLabel}},
		// A department API key reviews drafts (globex's is one here); the
		// tenant's read above leaves them out.
		{"invoices for a department, paged", InvoiceQuery{Issuer: "gpu-cloud", Scope: auth.Scope{Kind: auth.KindDepartment, Name: "research"},
			Tenant: "globex", After: "a", Limit: 10, Drafts: true}},
	} {
		sql, args := q.q.toSQL()
		read(q.name, sql, args...)
	}
	sql, args := invoiceForSQL("gpu-cloud", auth.Scope{Kind: auth.KindTenant, Name: "acme"}, "GC-2026-0001", false)
	read("invoice by number", sql, args...)
	sql, args = invoiceForSQL("gpu-cloud", auth.Scope{Kind: auth.KindAdmin}, globex.Invoice.ID, true)
	read("invoice by id", sql, args...)

	// Retention: the month is invoiced (closed), recorded as dropped, and
	// its raw partition dropped.
	read("raw months", rawMonthsSQL, Database{})
	batch("mark period closed", insertClosedPeriodSQL, closedPeriodRow(month, at))
	read("closed periods", closedPeriodsSQL)
	batch("mark raw month dropped", insertRawDroppedSQL, rawDroppedRow(month, at), rawDroppedRow(month.AddDate(0, -1, 0), at))
	read("dropped raw months", rawDroppedMonthsSQL)
	batch("raise the retention floor", insertRawDroppedBefore, rawDroppedBeforeRow(month, 1), rawDroppedBeforeRow(month.AddDate(0, 1, 0), 2))
	read("retention floor", rawDroppedBeforeSQL)
	out = append(out,
		Statement{Name: "drop raw month", SQL: dropPartitionSQL("usage_samples", month), Exec: true},
		Statement{Name: "raw months after the drop", SQL: rawMonthsSQL, Args: []any{Database{}}, Empty: true},
	)
	return out, nil
}

// AdmissionLogTTL is, for each admission log table, the read that tells
// PruneAdmissionLog the table expires its rows by TTL (migration 0018): a
// check runs it where that migration applied (1) and where not (0).
func AdmissionLogTTL() []Statement {
	var out []Statement
	for _, t := range admissionLogTables {
		out = append(out, Statement{Name: "TTL of " + t.table, SQL: tableTTLSQL, Args: []any{Database{}, t.table}})
	}
	return out
}

// checkedInvoice is a draft invoice of tenant for at's month with lines of
// each kind the store writes, amounts past the ninth place (stored
// rounded), changed by edit before its document is made.
func checkedInvoice(at time.Time, tenant, dept string, edit func(*billing.Invoice)) (billing.StoredInvoice, error) {
	from := time.Date(at.Year(), at.Month(), 1, 0, 0, 0, 0, time.UTC)
	to := from.AddDate(0, 1, 0)
	d := decimal.RequireFromString
	inv := &billing.Invoice{
		ID: tenant + "/" + from.Format("2006-01") + "/1", Status: billing.StatusDraft,
		Issuer: billing.Party{ID: "gpu-cloud", Name: "GPU Cloud"}, Customer: billing.Party{ID: tenant, Name: tenant, Department: dept},
		Tenant: tenant, PeriodLabel: from.Format("2006-01"), PeriodStart: from, PeriodEnd: to, TimeZone: "UTC",
		Currency: pricing.Currency{Code: "USD", MinorUnits: 2},
		Lines: []billing.Line{
			{No: 1, Kind: pricing.KindReserved, SKU: "H100-SXM5-80GB", Meter: pricing.GPUHours, Description: "reserved 2 GPUs",
				From: from, To: to, Quantity: d("1440"), Unit: "GPU-h", Amount: d("2880.000000000"), AmountMinor: 288000},
			{No: 2, Kind: pricing.KindOnDemand, SKU: "H100-SXM5-80GB/3g.40gb", Meter: pricing.GPUHours, Description: "on demand",
				From: from, To: to, Quantity: d("12.345678901234"), Unit: "GPU-h", Amount: d("21.6049382771"), AmountMinor: 2160},
			{No: 3, Kind: billing.KindAdjustment, SKU: "H100-SXM5-80GB", Meter: "energy_kwh", Description: "late usage",
				From: from.AddDate(0, -1, 0), To: from, Quantity: d("-0.5"), Unit: "kWh", Amount: d("-0.05"), AmountMinor: -5,
				AdjustsPeriod: from.AddDate(0, -1, 0).Format("2006-01"), AdjustsInvoice: tenant + "/" + from.AddDate(0, -1, 0).Format("2006-01") + "/1"},
		},
		SubtotalMinor: 290155, TotalMinor: 290155, BookVersion: "test-2026", BookDigest: "sha256:ab12", InputsHash: "sha256:cd34",
		RollupVersion: 7, CreatedAt: at,
	}
	if edit != nil {
		edit(inv)
	}
	doc, err := inv.Document()
	if err != nil {
		return billing.StoredInvoice{}, err
	}
	return billing.StoredInvoice{Invoice: inv, Revision: 1, Document: doc}, nil
}
