package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gpumeter/gpumeter/pricing"
	"github.com/shopspring/decimal"
)

const quoteUsage = `usage: gpumeter quote --book FILE [--contract FILE] (--usage FILE | --quantity SKU:METER=VALUE ...)
                      [--from TIME] [--to TIME] [--tenant NAME] [--json]

Prices usage against a price book with the same engine as invoices, without a
database. Usage comes either from a file of hourly rows (--usage: CSV with the
header hour,sku,meter,quantity, a .json array of {"hour","sku","meter",
"quantity"} objects, or the output of usage --json --bucket hour --by sku;
"-" reads standard input) or as period totals (--quantity, repeatable), which are
spread evenly over the hours of the period. TIME is RFC 3339 or YYYY-MM-DD
(00:00 UTC). The period defaults to the whole UTC calendar months holding the
usage rows, or to the current UTC month for --quantity (named on stderr);
--from alone prices one month from it. A problem repeated on many rows is
reported once, with the lines it is on.

flags:
`

// quantityFlags collects repeated --quantity SKU:METER=VALUE flags.
type quantityFlags []string

func (q *quantityFlags) String() string     { return strings.Join(*q, " ") }
func (q *quantityFlags) Set(v string) error { *q = append(*q, v); return nil }

type quoteArgs struct {
	book, contract, usage string
	quantities            quantityFlags
	from, to, tenant      string
	json                  bool
}

// runQuote prices quantities against a price book (no database): gpumeter
// quote --book FILE [--contract FILE] (--usage FILE | --quantity ...) [--json].
func runQuote(ctx context.Context, g *globals, args []string) error {
	var a quoteArgs
	fs := flag.NewFlagSet("quote", flag.ContinueOnError)
	fs.SetOutput(g.stderr)
	fs.StringVar(&a.book, "book", "", "price book, YAML (required)")
	fs.StringVar(&a.contract, "contract", "", "tenant contract, YAML")
	fs.StringVar(&a.usage, "usage", "", "hourly usage rows: CSV (hour,sku,meter,quantity) or a .json array")
	fs.Var(&a.quantities, "quantity", "SKU:METER=VALUE, a total for the period; repeatable")
	fs.StringVar(&a.from, "from", "", "period start, RFC 3339 or YYYY-MM-DD")
	fs.StringVar(&a.to, "to", "", "period end (exclusive), RFC 3339 or YYYY-MM-DD")
	fs.StringVar(&a.tenant, "tenant", "", "tenant name (defaults to the contract's)")
	fs.BoolVar(&a.json, "json", false, "print the result as JSON")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), quoteUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageErrorf("%v", err)
	}
	if fs.NArg() > 0 {
		return usageErrorf("unexpected argument %q", fs.Arg(0))
	}
	in, err := a.input(time.Now())
	if err != nil {
		return err
	}
	res, err := pricing.Price(in.Input)
	if err != nil {
		return usageError{a.explain(err, in.origins)}
	}
	if a.from == "" && len(a.quantities) > 0 {
		fmt.Fprintf(g.stderr, "gpumeter quote: priced %s (the current UTC month; pass --from to choose)\n", in.Start.Format("2006-01"))
	}
	if a.json {
		enc := json.NewEncoder(g.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return fmt.Errorf("write result: %w", err)
		}
		return nil
	}
	if err := writeQuote(g.stdout, res); err != nil {
		return fmt.Errorf("write result: %w", err)
	}
	return nil
}

// quoteInput is a pricing input with where each of its usage rows came
// from, so that what the engine finds wrong names lines and flags.
type quoteInput struct {
	pricing.Input
	origins []rowOrigin // one per usage row
}

