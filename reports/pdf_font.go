package reports

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"codeberg.org/go-pdf/fpdf"
	"golang.org/x/image/font/gofont/gobold"
	"golang.org/x/image/font/gofont/goitalic"
	"golang.org/x/image/font/gofont/goregular"
	"golang.org/x/image/font/sfnt"
	"golang.org/x/text/unicode/norm"

	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/chargeback"
)

// PDF writes invoices and chargeback reports as PDF in one TrueType font,
// embedded (as the subset of glyphs used) in every document. The zero
// value uses the Go fonts (golang.org/x/image/font/gofont, BSD licence:
// LICENSE-gofont), which cover Latin with its extensions, Greek and
// Cyrillic; a configured font (LoadPDFFont) serves other scripts such as
// CJK. A text with a character the font has no glyph for is refused with a
// *GlyphError and nothing is written: the PDF never shows a substitute.
type PDF struct {
	// Font is the font every text is drawn in; nil means the Go fonts.
	Font *PDFFont
}

// WriteInvoicePDF writes inv in the Go fonts: see PDF.WriteInvoice.
func WriteInvoicePDF(w io.Writer, inv *billing.Invoice) error { return PDF{}.WriteInvoice(w, inv) }

// WriteChargebackPDF writes r in the Go fonts: see PDF.WriteChargeback.
func WriteChargebackPDF(w io.Writer, r chargeback.Report) error {
	return PDF{}.WriteChargeback(w, r)
}

// font is p's font, the Go fonts by default.
func (p PDF) font() (*PDFFont, error) {
	if p.Font != nil {
		return p.Font, nil
	}
	return goPDFFont()
}

// PDFFont is a TrueType font the PDF renderers can embed: a face per
// style ("" regular, "B" bold, "I" italic), or one face for all of them.
type PDFFont struct {
	name  string // what errors call it
	faces map[string]pdfFace
}

type pdfFace struct {
	ttf  []byte
	font *sfnt.Font
}

// goPDFFont is the Go fonts: regular, bold and italic.
//
// Parsed once: a parsed sfnt.Font serves concurrent renders, each drawing
// with a Buffer of its own.
var goPDFFont = sync.OnceValues(parseGoPDFFont)

func parseGoPDFFont() (*PDFFont, error) {
	f := &PDFFont{name: "Go (embedded)", faces: map[string]pdfFace{}}
	for style, ttf := range map[string][]byte{"": goregular.TTF, "B": gobold.TTF, "I": goitalic.TTF} {
		sf, err := sfnt.Parse(ttf)
		if err != nil {
			return nil, fmt.Errorf("pdf font Go %q: %w", style, err)
		}
		f.faces[style] = pdfFace{ttf: ttf, font: sf}
	}
	return f, nil
}

// LoadPDFFont reads a TrueType font file (.ttf, TrueType outlines) for
// every text of the PDFs, regular and emphasised alike. It must cover at
// least printable ASCII, since the PDFs' labels are English; font
// collections (.ttc) and OpenType fonts with CFF outlines (most .otf) are
// refused, because fpdf embeds neither.
func LoadPDFFont(path string) (*PDFFont, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("pdf font: %w", err)
	}
	return parsePDFFont(path, data)
}

// parsePDFFont is LoadPDFFont on the file's bytes; name is what errors
// call the font.
func parsePDFFont(name string, ttf []byte) (*PDFFont, error) {
	if err := checkTrueType(ttf); err != nil {
		return nil, fmt.Errorf("pdf font %s: %w", name, err)
	}
	sf, err := sfnt.Parse(ttf)
	if err != nil {
		return nil, fmt.Errorf("pdf font %s: %w", name, err)
	}
	f := &PDFFont{name: name, faces: map[string]pdfFace{"": {ttf: ttf, font: sf}}}
	var buf sfnt.Buffer
	for r := rune(' '); r <= '~'; r++ {
		if !f.faces[""].has(&buf, r) {
			return nil, fmt.Errorf("pdf font %s: no glyph for %q: the font must cover at least printable ASCII, as the PDFs' labels use it", name, r)
		}
	}
	if err := f.tryEmbed(); err != nil {
		return nil, fmt.Errorf("pdf font %s: %w", name, err)
	}
	return f, nil
}

