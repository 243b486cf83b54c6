package config

import (
	"fmt"
	"path/filepath"

	"github.com/gpumeter/gpumeter/reports"
)

// Reports configures the renderers.
type Reports struct {
	// PDFFont is a TrueType file (.ttf) every PDF is drawn in instead of
	// the embedded Go fonts, for scripts they lack (CJK); relative to the
	// config file. Empty: the Go fonts (Latin, Greek, Cyrillic).
	PDFFont string `yaml:"pdf_font"`
}

// RelativeTo resolves the font file against the config's directory.
func (r Reports) RelativeTo(dir string) Reports {
	if r.PDFFont != "" && !filepath.IsAbs(r.PDFFont) {
		r.PDFFont = filepath.Join(dir, r.PDFFont)
	}
	return r
}

// PDF is the PDF renderer in the configured font. The file is read here,
// where it is used, not when the config is loaded: only PDF commands need
// it.
func (r Reports) PDF() (reports.PDF, error) {
	if r.PDFFont == "" {
		return reports.PDF{}, nil
	}
	font, err := reports.LoadPDFFont(r.PDFFont)
	if err != nil {
		return reports.PDF{}, fmt.Errorf("reports.pdf_font: %w", err)
	}
	return reports.PDF{Font: font}, nil
}
