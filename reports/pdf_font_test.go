package reports_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"
	"golang.org/x/image/font/gofont/goregular"

	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/chargeback"
	"github.com/gpumeter/gpumeter/internal/debiantest"
	"github.com/gpumeter/gpumeter/pricing"
	"github.com/gpumeter/gpumeter/reports"
)

// cjkCustomer is the name issue 31 found printed as
// "Initech .ód. Spó.ka .... — .mega".
const cjkCustomer = "Initech Łódź Spółka 株式会社 — Ωmega"

// vlGothic is a TrueType font with Latin, Greek, Cyrillic and Japanese
// (Debian's fonts-vlgothic), for the configured-font path.
const vlGothic = "/usr/share/fonts/truetype/vlgothic/VL-PGothic-Regular.ttf"

// unicodeInvoice is a small finalized invoice whose parties have the
// given names and addresses.
func unicodeInvoice(t *testing.T, customer, issuer billing.Party, description string) *billing.Invoice {
	t.Helper()
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	inv := &billing.Invoice{
		ID: "initech/2026-03/1", Number: "GM-000051", Status: billing.StatusFinalized, Tenant: "initech", PeriodLabel: "2026-03",
		PeriodStart: start, PeriodEnd: start.AddDate(0, 1, 0), TimeZone: "UTC",
		Currency: pricing.Currency{Code: "EUR", MinorUnits: 2, Rounding: pricing.HalfAwayFromZero},
		Issuer:   issuer, Customer: customer,
		Lines: []billing.Line{{No: 1, Kind: pricing.KindOnDemand, SKU: "H100-SXM5-80GB", Meter: pricing.GPUHours,
			Description: description, From: start, To: start.AddDate(0, 1, 0), Quantity: decimal.NewFromInt(2),
			Unit: "gpu_hours", Amount: decimal.RequireFromString("5.00"), AmountMinor: 500}},
		SubtotalMinor: 500, TotalMinor: 500, CreatedAt: start.AddDate(0, 1, 1),
	}
	if err := inv.Validate(); err != nil {
		t.Fatal(err)
	}
	return inv
}

// The embedded Go fonts print Latin Extended, Greek and Cyrillic as they
// are: pdftotext reads back every name exactly.
func TestPDFPrintsLatinGreekAndCyrillic(t *testing.T) {
	customer := billing.Party{Name: "Initech Łódź Spółka — Ωmega", Address: []string{"ул. Тверская 7", "125009 Москва"}}
	issuer := billing.Party{Name: "Ελληνικές GPU Α.Ε.", Address: []string{"Øresundsvej 3", "İstanbul Şişli", "Ærøskøbing ŒŸ"}}
	inv := unicodeInvoice(t, customer, issuer, "Rechenzeit für Ωmega-Projekt (Ярослав)")
	var pdf bytes.Buffer
	if err := reports.WriteInvoicePDF(&pdf, inv); err != nil {
		t.Fatal(err)
	}
	text := pdfText(t, pdf.Bytes())
	for _, want := range append(append([]string{customer.Name, issuer.Name, "Ωmega-Projekt (Ярослав)"}, customer.Address...), issuer.Address...) {
		if !strings.Contains(text, want) {
			t.Errorf("no %q in\n%s", want, text)
		}
	}

	in := chargebackInput(chargeback.IdleOwnRow)
	for i := range in.Rows {
		if in.Rows[i].Department == "physics" {
			in.Rows[i].Department = "Φυσική"
		}
		if in.Rows[i].Tenant == "alice" {
			in.Rows[i].Tenant = "Łucja-Ярослава"
		}
	}
	text = chargebackPDFText(t, in, reports.WriteChargebackPDF)
	for _, want := range []string{"Φυσική", "Łucja-Ярослава", "Subtotal Φυσική"} {
		if !strings.Contains(text, want) {
			t.Errorf("chargeback: no %q in\n%s", want, text)
		}
	}
}