// tryEmbed embeds the font in a scratch document, so that a font fpdf
// cannot read fails here, once, rather than in every render.
func (f *PDFFont) tryEmbed() (err error) {
	defer func() {
		// fpdf indexes the font's tables without bounds checks: a
		// damaged file must be an error, not a crash.
		if p := recover(); p != nil {
			err = fmt.Errorf("fpdf cannot read it: %v", p)
		}
	}()
	doc := fpdf.New("P", "mm", "A4", "")
	doc.AddUTF8FontFromBytes("trial", "", f.faces[""].ttf)
	doc.SetFont("trial", "", 10)
	doc.AddPage()
	var ascii strings.Builder
	for r := rune(' '); r <= '~'; r++ {
		ascii.WriteRune(r)
	}
	doc.CellFormat(0, 5, ascii.String(), "", 1, "L", false, 0, "")
	if err := doc.Output(io.Discard); err != nil {
		return fmt.Errorf("fpdf cannot embed it: %w", err)
	}
	return nil
}

// has says whether the face maps r to a glyph. fpdf reads only the
// font's Basic Multilingual Plane (cmap format 4), so a rune above it
// cannot be drawn whatever the font holds.
func (fc pdfFace) has(buf *sfnt.Buffer, r rune) bool {
	// U+FFFD is what invalid UTF-8 decodes to: drawing it would be a
	// substitute.
	if r > 0xFFFF || r == utf8.RuneError || rightToLeft(r) {
		return false
	}
	g, err := fc.font.GlyphIndex(buf, r)
	return err == nil && g != 0
}

// rightToLeft is a character of a script written right to left (and
// joined): fpdf draws runes left to right unshaped, so such a text would
// print reversed and unjoined, altered, whatever glyphs the font holds.
func rightToLeft(r rune) bool {
	return unicode.In(r, unicode.Arabic, unicode.Hebrew, unicode.Syriac, unicode.Thaana, unicode.Nko, unicode.Samaritan, unicode.Mandaic)
}

// GlyphError is a text the PDF's font has no glyph for. The PDF is not
// written: printing a box or a dot instead would change a name or an
// amount without anyone noticing.
type GlyphError struct {
	Text string // the whole text, e.g. the customer's name
	Rune rune   // the first character the font lacks
	Font string // the font's name
}

func (e *GlyphError) Error() string {
	if rightToLeft(e.Rune) {
		return fmt.Sprintf("text %q: %q (%U) is in a right-to-left script, which the PDF renderer cannot shape; use the json, csv or html format",
			e.Text, e.Rune, e.Rune)
	}
	if e.Rune == utf8.RuneError {
		return fmt.Sprintf("text %q: not valid UTF-8 (or holds U+FFFD, the replacement character), which a PDF does not print", e.Text)
	}
	return fmt.Sprintf("text %q: font %s has no glyph for %q (%U); configure a PDF font that covers it (reports.pdf_font, docs/invoices.md)",
		e.Text, e.Font, e.Rune, e.Rune)
}

// pdfDoc is a document being drawn in a PDFFont: it selects the font's
// faces, checks every text against the font's character map before it is
// drawn, and wraps lines itself.
type pdfDoc struct {
	pdf   *fpdf.Fpdf
	font  *PDFFont
	style string          // the current face
	added map[string]bool // faces added to the document, by style
	buf   sfnt.Buffer
	err   error // the first text the font cannot show
}

// pdfFamily is the family name the font is registered under.
const pdfFamily = "text"

func newPDFDoc(pdf *fpdf.Fpdf, font *PDFFont) *pdfDoc {
	return &pdfDoc{pdf: pdf, font: font, added: map[string]bool{}}
}

// pageSetup is what a report's PDF sets before its first page.
type pageSetup struct {
	// title names the document; pages after the first start with
	// "title (continued)".
	title string
	// created and modified come from the report, never the clock: the
	// same report, the same bytes.
	created, modified time.Time
	// margin is every side's margin in mm; bottom, the bottom one, leaves
	// room for the footer.
	margin, bottom float64
	// lineHeight and gap are the "(continued)" line's height and the
	// space below it.
	lineHeight, gap float64
	// continued draws what else a page after the first starts with.
	continued func()
	// footer draws each page's footer, in the footer's font.
	footer func()
}

