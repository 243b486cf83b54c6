package reports

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpumeter/gpumeter/internal/fault"
)

func TestRendererForRefusesAnUnknownFormat(t *testing.T) {
	noPDF := func() (PDF, error) { return PDF{}, errors.New("no font") }
	if _, err := InvoiceRendererFor("docx", noPDF); !fault.IsValidation(err) {
		t.Errorf("invoice docx: %v", err)
	}
	if _, err := ChargebackRendererFor("docx", noPDF); !fault.IsValidation(err) {
		t.Errorf("chargeback docx: %v", err)
	}
	// The font is loaded only for a PDF, and its failure is bad input.
	if _, err := InvoiceRendererFor("html", noPDF); err != nil {
		t.Errorf("html: %v", err)
	}
	if _, err := InvoiceRendererFor("pdf", noPDF); !fault.IsValidation(err) {
		t.Errorf("pdf without its font: %v", err)
	}
}

func TestWriteFileAtomicLeavesNothingOnFailure(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.txt")
	if err := WriteFileAtomic(path, func(w io.Writer) error { _, err := io.WriteString(w, "ok"); return err }); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); !bytes.Equal(b, []byte("ok")) {
		t.Errorf("wrote %q", b)
	}
	if err := WriteFileAtomic(filepath.Join(dir, "bad.txt"), func(io.Writer) error { return errors.New("boom") }); err == nil {
		t.Error("a failed render was not reported")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("left %d files, want only out.txt", len(ents))
	}
}
