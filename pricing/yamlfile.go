package pricing

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/shopspring/decimal"
	"go.yaml.in/yaml/v3"

	"github.com/gpumeter/gpumeter/internal/fault"
)

// decodeYAML decodes exactly one YAML document into out, rejecting unknown
// fields, and returns an index from paths to lines for validation errors.
func decodeYAML(data []byte, out any) (idx lineIndex, err error) {
	// The parser is third-party code fed by users: a panic inside it must
	// become an error, never take down `gpumeter serve`.
	defer func() {
		if r := recover(); r != nil {
			idx, err = nil, fmt.Errorf("parse yaml: %v", r)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(out); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("parse yaml: empty document")
		}
		return nil, fmt.Errorf("parse yaml: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("parse yaml: more than one document")
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("parse yaml: %w", err)
	}
	idx = lineIndex{}
	idx.walk(&root, "")
	return idx, nil
}

// lineIndex maps a path (as problems name it) to its line in the file.
type lineIndex map[string]int

func (li lineIndex) walk(n *yaml.Node, p path) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			li.walk(c, p)
		}
	case yaml.MappingNode:
		if _, ok := li[string(p)]; !ok {
			li[string(p)] = n.Line
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			kp := p.key(k.Value)
			li[string(kp)] = k.Line
			li.walk(v, kp)
		}
	case yaml.SequenceNode:
		if _, ok := li[string(p)]; !ok {
			li[string(p)] = n.Line
		}
		for i, c := range n.Content {
			ip := p.index(i)
			li[string(ip)] = c.Line
			li.walk(c, ip)
		}
	}
}

// lookup finds the line of p, or of its nearest ancestor present in the
// file (a missing field is reported where its parent is).
func (li lineIndex) lookup(p string) int {
	for p != "" {
		if l, ok := li[p]; ok {
			return l
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			return 0
		}
		p = p[:i]
	}
	return 0
}

// Bounds on decimals read from files and inputs: they keep arithmetic cheap
// (no 10,000-digit intermediates from "1e-9999") and well inside what
// Decimal(38, 9) columns store.
const (
	maxPlaces    = 18
	maxIntDigits = 15
)

// ParseQuantity reads a usage quantity as quote and invoices take it:
// plain decimal notation ("720", "0.25"), not negative, within the engine's
// bounds. Exponent forms ("1e3") are refused everywhere, so a file and a
// flag accept the same texts.
func ParseQuantity(s string) (decimal.Decimal, error) {
	d, err := ParseDecimal(s)
	if err != nil {
		return decimal.Decimal{}, fault.Validation(err)
	}
	if d.Sign() < 0 {
		return decimal.Decimal{}, fault.Validationf("negative quantity %s", d)
	}
	return d, nil
}

// ParseDecimal reads a decimal from its text, never through a float: plain
// notation only (no exponent, which could ask for a gigabyte of digits),
// within the engine's places and integer digits.
func ParseDecimal(s string) (decimal.Decimal, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return decimal.Decimal{}, errors.New("empty number")
	}
	if !plainDecimal(s) {
		return decimal.Decimal{}, fmt.Errorf("%q is not a decimal number (digits and an optional point, no exponent)", s)
	}
	d, err := decimal.NewFromString(s)
	if err != nil {
		return decimal.Decimal{}, fmt.Errorf("%q is not a decimal number", s)
	}
	return checkBounds(d)
}

// plainDecimal reports whether s is an optional sign, digits and at most
// one point with digits on at least one side.
func plainDecimal(s string) bool {
	if s != "" && (s[0] == '-' || s[0] == '+') {
		s = s[1:]
	}
	digits, point := 0, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
			digits++
		case c == '.' && !point:
			point = true
		default:
			return false
		}
	}
	return digits > 0
}

// checkBounds rejects values beyond maxPlaces decimal places or
// maxIntDigits integer digits and gives zeros one canonical form.
func checkBounds(d decimal.Decimal) (decimal.Decimal, error) {
	if d.IsZero() {
		return decimal.Zero, nil
	}
	if d.Exponent() < -maxPlaces {
		t := d.Truncate(maxPlaces)
		if !t.Equal(d) {
			return decimal.Decimal{}, fmt.Errorf("%s has more than %d decimal places", d.String(), maxPlaces)
		}
		d = t
	}
	if d.Exponent() > maxIntDigits || int(d.Exponent())+d.NumDigits() > maxIntDigits {
		return decimal.Decimal{}, fmt.Errorf("%s has more than %d integer digits", d.String(), maxIntDigits)
	}
	return d, nil
}