// input reads the files and flags into a pricing input; now is only used
// for the default period of --quantity.
func (a *quoteArgs) input(now time.Time) (quoteInput, error) {
	var in quoteInput
	if a.book == "" {
		return in, usageErrorf("--book is required")
	}
	if (a.usage == "") == (len(a.quantities) == 0) {
		return in, usageErrorf("give either --usage FILE or --quantity SKU:METER=VALUE")
	}
	data, err := os.ReadFile(a.book)
	if err != nil {
		return in, usageErrorf("read book: %w", err)
	}
	if in.Book, err = pricing.ParseBook(data); err != nil {
		return in, usageErrorf("%s: %w", a.book, err)
	}
	if in.Book, err = pricing.WithMIGTable(in.Book); err != nil {
		return in, usageErrorf("%s: %w", a.book, err)
	}
	if a.contract != "" {
		data, err := os.ReadFile(a.contract)
		if err != nil {
			return in, usageErrorf("read contract: %w", err)
		}
		if in.Contract, err = pricing.ParseContract(data); err != nil {
			return in, usageErrorf("%s: %w", a.contract, err)
		}
	}
	in.Tenant = a.tenant

	if a.usage != "" {
		if in.Usage, in.origins, err = readUsage(a.usage); err != nil {
			return in, usageErrorf("%s: %w", a.usage, err)
		}
	}
	if in.Start, in.End, err = a.period(in.Usage, now); err != nil {
		return in, err
	}
	for _, q := range a.quantities {
		// The SKU is checked here, once, rather than by the engine on
		// every hour the quantity is spread over.
		sku, _, _, err := parseQuantityFlag(q)
		if err == nil && !in.Book.HasSKU(sku) {
			err = fmt.Errorf("unknown SKU %q (not in book %s; it has %s)", sku, in.Book.Version(), strings.Join(in.Book.SKUs(), ", "))
		}
		var rows []pricing.Usage
		if err == nil {
			rows, err = spreadQuantity(q, in.Start, in.End)
		}
		if err != nil {
			return in, usageErrorf("--quantity %s: %w", q, err)
		}
		in.Usage = append(in.Usage, rows...)
		o := rowOrigin{where: "--quantity " + q, n: -1}
		for range rows {
			in.origins = append(in.origins, o)
		}
	}
	return in, nil
}

// explain rewrites the engine's problems with usage rows (usage[N].field)
// as the lines or flags they came from, each problem once; other errors
// are returned as they are.
func (a *quoteArgs) explain(err error, origins []rowOrigin) error {
	var ve *pricing.ValidationError
	if !errors.As(err, &ve) || ve.What != "input" {
		return err
	}
	var ps rowProblems
	rows := 0
	for _, p := range ve.Problems {
		if i, field, ok := usageRowPath(p.Path); ok && i < len(origins) {
			msg := p.Message
			if field != "" {
				msg = field + ": " + msg
			}
			ps.add(origins[i], msg)
			rows++
			continue
		}
		var more int
		if _, scanErr := fmt.Sscanf(p.Message, "and %d more problems", &more); scanErr == nil && p.Path == "" {
			ps.more += more
			continue
		}
		ps.addOther(p.String())
	}
	if rows == 0 {
		return err
	}
	if a.usage != "" {
		return fmt.Errorf("%s: %w", a.usage, ps.err())
	}
	return ps.err()
}

// usageRowPath splits an engine path such as usage[12].sku into 12 and
// "sku".
func usageRowPath(p string) (int, string, bool) {
	rest, ok := strings.CutPrefix(p, "usage[")
	if !ok {
		return 0, "", false
	}
	num, field, ok := strings.Cut(rest, "]")
	if !ok {
		return 0, "", false
	}
	i, err := strconv.Atoi(num)
	if err != nil || i < 0 {
		return 0, "", false
	}
	return i, strings.TrimPrefix(field, "."), true
}

// rowOrigin is where a usage row came from: line n of a CSV file, row n
// of a JSON array, or (n < 0) a flag such as "--quantity SKU:METER=1".
type rowOrigin struct {
	where string // "line", "row" or the flag
	n     int
}

// The most different problems one error lists, and the places it names
// for one problem before "and N more".
const (
	maxRowProblems = 10
	shownPlaces    = 3
)

// rowProblems collects what is wrong with usage rows so that a problem
// found on many rows is reported once, with where it is:
// `lines 3, 4, 5 and 17 more: unknown meter "gpu_hourz" (...)`.
type rowProblems struct {
	keys   []rowProblemKey
	places map[rowProblemKey]*placeList
	other  []string // problems of no one row
	more   int      // problems past maxRowProblems different ones
}

type rowProblemKey struct{ where, msg string }

type placeList struct {
	first []int // the first shownPlaces+1 row numbers
	n     int   // rows with the problem
}

func (ps *rowProblems) add(o rowOrigin, msg string) {
	k := rowProblemKey{o.where, msg}
	pl, ok := ps.places[k]
	if !ok {
		if len(ps.keys)+len(ps.other) >= maxRowProblems {
			ps.more++
			return
		}
		if ps.places == nil {
			ps.places = map[rowProblemKey]*placeList{}
		}
		pl = &placeList{}
		ps.places[k] = pl
		ps.keys = append(ps.keys, k)
	}
	pl.n++
	if len(pl.first) <= shownPlaces {
		pl.first = append(pl.first, o.n)
	}
}

func (ps *rowProblems) addOther(msg string) {
	if len(ps.keys)+len(ps.other) >= maxRowProblems {
		ps.more++
		return
	}
	ps.other = append(ps.other, msg)
}

