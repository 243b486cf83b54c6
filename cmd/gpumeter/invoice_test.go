package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/browsertest"
	"github.com/gpumeter/gpumeter/internal/debiantest"
	"github.com/gpumeter/gpumeter/internal/meter"
	"github.com/gpumeter/gpumeter/reports"
	"github.com/gpumeter/gpumeter/tests/harness"
)

const invoiceCLIBook = `version: cli-2026
currency: {code: EUR, rounding: {minor_units: 2, mode: half_away_from_zero}}
skus:
  H100-SXM5-80GB:
    meters:
      gpu_hours: {unit_price: "2.50"}
`

// invoiceFixture is a migrated database holding October 2026 for three
// tenants, rolled up, and a config file naming them as customers.
func invoiceFixture(t *testing.T) (dsn, cfgPath string) {
	t.Helper()
	dsn = testDSN(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "book.yaml"), []byte(invoiceCLIBook), 0o644); err != nil {
		t.Fatal(err)
	}
	cfgPath = filepath.Join(dir, "gpumeter.yaml")
	cfg := `billing:
  issuer: {id: gc, name: GPU Cloud GmbH, number_prefix: "GC-"}
  customers:
    - {tenant: alpha, department: research, name: Alpha AG, currency: EUR, time_zone: Europe/Berlin, tax_rate: 19, book: book.yaml}
    - {tenant: beta, department: research, name: Beta & Söhne, currency: EUR, time_zone: Europe/Berlin, book: book.yaml}
    - {tenant: gamma, department: ops, name: Gamma, currency: EUR, time_zone: UTC, book: book.yaml}
`
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s := harness.OpenStore(t, dsn)
	var samples []collectors.Sample
	for h := time.Date(2026, 9, 30, 0, 0, 0, 0, time.UTC); h.Before(time.Date(2026, 11, 1, 1, 0, 0, 0, time.UTC)); h = h.Add(time.Hour) {
		for i, tenant := range []string{"alpha", "beta", "gamma"} {
			smp := collectors.Sample{Host: "h1", GPUUUID: fmt.Sprintf("GPU-%d", i), GPUModel: "H100-SXM5-80GB", SKU: "H100-SXM5-80GB",
				Tenant: tenant, Workload: "w", Start: h, End: h.Add(time.Hour),
				Values: meter.Values{GPUMicroseconds: uint64(i+1) * 1_800_000_000}}
			smp.ID = collectors.SampleID(smp.Host, smp.GPUUUID, smp.Tenant, smp.Workload, smp.Start)
			samples = append(samples, smp)
		}
	}
	if err := s.InsertSamples(ctx, samples); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := gpumeter(t, "--clickhouse", dsn, "rollup", "--scheduled"); code != 0 {
		t.Fatalf("rollup: %s", stderr)
	}
	return dsn, cfgPath
}

type listedInvoice struct {
	ID, Number, Tenant, Status string
	TotalMinor                 int64                     `json:"total_minor"`
	Lines                      []billing.Line            `json:"lines"`
	Credits                    []billing.CreditStatement `json:"credits"`
}

func listInvoices(t *testing.T, dsn, cfg string) []listedInvoice {
	t.Helper()
	code, out, stderr := gpumeter(t, "--clickhouse", dsn, "--config", cfg, "invoice", "list", "--json")
	if code != 0 {
		t.Fatalf("invoice list: %d %s", code, stderr)
	}
	var got []listedInvoice
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("invoice list --json: %v\n%s", err, out)
	}
	return got
}

// Two `invoice run` processes at once for the same period: one set of
// invoices, numbers without gaps or repeats.
func TestInvoiceRunTwoProcessesAtOnce(t *testing.T) {
	dsn, cfg := invoiceFixture(t)
	var wg sync.WaitGroup
	outs := make([]bytes.Buffer, 2)
	errs := make([]bytes.Buffer, 2)
	codes := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(os.Args[0], "--clickhouse", dsn, "--config", cfg, "invoice", "run", "--period", "2026-10", "--json")
			cmd.Env = append(os.Environ(), "GPUMETER_TEST_AS_MAIN=1")
			cmd.Stdout, cmd.Stderr = &outs[i], &errs[i]
			codes[i] = cmd.Run()
		}()
	}
	wg.Wait()
	finalized := 0
	for i := range 2 {
		if codes[i] != nil {
			t.Fatalf("run %d: %v\n%s", i, codes[i], errs[i].String())
		}
		var rep struct{ Outcomes []reports.Outcome }
		if err := json.Unmarshal(outs[i].Bytes(), &rep); err != nil {
			t.Fatalf("run %d output: %v\n%s", i, err, outs[i].String())
		}
		for _, o := range rep.Outcomes {
			switch o.Action {
			case "finalized":
				finalized++
			case "unchanged":
			default:
				t.Errorf("run %d: %+v", i, o)
			}
		}
	}
	if finalized != 3 {
		t.Errorf("%d invoices finalized by the two runs together, want 3 (one per customer)", finalized)
	}
	got := listInvoices(t, dsn, cfg)
	var numbers []string
	for _, inv := range got {
		numbers = append(numbers, inv.Number)
	}
	sort.Strings(numbers)
	if strings.Join(numbers, " ") != "GC-000001 GC-000002 GC-000003" {
		t.Fatalf("numbers %v, want GC-000001..3 once each", numbers)
	}
}