func yamlTypeError(n *yaml.Node, format string, args ...any) error {
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: ", n.Line) + fmt.Sprintf(format, args...)}}
}

// decodeScalar sets *dst to the YAML scalar n read by parse; anything but
// a scalar is refused as not what it wants, and either error names the
// node's line. On error *dst is left as it was.
func decodeScalar[T any](n *yaml.Node, dst *T, want string, parse func(string) (T, error)) error {
	if n.Kind != yaml.ScalarNode {
		return yamlTypeError(n, "want %s", want)
	}
	v, err := parse(n.Value)
	if err != nil {
		return yamlTypeError(n, "%v", err)
	}
	*dst = v
	return nil
}

// dec is an optional decimal field; set tells "0" from absent.
type dec struct {
	v   decimal.Decimal
	set bool
}

func (x *dec) UnmarshalYAML(n *yaml.Node) error {
	return decodeScalar(n, x, "a decimal number", func(s string) (dec, error) {
		d, err := ParseDecimal(s)
		return dec{v: d, set: true}, err
	})
}

// fraction is a decimal that may also be written as "a/b" (a MIG weight such
// as 3/7 has no finite decimal form). v is a/b carried to maxPlaces; num
// and den are kept so that counts of instances convert exactly (7 × 1/7 is
// 1, not 0.999999999999999999).
type fraction struct {
	v, num, den decimal.Decimal
	set         bool
}

func (x *fraction) UnmarshalYAML(n *yaml.Node) error {
	return decodeScalar(n, x, "a number or a fraction such as 3/7", parseFraction)
}

func parseFraction(s string) (fraction, error) {
	num, den, ok := strings.Cut(s, "/")
	if !ok {
		d, err := ParseDecimal(s)
		return fraction{v: d, num: d, den: decimal.NewFromInt(1), set: true}, err
	}
	a, err := ParseDecimal(num)
	if err != nil {
		return fraction{}, err
	}
	b, err := ParseDecimal(den)
	if err != nil {
		return fraction{}, err
	}
	if b.Sign() <= 0 {
		return fraction{}, fmt.Errorf("%q: denominator must be positive", s)
	}
	v, err := checkBounds(a.DivRound(b, maxPlaces))
	return fraction{v: v, num: a, den: b, set: true}, err
}

// stamp is an optional instant: RFC 3339 with an offset, or a bare date
// meaning 00:00 UTC.
type stamp struct {
	t   time.Time
	set bool
}

func (x *stamp) UnmarshalYAML(n *yaml.Node) error {
	return decodeScalar(n, x, "a time (RFC 3339 or YYYY-MM-DD)", func(s string) (stamp, error) {
		t, err := ParseTime(s)
		return stamp{t: t, set: true}, err
	})
}

// ParseTime reads an RFC 3339 time, or a date YYYY-MM-DD meaning 00:00 UTC.
func ParseTime(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse("2006-01-02", s); err == nil {
		return t, nil
	}
	return time.Time{}, fault.Validationf("%q is not a time (want RFC 3339, e.g. 2026-03-01T00:00:00Z, or YYYY-MM-DD)", s)
}

// upTo is a tier's inclusive upper bound; "inf" (or absence) marks the open
// last tier.
type upTo struct {
	v    decimal.Decimal
	set  bool
	open bool
}

func (x *upTo) UnmarshalYAML(n *yaml.Node) error {
	return decodeScalar(n, x, "a number or inf", parseUpTo)
}

func parseUpTo(s string) (upTo, error) {
	if v := strings.ToLower(strings.TrimSpace(s)); v == "inf" || v == ".inf" || v == "+inf" {
		return upTo{set: true, open: true}, nil
	}
	d, err := ParseDecimal(s)
	return upTo{v: d, set: true}, err
}