// err returns nil when nothing was added.
func (ps *rowProblems) err() error {
	if len(ps.keys)+len(ps.other)+ps.more == 0 {
		return nil
	}
	var parts []string
	for _, k := range ps.keys {
		parts = append(parts, ps.places[k].describe(k.where)+": "+k.msg)
	}
	parts = append(parts, ps.other...)
	if ps.more > 0 {
		parts = append(parts, fmt.Sprintf("and %d more problems", ps.more))
	}
	return errors.New(strings.Join(parts, "; "))
}

// describe names the places: "line 3", "lines 3 and 4", "lines 3, 4, 5
// and 17 more", or a flag once however many rows it made.
func (pl *placeList) describe(where string) string {
	if pl.first[0] < 0 {
		return where
	}
	num := func(ns []int) string {
		s := make([]string, len(ns))
		for i, n := range ns {
			s[i] = strconv.Itoa(n)
		}
		return strings.Join(s, ", ")
	}
	switch {
	case pl.n == 1:
		return fmt.Sprintf("%s %d", where, pl.first[0])
	case pl.n <= shownPlaces+1:
		return fmt.Sprintf("%ss %s and %d", where, num(pl.first[:pl.n-1]), pl.first[pl.n-1])
	default:
		return fmt.Sprintf("%ss %s and %d more", where, num(pl.first[:shownPlaces]), pl.n-shownPlaces)
	}
}

// period picks [from, to): the flags, else whole UTC calendar months around
// the usage rows, else the current UTC month.
func (a *quoteArgs) period(rows []pricing.Usage, now time.Time) (time.Time, time.Time, error) {
	var from, to time.Time
	var err error
	if a.from != "" {
		if from, err = pricing.ParseTime(a.from); err != nil {
			return from, to, usageErrorf("--from: %w", err)
		}
	}
	if a.to != "" {
		if a.from == "" {
			return from, to, usageErrorf("--to needs --from")
		}
		if to, err = pricing.ParseTime(a.to); err != nil {
			return from, to, usageErrorf("--to: %w", err)
		}
	}
	switch {
	case a.from != "" && a.to == "":
		to = from.AddDate(0, 1, 0)
	case a.from == "" && len(rows) > 0:
		first, last := rows[0].Hour, rows[0].Hour
		for _, r := range rows {
			if r.Hour.Before(first) {
				first = r.Hour
			}
			if r.Hour.After(last) {
				last = r.Hour
			}
		}
		from, to = monthStart(first), monthStart(last).AddDate(0, 1, 0)
	case a.from == "":
		if a.usage != "" {
			return from, to, usageErrorf("%s has no rows: give --from and --to", a.usage)
		}
		from = monthStart(now)
		to = from.AddDate(0, 1, 0)
	}
	if !from.Before(to) {
		return from, to, usageErrorf("--to %s is not after --from %s", to.Format(time.RFC3339), from.Format(time.RFC3339))
	}
	return from, to, nil
}