// setup sets the document's metadata, margins, header and footer.
func (d *pdfDoc) setup(s pageSetup) {
	pdf := d.pdf
	pdf.SetCreationDate(s.created.UTC())
	pdf.SetModificationDate(s.modified.UTC())
	pdf.SetCatalogSort(true) // resources in a fixed order: the same report, the same bytes
	pdf.SetCompression(true)
	pdf.SetTitle(s.title, true)
	pdf.SetCreator("gpumeter", true)
	pdf.SetMargins(s.margin, s.margin, s.margin)
	pdf.SetAutoPageBreak(true, s.bottom)
	pdf.AliasNbPages("{nb}")
	pdf.SetHeaderFunc(func() {
		if pdf.PageNo() == 1 {
			return
		}
		d.setStyle("", 8, 85)
		pdf.CellFormat(0, s.lineHeight, d.text(s.title+" (continued)"), "", 1, "R", false, 0, "")
		pdf.Ln(s.gap)
		s.continued()
	})
	pdf.SetFooterFunc(func() {
		pdf.SetY(-s.bottom + 5)
		d.setStyle("", 7, 85)
		s.footer()
	})
}

// setStyle sets the font (style "", "B" or "I"), size in points, and grey
// level of the text (0 black).
func (d *pdfDoc) setStyle(style string, size float64, grey int) {
	d.setFont(style, size)
	d.pdf.SetTextColor(grey, grey, grey)
}

// setFont selects style ("", "B" or "I") at size points; a font with one
// face draws every style in it.
func (d *pdfDoc) setFont(style string, size float64) {
	if _, ok := d.font.faces[style]; !ok {
		style = ""
	}
	// Faces are added when first used, so a document embeds no face it
	// does not draw in.
	if !d.added[style] {
		d.pdf.AddUTF8FontFromBytes(pdfFamily, style, d.font.faces[style].ttf)
		d.added[style] = true
	}
	d.pdf.SetFont(pdfFamily, style, size)
	d.style = style
}

// text checks that the current face can show every character of s
// (line breaks aside) and returns s. The first text it cannot show is
// kept as the document's error, and its unshowable characters are blanked
// in what is returned, since that document is never written.
func (d *pdfDoc) text(s string) string {
	// Composed form: "é" typed as e + U+0301 (macOS file names, some
	// forms) is the "é" the font has.
	s = norm.NFC.String(s)
	face := d.font.faces[d.style]
	bad := rune(-1)
	for _, r := range s {
		if r != '\n' && !face.has(&d.buf, r) {
			bad = r
			break
		}
	}
	if bad < 0 {
		return s
	}
	if d.err == nil {
		d.err = &GlyphError{Text: strings.TrimSpace(s), Rune: bad, Font: d.font.name}
	}
	return strings.Map(func(r rune) rune {
		if r != '\n' && !face.has(&d.buf, r) {
			return ' '
		}
		return r
	}, s)
}

// split checks s and wraps it to lines that fit width in the current
// font. It breaks at spaces, between CJK characters, or, in a word
// longer than the width, between any two characters; unlike fpdf's own
// wrapping it never drops a character.
func (d *pdfDoc) split(s string, width float64) []string {
	s = d.text(s)
	limit := width - 2*d.pdf.GetCellMargin()
	var out []string
	for _, para := range strings.Split(strings.TrimRight(strings.ReplaceAll(s, "\r", ""), "\n"), "\n") {
		out = append(out, d.wrap([]rune(para), limit)...)
	}
	if len(out) == 0 {
		out = []string{""}
	}
	return out
}

// wrap breaks one paragraph into lines at most limit wide.
func (d *pdfDoc) wrap(rs []rune, limit float64) []string {
	widths := make([]float64, len(rs))
	for i, r := range rs {
		widths[i] = d.pdf.GetStringWidth(string(r))
	}
	var out []string
	for {
		// n: how many runes fit, at least one.
		n, w := 0, 0.0
		for n < len(rs) && (n == 0 || w+widths[n] <= limit) {
			w += widths[n]
			n++
		}
		if n == len(rs) {
			return append(out, string(rs))
		}
		cut, skip := n, 0
		for k := n; k > 0; k-- {
			if rs[k] == ' ' {
				cut, skip = k, 1
				break
			}
			if wideBreak(rs[k-1]) || wideBreak(rs[k]) {
				cut = k
				break
			}
		}
		out = append(out, string(rs[:cut]))
		rs, widths = rs[cut+skip:], widths[cut+skip:]
	}
}

// wideBreak says whether a line may break beside r without a space: CJK
// text has none between words.
func wideBreak(r rune) bool {
	return unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana, unicode.Hangul)
}