// The CLI around one invoice: show, render in every format, void, and
// the next run's new invoice for the voided period.
func TestInvoiceCLI(t *testing.T) {
	dsn, cfg := invoiceFixture(t)
	g := []string{"--clickhouse", dsn, "--config", cfg}
	run := func(args ...string) string {
		t.Helper()
		code, out, stderr := gpumeter(t, append(g, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s", args, code, stderr)
		}
		return out
	}
	out := run("invoice", "run", "--period", "2026-10", "--draft", "--quiet")
	if !strings.Contains(out, "3 created") {
		t.Fatalf("draft run: %s", out)
	}
	if got := listInvoices(t, dsn, cfg); len(got) != 3 || got[0].Number != "" || got[0].Status != "draft" {
		t.Fatalf("drafts %+v", got)
	}
	// alpha: 1 GPU-hour half the time... 0.5 GPU per hour over Berlin's
	// October (745 h) at 2.50 = 931.25, 19 % tax 176.94.
	out = run("invoice", "finalize", "--period", "2026-10")
	if !strings.Contains(out, "finalized 3 invoice(s)") || !strings.Contains(out, "alpha: finalized GC-000001 1108.19 EUR") {
		t.Fatalf("finalize: %s", out)
	}
	show := run("invoice", "show", "GC-000001")
	for _, want := range []string{"GC-000001", "alpha/2026-10/1", "931.25", "176.94", "1108.19", "Europe/Berlin"} {
		if !strings.Contains(show, want) {
			t.Errorf("show lacks %q:\n%s", want, show)
		}
	}
	doc := run("invoice", "show", "alpha/2026-10/1", "--json")
	dir := t.TempDir()
	for _, f := range []string{"json", "csv", "html", "pdf"} {
		path := filepath.Join(dir, "inv."+f)
		run("invoice", "render", "GC-000001", "--format", f, "--out", path)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		switch f {
		case "json":
			if strings.TrimSpace(string(data)) != strings.TrimSpace(doc) {
				t.Errorf("rendered JSON differs from the stored document")
			}
		case "pdf":
			if !bytes.HasPrefix(data, []byte("%PDF")) {
				t.Errorf("not a PDF")
			}
		default:
			if !strings.Contains(string(data), "1108.19") {
				t.Errorf("%s lacks the total 1108.19", f)
			}
		}
	}
	out = run("invoice", "void", "GC-000002", "--reason", "wrong address")
	if !strings.Contains(out, "voided beta/2026-10/1 (GC-000002): wrong address") {
		t.Fatalf("void: %s", out)
	}
	out = run("invoice", "run", "--period", "2026-10", "--tenant", "beta")
	if !strings.Contains(out, "beta: finalized GC-000004") {
		t.Fatalf("re-invoicing a voided period: %s", out)
	}
	got := listInvoices(t, dsn, cfg)
	status := map[string]string{}
	for _, inv := range got {
		status[inv.ID] = inv.Status + " " + inv.Number
	}
	if status["beta/2026-10/1"] != "void GC-000002" || status["beta/2026-10/2"] != "finalized GC-000004" {
		t.Fatalf("after void and re-run: %v", status)
	}
}

func TestInvoiceCLIRejectsBadInput(t *testing.T) {
	dsn, cfg := invoiceFixture(t)
	g := []string{"--clickhouse", dsn, "--config", cfg}
	cases := []struct {
		name string
		args []string
		msg  string
	}{
		{"no subcommand", []string{"invoice"}, "want a subcommand"},
		{"unknown subcommand", []string{"invoice", "pay"}, "unknown subcommand"},
		{"run without period", []string{"invoice", "run"}, "--period is required"},
		{"run bad period", []string{"invoice", "run", "--period", "2026-13"}, "want YYYY-MM"},
		{"run unknown tenant", []string{"invoice", "run", "--period", "2026-10", "--tenant", "nobody"}, "not a customer"},
		{"show nothing", []string{"invoice", "show"}, "want one invoice"},
		{"show unknown", []string{"invoice", "show", "GC-999999"}, "no such invoice"},
		{"void without reason", []string{"invoice", "void", "GC-000001"}, "--reason is required"},
		{"render bad format", []string{"invoice", "render", "GC-000001", "--format", "docx"}, "docx"},
		{"finalize nothing", []string{"invoice", "finalize"}, "either"},
		{"list bad period", []string{"invoice", "list", "--period", "last"}, "--period"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := gpumeter(t, append(g, tc.args...)...)
			if code != 2 || !strings.Contains(stderr, tc.msg) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, stderr, tc.msg)
			}
		})
	}
	// Without a billing section there is nobody to invoice.
	code, _, stderr := gpumeter(t, "--clickhouse", dsn, "invoice", "run", "--period", "2026-10")
	if code != 2 || !strings.Contains(stderr, "no customers") {
		t.Fatalf("no billing config: exit %d %q", code, stderr)
	}
	// A period whose rollups are not closed yet waits, and says why.
	code, out, _ := gpumeter(t, append(g, "invoice", "run", "--period", "2099-01")...)
	if code != 0 || !strings.Contains(out, "waiting") {
		t.Fatalf("a future period: exit %d %q", code, out)
	}
}