func monthStart(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// maxSpreadHours bounds the rows one --quantity makes (two leap years).
const maxSpreadHours = 2 * 366 * 24

// spreadQuantity turns SKU:METER=VALUE into hourly rows: the value spread
// evenly over the whole hours of [from, to), split by largest remainder so
// the rows add up to it exactly. Steady use is what a quote assumes; a
// usage file prices peaks.
func spreadQuantity(s string, from, to time.Time) ([]pricing.Usage, error) {
	sku, meter, q, err := parseQuantityFlag(s)
	if err != nil {
		return nil, err
	}
	first := from.Truncate(time.Hour)
	if first.Before(from) {
		first = first.Add(time.Hour)
	}
	if to.Sub(first) > maxSpreadHours*time.Hour {
		return nil, fmt.Errorf("the period is longer than %d hours: quote at most two years at a time", maxSpreadHours)
	}
	var hours []time.Time
	for h := first; h.Before(to); h = h.Add(time.Hour) {
		hours = append(hours, h)
	}
	if len(hours) == 0 {
		return nil, errors.New("the period holds no whole hour to put the quantity in")
	}
	weights := make([]decimal.Decimal, len(hours))
	for i := range weights {
		weights[i] = decimal.NewFromInt(1)
	}
	places := max(int32(9), -q.Exponent())
	parts, err := pricing.Allocate(q, weights, places)
	if err != nil {
		return nil, err
	}
	rows := make([]pricing.Usage, len(hours))
	for i, h := range hours {
		rows[i] = pricing.Usage{Hour: h, SKU: sku, Meter: meter, Quantity: parts[i]}
	}
	return rows, nil
}

// parseQuantityFlag reads SKU:METER=VALUE.
func parseQuantityFlag(s string) (string, pricing.Meter, decimal.Decimal, error) {
	key, value, ok := strings.Cut(s, "=")
	i := strings.LastIndex(key, ":")
	if !ok || i <= 0 || i == len(key)-1 {
		return "", "", decimal.Decimal{}, errors.New("want SKU:METER=VALUE, e.g. H100-SXM5-80GB:gpu_hours=720")
	}
	meter, err := pricing.ParseMeter(key[i+1:])
	if err != nil {
		return "", "", decimal.Decimal{}, err
	}
	q, err := pricing.ParseQuantity(value)
	if err != nil {
		return "", "", decimal.Decimal{}, err
	}
	return key[:i], meter, q, nil
}

// readUsage reads hourly rows from CSV (header hour,sku,meter,quantity, in
// any order; other columns are ignored) or JSON: an array of objects with
// those keys, or the rows of `gpumeter usage --json --bucket hour --by sku`
// (each meter of a row becomes one hourly row). "-" reads standard input;
// a file is JSON when its name ends in .json or its text starts with '['.
// Each row's origin is its line (CSV) or its index (JSON); every bad row is
// reported, each problem once.
func readUsage(name string) ([]pricing.Usage, []rowOrigin, error) {
	var data []byte
	var err error
	if name == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(name)
	}
	if err != nil {
		return nil, nil, err
	}
	if strings.EqualFold(filepath.Ext(name), ".json") || bytes.HasPrefix(bytes.TrimSpace(data), []byte("[")) {
		return parseUsageJSON(data)
	}
	return parseUsageCSV(data)
}

// usageInJSON is one object of a JSON usage file: an hourly row
// {"hour","sku","meter","quantity"}, or a row of `gpumeter usage --json`
// (usageJSON, the one shape both commands share).
type usageInJSON struct {
	usageJSON
	Hour     string          `json:"hour"`
	Meter    string          `json:"meter"`
	Quantity json.RawMessage `json:"quantity"` // a number or a string, read as decimal text
}

// hourly turns one object into hourly rows: itself, or one per meter of a
// usage row.
func (r usageInJSON) hourly() ([]pricing.Usage, error) {
	if r.Hour != "" || r.Meter != "" || r.Quantity != nil {
		// A JSON number or a string holding one; the text is parsed as a
		// decimal, never through a float.
		var q string
		if err := json.Unmarshal(r.Quantity, &q); err != nil {
			q = string(r.Quantity)
		}
		row, err := usageRow(r.Hour, r.SKU, r.Meter, q)
		return []pricing.Usage{row}, err
	}
	if r.Bucket == nil || r.SKU == "" {
		return nil, errors.New("a usage row needs an hour bucket and a sku: run usage with --bucket hour --by sku")
	}
	var out []pricing.Usage
	for _, m := range r.quantities() {
		if m.quantity == "" || m.quantity == "0" {
			continue
		}
		row, err := usageRow(r.Bucket.UTC().Format(time.RFC3339), r.SKU, string(m.meter), m.quantity)
		if err != nil {
			return nil, err
		}
		out = append(out, row)
	}
	return out, nil
}

func parseUsageJSON(data []byte) ([]pricing.Usage, []rowOrigin, error) {
	var raw []usageInJSON
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return nil, nil, fmt.Errorf("want a JSON array of {\"hour\", \"sku\", \"meter\", \"quantity\"}, or the rows of usage --json: %w", err)
	}
	rows := make([]pricing.Usage, 0, len(raw))
	origins := make([]rowOrigin, 0, len(raw))
	var ps rowProblems
	for i, r := range raw {
		hourly, err := r.hourly()
		if err != nil {
			ps.add(rowOrigin{"row", i}, err.Error())
			continue
		}
		for _, row := range hourly {
			rows = append(rows, row)
			origins = append(origins, rowOrigin{"row", i})
		}
	}
	if err := ps.err(); err != nil {
		return nil, nil, err
	}
	return rows, origins, nil
}

