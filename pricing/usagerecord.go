package pricing

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gpumeter/gpumeter/internal/meter"
)

// UsageRecord is one row of `gpumeter usage --json`: the summed meters of a
// group of usage (a tenant, department or SKU, in a time bucket), each a
// decimal text in the price-book meter's unit. It is the one shape that
// command writes and ParseUsageJSON reads back, so that usage can be piped
// into quote. Grouping fields not asked for are empty; Bucket is nil
// without a time bucket. Host and Workload (grouped by in raw samples
// only) are new keys: files written before them still read the same.
//
// In JSON every priced meter of the meter table is a key of its own
// ("gpu_hours": "1.5"), in the table's order, after the grouping keys.
type UsageRecord struct {
	Bucket     *time.Time
	Tenant     string
	Department string
	SKU        string
	Host       string
	Workload   string
	Samples    uint64
	// Quantities are the priced meters' quantities, indexed like Meters().
	Quantities [meter.NumPriced]string
	// Unmeasured: GPU-hours whose samples had no measurement of a meter,
	// by Unmeasured group name ("energy").
	Unmeasured map[string]string
}

// Quantity is the record's quantity text of m, "" for an unknown meter.
func (r UsageRecord) Quantity(m Meter) string {
	if i, ok := m.index(); ok {
		return r.Quantities[i]
	}
	return ""
}

// MarshalJSON writes the grouping keys that are set, samples, every
// priced meter and the unmeasured hours, in that order.
func (r UsageRecord) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	field := func(k string, v any) error {
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		enc, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("usage record %s: %w", k, err)
		}
		b.WriteString(`"` + k + `":`)
		b.Write(enc)
		return nil
	}
	if r.Bucket != nil {
		if err := field("bucket", r.Bucket); err != nil {
			return nil, err
		}
	}
	for _, kv := range []struct{ k, v string }{{"tenant", r.Tenant}, {"department", r.Department}, {"sku", r.SKU}, {"host", r.Host}, {"workload", r.Workload}} {
		if kv.v != "" {
			if err := field(kv.k, kv.v); err != nil {
				return nil, err
			}
		}
	}
	if err := field("samples", r.Samples); err != nil {
		return nil, err
	}
	for i, m := range meter.PricedMeters {
		if err := field(m.Name, r.Quantities[i]); err != nil {
			return nil, err
		}
	}
	if len(r.Unmeasured) > 0 {
		if err := field(unmeasuredKey, r.Unmeasured); err != nil {
			return nil, err
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

const unmeasuredKey = "unmeasured_gpu_hours"

// UnmarshalJSON reads what MarshalJSON writes; unknown keys are refused.
func (r *UsageRecord) UnmarshalJSON(b []byte) error {
	_, err := r.decode(b, nil)
	return err
}

// decode reads the record's keys from a JSON object and returns the
// object's keys named in extra, for a caller that allows more; any other
// key is refused.
func (r *UsageRecord) decode(b []byte, extra map[string]bool) (map[string]json.RawMessage, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil {
		return nil, err
	}
	*r = UsageRecord{}
	text := map[string]*string{"tenant": &r.Tenant, "department": &r.Department, "sku": &r.SKU, "host": &r.Host, "workload": &r.Workload}
	for i, m := range meter.PricedMeters {
		text[m.Name] = &r.Quantities[i]
	}
	rest := map[string]json.RawMessage{}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the first unknown key reported is the same every run
	for _, k := range keys {
		v := obj[k]
		var err error
		switch p, isText := text[k]; {
		case isText:
			err = json.Unmarshal(v, p)
		case k == "bucket":
			r.Bucket = new(time.Time)
			err = json.Unmarshal(v, r.Bucket)
		case k == "samples":
			err = json.Unmarshal(v, &r.Samples)
		case k == unmeasuredKey:
			err = json.Unmarshal(v, &r.Unmeasured)
		case extra[k]:
			rest[k] = v
		default:
			return nil, fmt.Errorf("json: unknown field %q (want %s)", k, strings.Join(knownKeys(text, extra), ", "))
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
	}
	return rest, nil
}

func knownKeys(text map[string]*string, extra map[string]bool) []string {
	keys := []string{"bucket", "samples", unmeasuredKey}
	for k := range text {
		keys = append(keys, k)
	}
	for k := range extra {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// QuantitiesOf fills a record's meters from summed stored meters: every
// priced meter as exact decimal text, and the GPU-hours without each
// measurement (left out where there are none).
func QuantitiesOf(t meter.Totals) (q [meter.NumPriced]string, unmeasured map[string]string) {
	for i, p := range meter.PricedMeters {
		q[i] = t.Quantity(p).String()
	}
	for i, us := range t.Unmeasured {
		if us > 0 {
			if unmeasured == nil {
				unmeasured = map[string]string{}
			}
			unmeasured[meter.Groups[i].Name] = meter.GPUHours(us).String()
		}
	}
	return q, unmeasured
}