// What make demo runs after loading its data: the demo's billing config
// invoices every demo customer for November and renders the PDFs, and
// its chargeback covers every SKU the demo fleet holds.
func TestDemoInvoicesNovember(t *testing.T) {
	dsn := testDSN(t)
	cfg := filepath.Join("..", "..", "internal", "demo", "billing", "gpumeter.yaml")
	for _, args := range [][]string{
		{"demo"},
		{"collect", "--simulate", "--hosts", "2", "--vgpu", "--seed", "1", "--start", "2026-11-05T00:00:00Z", "--duration", "6h", "--listen", ""},
		{"rollup", "--scheduled"},
	} {
		if code, _, stderr := gpumeter(t, append([]string{"--clickhouse", dsn}, args...)...); code != 0 {
			t.Fatalf("%v: exit %d\n%s", args, code, stderr)
		}
	}
	g := []string{"--clickhouse", dsn, "--config", cfg}
	code, out, stderr := gpumeter(t, append(g, "invoice", "run", "--period", "2026-11", "--quiet")...)
	if code != 0 || !strings.Contains(out, "5 customer(s): 5 finalized") {
		t.Fatalf("invoice run: exit %d\n%s\n%s", code, out, stderr)
	}
	dir := t.TempDir()
	code, out, stderr = gpumeter(t, append(g, "invoice", "render", "--period", "2026-11", "--format", "pdf", "--out-dir", dir)...)
	if code != 0 || !strings.Contains(out, "rendered 5 invoice(s)") {
		t.Fatalf("render: exit %d\n%s\n%s", code, out, stderr)
	}
	pdfs, _ := filepath.Glob(filepath.Join(dir, "DGC-*.pdf"))
	if len(pdfs) != 5 {
		t.Fatalf("%d PDFs in %s, want 5", len(pdfs), dir)
	}
	html := filepath.Join(dir, "chargeback.html")
	if code, _, stderr := gpumeter(t, append(g, "chargeback", "--period", "2026-11", "--format", "html", "--out", html)...); code != 0 {
		t.Fatalf("chargeback: exit %d\n%s", code, stderr)
	}
	lookAtInvoices(t, g, pdfs)
	lookAtChargeback(t, html)
}

// lookAtChargeback opens the demo's chargeback HTML at a desktop's width
// and a phone's: nothing scrolls sideways (the tables scroll in their
// boxes), SKU names are never broken, quantities print to their unit's
// places; a screenshot at each width is kept as an artefact.
func lookAtChargeback(t *testing.T, html string) {
	page, err := os.ReadFile(html)
	if err != nil {
		t.Fatal(err)
	}
	if long := regexp.MustCompile(`\d\.\d{4,} (kWh|GPU-hours)`).FindString(string(page)); long != "" {
		t.Errorf("chargeback prints %q: more places than the unit's", long)
	}
	if !strings.Contains(string(page), `td.skus { font-size: 7.5pt; color: #333; white-space: nowrap; }`) {
		t.Error("SKU cells may break inside a name")
	}
	art := harness.ArtifactDir(t)
	for _, width := range []int{1400, 400} {
		if n := browsertest.Overflow(t, html, width); n > 0 {
			t.Errorf("at %d px the chargeback page is %d px too wide", width, n)
		}
		shot := filepath.Join(art, fmt.Sprintf("chargeback-%d.png", width))
		browsertest.Headless(t, "file://"+html, "--screenshot="+shot, fmt.Sprintf("--window-size=%d,1600", width), "--hide-scrollbars")
	}
}