func parseUsageCSV(data []byte) ([]pricing.Usage, []rowOrigin, error) {
	r := csv.NewReader(bytes.NewReader(data))
	r.FieldsPerRecord = -1 // checked per row below, with the row's line
	header, err := r.Read()
	if err != nil {
		return nil, nil, fmt.Errorf("read CSV header: %w", err)
	}
	col := map[string]int{}
	for i, h := range header {
		col[strings.ToLower(strings.TrimSpace(h))] = i
	}
	for _, want := range []string{"hour", "sku", "meter", "quantity"} {
		if _, ok := col[want]; !ok {
			return nil, nil, fmt.Errorf("CSV header lacks %q (want hour,sku,meter,quantity)", want)
		}
	}
	var rows []pricing.Usage
	var origins []rowOrigin
	var ps rowProblems
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			// The reader cannot be trusted past broken quoting.
			ps.addOther(fmt.Sprintf("read CSV: %v", err))
			break
		}
		line, _ := r.FieldPos(0)
		if len(rec) != len(header) {
			ps.add(rowOrigin{"line", line}, fmt.Sprintf("%d fields, the header has %d", len(rec), len(header)))
			continue
		}
		row, err := usageRow(rec[col["hour"]], rec[col["sku"]], rec[col["meter"]], rec[col["quantity"]])
		if err != nil {
			ps.add(rowOrigin{"line", line}, err.Error())
			continue
		}
		rows = append(rows, row)
		origins = append(origins, rowOrigin{"line", line})
	}
	if err := ps.err(); err != nil {
		return nil, nil, err
	}
	return rows, origins, nil
}

func usageRow(hour, sku, meter, quantity string) (pricing.Usage, error) {
	h, err := pricing.ParseTime(hour)
	if err != nil {
		return pricing.Usage{}, fmt.Errorf("hour: %w", err)
	}
	m, err := pricing.ParseMeter(strings.TrimSpace(meter))
	if err != nil {
		return pricing.Usage{}, err
	}
	q, err := pricing.ParseQuantity(quantity)
	if err != nil {
		return pricing.Usage{}, fmt.Errorf("quantity: %w", err)
	}
	return pricing.Usage{Hour: h, SKU: strings.TrimSpace(sku), Meter: m, Quantity: q}, nil
}

// writeQuote prints the result as aligned columns: one row per line, the
// tier breakdown indented under it, then the total and what reservations
// covered.
func writeQuote(w io.Writer, r pricing.Result) error {
	tenant := r.Tenant
	if tenant == "" {
		tenant = "(none)"
	}
	fmt.Fprintf(w, "tenant %s, book %s, %s, %s to %s\n\n", tenant, r.BookVersion, r.Currency.Code,
		r.Start.Format(time.RFC3339), r.End.Format(time.RFC3339))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SKU\tMETER\tKIND\tFROM\tTO\tQUANTITY\tUNIT PRICE\tAMOUNT\tROUNDED\t")
	when := func(t time.Time) string { return t.In(r.Start.Location()).Format("2006-01-02 15:04") }
	for _, l := range r.Lines {
		price := ""
		if l.UnitPrice != nil {
			price = l.UnitPrice.String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", dash(l.SKU), dash(string(l.Meter)), l.Kind,
			when(l.From), when(l.To), l.Quantity.String()+" "+l.Unit, price, l.Amount.StringFixed(pricing.StoragePlaces),
			l.AmountRounded.StringFixed(r.Currency.MinorUnits))
		for _, t := range l.Tiers {
			price := t.UnitPrice.String()
			if !t.FlatFee.IsZero() {
				price += " + " + t.FlatFee.String() + " flat"
			}
			fmt.Fprintf(tw, "\t\t  tier %d\t\t\t%s\t%s\t%s\t\t\n", t.TierIndex, t.Quantity.String(), price, t.Amount.String())
		}
	}
	fmt.Fprintf(tw, "TOTAL\t\t\t\t\t\t\t\t%s %s\t\n", r.Total.StringFixed(r.Currency.MinorUnits), r.Currency.Code)
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Reservations) > 0 {
		fmt.Fprintln(w, "\ngpu_hours by coverage:")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "SKU\tRESERVED\tCOVERED\tUNUSED\tON DEMAND\tBURST\t")
		for _, ru := range r.Reservations {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", ru.SKU, ru.ReservedGPUHours, ru.CoveredGPUHours,
				ru.UnusedGPUHours, ru.OnDemandGPUHours, ru.BurstGPUHours)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(r.Unpriced) > 0 {
		fmt.Fprintln(w, "\nnot priced by this book (not billed):")
		for _, u := range r.Unpriced {
			fmt.Fprintf(w, "  %s %s %s\n", u.SKU, u.Meter, u.Quantity)
		}
	}
	notes := ""
	for _, l := range r.Lines {
		if l.Kind == pricing.KindTrueUp || l.Kind == pricing.KindReservationFee {
			notes += fmt.Sprintf("  %s: %s\n", l.Kind, l.Description)
		}
	}
	if notes != "" {
		if _, err := fmt.Fprint(w, "\nnotes:\n"+notes); err != nil {
			return err
		}
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