// A text the font has no glyph for is refused, naming the text, the
// character and the font, and nothing is written: no dots, no boxes.
func TestPDFRefusesTextTheFontCannotShow(t *testing.T) {
	plain := billing.Party{Name: "Issuer"}
	for _, tc := range []struct {
		name     string
		customer string
		desc     string
		text     string
		r        rune
	}{
		{"CJK customer name, no CJK font", cjkCustomer, "GPU time", cjkCustomer, '株'},
		{"emoji in a line description", "Initech", "GPU time 🚀", "On demand: GPU time 🚀", '🚀'},
		{"invalid UTF-8 in a customer name", "Init\xffech", "GPU time", "Init\xffech", '\uFFFD'},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv := unicodeInvoice(t, billing.Party{Name: tc.customer}, plain, tc.desc)
			var pdf bytes.Buffer
			err := reports.WriteInvoicePDF(&pdf, inv)
			var ge *reports.GlyphError
			if !errors.As(err, &ge) {
				t.Fatalf("error %v, want a GlyphError", err)
			}
			if ge.Text != tc.text || ge.Rune != tc.r || !strings.Contains(ge.Font, "Go") {
				t.Errorf("error names text %q, rune %q, font %q; want %q, %q, Go", ge.Text, ge.Rune, ge.Font, tc.text, tc.r)
			}
			fix := "reports.pdf_font" // a font with the glyph fixes it; no font fixes invalid UTF-8
			if tc.r == '\uFFFD' {
				fix = "not valid UTF-8"
			}
			if msg := err.Error(); !strings.Contains(msg, inv.ID) || !strings.Contains(msg, fix) {
				t.Errorf("message %q: want the invoice and %q", msg, fix)
			}
			if pdf.Len() != 0 {
				t.Errorf("%d bytes written", pdf.Len())
			}
		})
	}

	// The last page's footer is drawn when the document closes: its texts
	// are checked all the same (before, they printed as blanks).
	inv := unicodeInvoice(t, billing.Party{Name: "Initech"}, plain, "GPU time")
	inv.BookVersion = "価格表-2026"
	var footer bytes.Buffer
	if err := reports.WriteInvoicePDF(&footer, inv); !errors.As(err, new(*reports.GlyphError)) || footer.Len() != 0 {
		t.Errorf("a footer the font cannot show: error %v, %d bytes written", err, footer.Len())
	}

	in := chargebackInput(chargeback.IdleByUse)
	in.Rows[0].Tenant = "東京ラボ"
	r, err := chargeback.Allocate(in)
	if err != nil {
		t.Fatal(err)
	}
	var pdf bytes.Buffer
	var ge *reports.GlyphError
	if err := reports.WriteChargebackPDF(&pdf, r); !errors.As(err, &ge) || !strings.Contains(ge.Text, "東京ラボ") || pdf.Len() != 0 {
		t.Errorf("chargeback with tenant 東京ラボ: error %v, %d bytes written", err, pdf.Len())
	}
}

// A configured TrueType font serves scripts the Go fonts lack: the CJK
// name prints exactly, in the invoice and the chargeback report, and a
// line that wraps between CJK characters loses none of them.
func TestPDFConfiguredFontPrintsCJK(t *testing.T) {
	path := debiantest.File(t, "fonts-vlgothic", vlGothic)
	font, err := reports.LoadPDFFont(path)
	if err != nil {
		t.Fatal(err)
	}
	p := reports.PDF{Font: font}
	// Characters nothing else on the invoice has, wider than the
	// description column.
	const chars = "計算機資源利用料"
	long := strings.Repeat(chars, 12)
	inv := unicodeInvoice(t, billing.Party{Name: cjkCustomer, Address: []string{"東京都千代田区1-1"}}, billing.Party{Name: "Issuer"}, long)
	var pdf, again bytes.Buffer
	if err := p.WriteInvoice(&pdf, inv); err != nil {
		t.Fatal(err)
	}
	if err := p.WriteInvoice(&again, inv); err != nil || !bytes.Equal(pdf.Bytes(), again.Bytes()) {
		t.Errorf("two renderings differ (error %v)", err)
	}
	text := pdfText(t, pdf.Bytes())
	for _, want := range []string{cjkCustomer, "東京都千代田区1-1", "Total"} {
		if !strings.Contains(text, want) {
			t.Errorf("no %q in\n%s", want, text)
		}
	}
	var got strings.Builder
	for _, r := range text {
		if strings.ContainsRune(chars, r) {
			got.WriteRune(r)
		}
	}
	if got.String() != long || strings.Count(text, "\n") < 3 {
		t.Errorf("wrapped description lost characters:\n got %s\nwant %s", got.String(), long)
	}

	in := chargebackInput(chargeback.IdleByUse)
	in.Rows[0].Tenant = "東京ラボ"
	if text := chargebackPDFText(t, in, p.WriteChargeback); !strings.Contains(text, "東京ラボ") {
		t.Errorf("chargeback: no 東京ラボ in\n%s", text)
	}
}