// multiCell prints s wrapped to w (0: to the right margin) in lines h
// high, with border "" or "1" (a box around the whole block), and moves
// to the start of the next line, as fpdf's MultiCell does.
func (d *pdfDoc) multiCell(w, h float64, s, border, align string) {
	pdf := d.pdf
	left, _, right, _ := pdf.GetMargins()
	if w == 0 {
		pageWidth, _ := pdf.GetPageSize()
		w = pageWidth - right - pdf.GetX()
	}
	lines := d.split(s, w)
	for i, l := range lines {
		b := ""
		if border == "1" {
			switch {
			case len(lines) == 1:
				b = "1"
			case i == 0:
				b = "LTR"
			case i == len(lines)-1:
				b = "LRB"
			default:
				b = "LR"
			}
		}
		pdf.CellFormat(w, h, l, b, 2, align, false, 0, "")
	}
	pdf.SetX(left)
}

// output writes the document unless a text could not be shown. The last
// page's footer is drawn when the document closes, so it is closed (and
// that footer's texts checked) before the check.
func (d *pdfDoc) output(w io.Writer) error {
	if d.err == nil {
		d.pdf.Close()
	}
	if d.err != nil {
		return d.err
	}
	return d.pdf.Output(w)
}

// checkTrueType refuses, with a reason, a font file fpdf's TrueType
// reader cannot use. That reader prints to standard output instead of
// failing on some of these, which would corrupt a PDF written there.
func checkTrueType(b []byte) error {
	if len(b) < 12 {
		return errors.New("not a font file: too short")
	}
	switch string(b[:4]) {
	case "ttcf":
		return errors.New("a font collection (.ttc): extract one font to a .ttf")
	case "OTTO":
		return errors.New("an OpenType font with CFF outlines: fpdf embeds only TrueType outlines (.ttf)")
	case "\x00\x01\x00\x00", "true":
	default:
		return errors.New("not a TrueType font")
	}
	tables := map[string][]byte{}
	n := int(binary.BigEndian.Uint16(b[4:]))
	for i := range n {
		rec := 12 + 16*i
		if rec+16 > len(b) {
			return errors.New("truncated table directory")
		}
		off, size := binary.BigEndian.Uint32(b[rec+8:]), binary.BigEndian.Uint32(b[rec+12:])
		if uint64(off)+uint64(size) > uint64(len(b)) {
			return fmt.Errorf("table %q runs past the end of the file", b[rec:rec+4])
		}
		tables[string(b[rec:rec+4])] = b[off : off+size]
	}
	for _, need := range []struct {
		tag string
		min int
	}{{"head", 54}, {"hhea", 36}, {"maxp", 6}, {"hmtx", 0}, {"cmap", 4}, {"name", 6}, {"loca", 0}, {"glyf", 0}} {
		if t, ok := tables[need.tag]; !ok || len(t) < need.min {
			return fmt.Errorf("no usable %q table (TrueType outlines need glyf and loca)", need.tag)
		}
	}
	u16 := func(t []byte, at int) int { return int(binary.BigEndian.Uint16(t[at:])) }
	head, hhea, name := tables["head"], tables["hhea"], tables["name"]
	switch {
	case u16(name, 0) != 0:
		return fmt.Errorf("name table format %d: fpdf reads format 0", u16(name, 0))
	case u16(head, 50) > 1 || u16(head, 52) != 0:
		return errors.New("unknown head table loca or glyph data format")
	case u16(hhea, 32) != 0 || u16(hhea, 34) == 0:
		return errors.New("unknown hhea metric format or no horizontal metrics")
	}
	if os2, ok := tables["OS/2"]; ok && len(os2) >= 10 {
		if fs := u16(os2, 8); fs == 0x0002 || fs&0x0300 != 0 {
			return fmt.Errorf("its licence forbids embedding or subsetting it (OS/2 fsType %#04x)", fs)
		}
	}
	cmap := tables["cmap"]
	for i := range u16(cmap, 2) {
		rec := 4 + 8*i
		if rec+8 > len(cmap) {
			break
		}
		platform, encoding := u16(cmap, rec), u16(cmap, rec+2)
		off := int(binary.BigEndian.Uint32(cmap[rec+4:]))
		if (platform == 3 && encoding == 1 || platform == 0) && off+2 <= len(cmap) && u16(cmap, off) == 4 {
			return nil
		}
	}
	return errors.New("no Unicode character map of format 4, the only one fpdf reads")
}
