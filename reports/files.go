package reports

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/chargeback"
	"github.com/gpumeter/gpumeter/internal/fault"
)

// IsTerminal says whether w is a terminal (a file that is a TTY): a PDF
// is not written there, and progress bars are drawn only there.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// ProgressBar draws a bar on w when it is a terminal, and nothing
// otherwise (a log file or a pipe gets the summary only).
func ProgressBar(w io.Writer, what string) billing.Progress {
	if !IsTerminal(w) {
		return nil
	}
	var bar *progressbar.ProgressBar
	return func(done, total int) {
		if bar == nil {
			bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(w), progressbar.OptionSetDescription(what),
				progressbar.OptionShowCount(), progressbar.OptionClearOnFinish(), progressbar.OptionThrottle(100*time.Millisecond))
		}
		_ = bar.Set(done)
	}
}

// WriteFileAtomic writes through a temporary file renamed into place, so
// a failed render leaves no half-written document behind.
func WriteFileAtomic(path string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".render-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(f.Name())
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// InvoiceRenderer renders one stored invoice.
type InvoiceRenderer func(io.Writer, billing.StoredInvoice) error

// InvoiceFormats are the formats an invoice renders in.
const InvoiceFormats = "json, csv, html or pdf"

// InvoiceRendererFor picks the renderer of a format; pdf gives the PDF
// renderer (its font), asked for only when the format is pdf.
func InvoiceRendererFor(format string, pdf func() (PDF, error)) (InvoiceRenderer, error) {
	switch format {
	case "json":
		return func(w io.Writer, si billing.StoredInvoice) error { return WriteInvoiceJSON(w, si.Document) }, nil
	case "csv":
		return func(w io.Writer, si billing.StoredInvoice) error { return WriteInvoiceCSV(w, si.Invoice) }, nil
	case "html":
		return func(w io.Writer, si billing.StoredInvoice) error { return WriteInvoiceHTML(w, si.Invoice) }, nil
	case "pdf":
		p, err := pdf()
		if err != nil {
			return nil, fault.Validation(err)
		}
		return func(w io.Writer, si billing.StoredInvoice) error { return p.WriteInvoice(w, si.Invoice) }, nil
	}
	return nil, fault.Validationf("%q: want %s", format, InvoiceFormats)
}

// WriteInvoiceFiles renders every invoice of invs that is not void into
// dir, one file per invoice named by its number (a draft by its id) and
// format, and prints a line per file to w, then the count.
func WriteInvoiceFiles(w io.Writer, dir, format, period string, invs []billing.StoredInvoice, render InvoiceRenderer) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("out dir: %w", err)
	}
	ew := &errWriter{w: w}
	n := 0
	for _, si := range invs {
		inv := si.Invoice
		if inv.Status == billing.StatusVoid {
			continue
		}
		name := cmp.Or(inv.Number, "draft-"+strings.ReplaceAll(inv.ID, "/", "-"))
		path := filepath.Join(dir, name+"."+format)
		if err := WriteFileAtomic(path, func(f io.Writer) error { return render(f, si) }); err != nil {
			return err
		}
		fmt.Fprintf(ew, "%-10s %-14s %12s %s  %s\n", inv.Tenant, dash(inv.Number), inv.Money(inv.TotalMinor), inv.Currency.Code, path)
		n++
	}
	fmt.Fprintf(ew, "rendered %d invoice(s) of %s into %s\n", n, period, dir)
	return ew.err
}

// ChargebackRendererFor picks the renderer of a chargeback format; pdf
// gives the PDF renderer (its font), asked for only when the format is
// pdf.
func ChargebackRendererFor(format string, pdf func() (PDF, error)) (func(io.Writer, chargeback.Report) error, error) {
	switch format {
	case "csv":
		return WriteChargebackCSV, nil
	case "html":
		return WriteChargebackHTML, nil
	case "pdf":
		p, err := pdf()
		if err != nil {
			return nil, fault.Validation(err)
		}
		return p.WriteChargeback, nil
	case "json":
		return WriteChargebackJSON, nil
	}
	return nil, fault.Validationf("%s: want csv, html, pdf or json", format)
}