// A configured font must be one fpdf can embed, with glyphs for the
// PDFs' ASCII labels; anything else is refused when it is loaded.
func TestLoadPDFFontRefusesUnusableFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	restricted := append([]byte(nil), goregular.TTF...)
	setFSType(t, restricted, 0x0002)
	for _, tc := range []struct {
		name, path, want string
	}{
		{"missing file", filepath.Join(dir, "none.ttf"), "no such file"},
		{"not a font", write("notes.ttf", []byte("just some text, not a font")), "not a TrueType font"},
		{"collection", write("c.ttc", append([]byte("ttcf"), make([]byte, 64)...)), "font collection"},
		{"CFF outlines", write("c.otf", append([]byte("OTTO"), make([]byte, 64)...)), "CFF outlines"},
		{"truncated", write("t.ttf", goregular.TTF[:200]), "past the end"},
		{"embedding forbidden", write("r.ttf", restricted), "forbids embedding"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := reports.LoadPDFFont(tc.path)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.path) {
				t.Errorf("error %v: want %q naming %s", err, tc.want, tc.path)
			}
		})
	}
	// The Go font itself, given as a file, is a usable configured font.
	font, err := reports.LoadPDFFont(write("go.ttf", goregular.TTF))
	if err != nil {
		t.Fatal(err)
	}
	var pdf bytes.Buffer
	inv := unicodeInvoice(t, billing.Party{Name: "Ωmega"}, billing.Party{Name: "Issuer"}, "GPU time")
	if err := (reports.PDF{Font: font}).WriteInvoice(&pdf, inv); err != nil || !strings.Contains(pdfText(t, pdf.Bytes()), "Ωmega") {
		t.Errorf("Go Regular from a file: error %v", err)
	}
}

// setFSType sets the OS/2 table's embedding permissions of a TrueType
// font in place.
func setFSType(t *testing.T, ttf []byte, fsType uint16) {
	t.Helper()
	n := int(ttf[4])<<8 | int(ttf[5])
	for i := range n {
		rec := 12 + 16*i
		if string(ttf[rec:rec+4]) == "OS/2" {
			off := int(ttf[rec+8])<<24 | int(ttf[rec+9])<<16 | int(ttf[rec+10])<<8 | int(ttf[rec+11])
			ttf[off+8], ttf[off+9] = byte(fsType>>8), byte(fsType)
			return
		}
	}
	t.Fatal("no OS/2 table")
}

// "José" typed decomposed (e + U+0301, as macOS file names give it) is
// the "José" the font has: drawn composed, not refused. A right-to-left
// script is refused even where a font has its glyphs: drawn unshaped
// left to right it would print reversed and unjoined.
func TestPDFComposesAndRefusesRightToLeft(t *testing.T) {
	plain := billing.Party{Name: "Issuer"}
	inv := unicodeInvoice(t, billing.Party{Name: "Jose\u0301 Nun\u0303ez"}, plain, "GPU time")
	var pdf bytes.Buffer
	if err := reports.WriteInvoicePDF(&pdf, inv); err != nil {
		t.Fatalf("decomposed accents: %v", err)
	}
	if text := pdfText(t, pdf.Bytes()); !strings.Contains(text, "José Nuñez") {
		t.Errorf("no %q in\n%s", "José Nuñez", text)
	}
	for _, name := range []string{"شركة الحوسبة", "מחשוב בע״מ"} {
		inv := unicodeInvoice(t, billing.Party{Name: name}, plain, "GPU time")
		pdf.Reset()
		err := reports.WriteInvoicePDF(&pdf, inv)
		var ge *reports.GlyphError
		if !errors.As(err, &ge) || !strings.Contains(err.Error(), "right-to-left") || pdf.Len() != 0 {
			t.Errorf("%s: error %v, %d bytes written; want a right-to-left refusal", name, err, pdf.Len())
		}
	}
}

// chargebackPDFText allocates in, renders the report with write and
// returns the PDF's text.
func chargebackPDFText(t *testing.T, in chargeback.Input, write func(io.Writer, chargeback.Report) error) string {
	t.Helper()
	r, err := chargeback.Allocate(in)
	if err != nil {
		t.Fatal(err)
	}
	var pdf bytes.Buffer
	if err := write(&pdf, r); err != nil {
		t.Fatal(err)
	}
	return pdfText(t, pdf.Bytes())
}
