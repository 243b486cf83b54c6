package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// reports.pdf_font is relative to the config file; a file that is not a
// usable font fails where PDFs are made, naming the setting and the file.
func TestReportsPDFFont(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gpumeter.yaml")
	if err := os.WriteFile(path, []byte("reports:\n  pdf_font: fonts/cjk.ttf\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	font := filepath.Join(dir, "fonts/cjk.ttf")
	if cfg.Reports.PDFFont != font {
		t.Fatalf("pdf_font %q, want %q", cfg.Reports.PDFFont, font)
	}
	if _, err := cfg.Reports.PDF(); err == nil || !strings.Contains(err.Error(), "reports.pdf_font") || !strings.Contains(err.Error(), font) {
		t.Errorf("missing font file: error %v", err)
	}
	if err := os.MkdirAll(filepath.Dir(font), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(font, []byte("this is a note, not a font"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.Reports.PDF(); err == nil || !strings.Contains(err.Error(), "not a TrueType font") {
		t.Errorf("not a font: error %v", err)
	}
	if p, err := Default().Reports.PDF(); err != nil || p.Font != nil {
		t.Errorf("default: %+v, %v; want the embedded Go fonts", p, err)
	}
}