// lookAtInvoices reads the demo's November invoices as their customers
// get them: every PDF's text (pdftotext) against its stored document, and
// the longest invoice in every format, keeping a PNG of its PDF's first
// and last pages (pdftoppm) and of its HTML (chromium) as artefacts.
func lookAtInvoices(t *testing.T, g []string, pdfs []string) {
	pdftotext := debiantest.Tool(t, "poppler-utils", "pdftotext")
	// What a customer should never read: config paths, engine ids, exact
	// amounts beside rounded ones, a tax line naming itself.
	banned := []string{"reservations[", "exact ", "(line ", "on demand on demand", "tier 0"}
	for _, p := range meter.PricedMeters {
		banned = append(banned, p.Name)
	}
	var longest string
	var longestPages int
	for _, pdf := range pdfs {
		out, err := exec.Command(pdftotext, "-layout", "-enc", "UTF-8", pdf, "-").CombinedOutput()
		if err != nil {
			t.Fatalf("pdftotext %s: %v\n%s", pdf, err, out)
		}
		text := string(out)
		number := strings.TrimSuffix(filepath.Base(pdf), ".pdf")
		var doc billing.Invoice
		code, js, stderr := gpumeter(t, append(g, "invoice", "show", number, "--json")...)
		if code != 0 || json.Unmarshal([]byte(js), &doc) != nil {
			t.Fatalf("invoice show %s --json: exit %d\n%s", number, code, stderr)
		}
		// The demo's issuer gives 30 days; initech has 14 of its own.
		if days := map[bool]int{true: 14, false: 30}[doc.Tenant == "initech"]; doc.DueDate == "" || doc.PaymentDays != days {
			t.Errorf("%s (%s): due %q, %d days; want %d days' date", number, doc.Tenant, doc.DueDate, doc.PaymentDays, days)
		}
		pages := strings.Count(strings.TrimSuffix(text, "\f"), "\f") + 1
		for _, want := range []string{"Invoice " + number, "Due", doc.DueDate, "Bank transfer to IBAN DE89", "Total", doc.Money(doc.TotalMinor) + " " + doc.Currency.Code,
			fmt.Sprintf("Page %d/%d", pages, pages)} {
			if !strings.Contains(text, want) {
				t.Errorf("%s: no %q in\n%s", number, want, text)
			}
		}
		for _, l := range doc.Lines {
			if !strings.Contains(text, doc.Money(l.AmountMinor)) {
				t.Errorf("%s line %d: no amount %s", number, l.No, doc.Money(l.AmountMinor))
			}
		}
		for _, b := range banned {
			if strings.Contains(text, b) {
				t.Errorf("%s reads %q:\n%s", number, b, text)
			}
		}
		if len(doc.Unpriced) > 0 && !strings.Contains(text, "Appendix: usage not priced") {
			t.Errorf("%s: %d unpriced meters and no appendix", number, len(doc.Unpriced))
		}
		if pages > longestPages {
			longest, longestPages = number, pages
		}
	}
	art := harness.ArtifactDir(t)
	pdf := filepath.Join(filepath.Dir(pdfs[0]), longest+".pdf")
	pdftoppm := debiantest.Tool(t, "poppler-utils", "pdftoppm")
	for _, page := range []int{1, longestPages} {
		prefix := filepath.Join(art, fmt.Sprintf("invoice-pdf-page%d", page))
		p := strconv.Itoa(page)
		if out, err := exec.Command(pdftoppm, "-png", "-r", "60", "-singlefile", "-f", p, "-l", p, pdf, prefix).CombinedOutput(); err != nil {
			t.Fatalf("pdftoppm: %v\n%s", err, out)
		}
		if st, err := os.Stat(prefix + ".png"); err != nil || st.Size() < 10_000 {
			t.Errorf("page %d as PNG: %v", page, err)
		}
	}
	htmlFile := filepath.Join(art, "invoice.html")
	if code, _, stderr := gpumeter(t, append(g, "invoice", "render", longest, "--format", "html", "--out", htmlFile)...); code != 0 {
		t.Fatalf("render html: exit %d\n%s", code, stderr)
	}
	page, err := os.ReadFile(htmlFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range banned {
		if strings.Contains(string(page), b) {
			t.Errorf("%s.html reads %q", longest, b)
		}
	}
	shot := filepath.Join(art, "invoice-html.png")
	browsertest.Headless(t, "file://"+htmlFile, "--screenshot="+shot, "--window-size=1000,1400", "--hide-scrollbars")
	if st, err := os.Stat(shot); err != nil || st.Size() < 10_000 {
		t.Errorf("HTML screenshot: %v", err)
	}
	// CSV and JSON are read by programs: they parse, and say when it is due.
	code, csvText, stderr := gpumeter(t, append(g, "invoice", "render", longest, "--format", "csv")...)
	rows, err := csv.NewReader(strings.NewReader(csvText)).ReadAll()
	if code != 0 || err != nil || len(rows) < 2 || rows[0][len(rows[0])-2] != "due_date" || rows[1][len(rows[0])-2] == "" {
		t.Errorf("csv: exit %d, %v, %.200q\n%s", code, err, csvText, stderr)
	}
}
