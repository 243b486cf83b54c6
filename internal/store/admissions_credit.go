package store

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/quota"
)

const creditHoldColumns = "tenant, admission_id, kind, sku_class, amount, held_until"

// The statements of this file (internal/chdbcheck runs them on chDB too).
const (
	insertCreditHoldSQL = "INSERT INTO credit_holds (" + creditHoldColumns + ")"
	creditHoldsSQL      = "SELECT " + creditHoldColumns + " FROM credit_holds FINAL WHERE held_until > ? ORDER BY tenant, admission_id, kind, sku_class"
)

// The kinds of a credit hold's rows.
const (
	holdMoney = "money"
	holdHours = "hours"
)

// SaveCreditHolds writes credit holds: a money row each, and a row per
// SKU class of included hours held.
func (s *Store) SaveCreditHolds(ctx context.Context, hs []quota.CreditHold) error {
	var rows [][]any
	for _, h := range hs {
		rows = append(rows, creditHoldRows(h)...)
	}
	return s.insert(ctx, "save credit holds", insertCreditHoldSQL, rows, nil)
}

func creditHoldRows(h quota.CreditHold) [][]any {
	// Seconds: an end rounded up never drops a hold early.
	until := h.Until.UTC().Truncate(time.Second)
	if until.Before(h.Until) {
		until = until.Add(time.Second)
	}
	rows := [][]any{{h.Tenant, h.ID, holdMoney, "", h.Money.Round(18), until}}
	classes := make([]string, 0, len(h.Hours))
	for class := range h.Hours {
		classes = append(classes, class)
	}
	sort.Strings(classes)
	for _, class := range classes {
		rows = append(rows, []any{h.Tenant, h.ID, holdHours, class, h.Hours[class].Round(18), until})
	}
	return rows
}

// CreditHolds lists the holds whose end is after since.
func (s *Store) CreditHolds(ctx context.Context, since time.Time) ([]quota.CreditHold, error) {
	type row struct {
		tenant, id, kind, class string
		amount                  decimal.Decimal
		until                   time.Time
	}
	rows, err := queryAll(ctx, s, "read credit holds", creditHoldsSQL, []any{since.UTC().Truncate(time.Second)}, func(scan scanFunc) (row, error) {
		var r row
		err := scan(&r.tenant, &r.id, &r.kind, &r.class, &r.amount, &r.until)
		return r, err
	})
	if err != nil {
		return nil, err
	}
	// Rows come by tenant and admission: each hold's rows are adjacent.
	var out []quota.CreditHold
	for _, r := range rows {
		if n := len(out); n == 0 || out[n-1].Tenant != r.tenant || out[n-1].ID != r.id {
			h := quota.CreditHold{Tenant: r.tenant}
			h.ID, h.Until, h.Money = r.id, r.until.UTC(), decimal.Zero
			out = append(out, h)
		}
		h := &out[len(out)-1]
		switch r.kind {
		case holdMoney:
			h.Money = r.amount
		case holdHours:
			if h.Hours == nil {
				h.Hours = map[string]decimal.Decimal{}
			}
			h.Hours[r.class] = r.amount
		default:
			return nil, fmt.Errorf("read credit holds: admission %s of %s: unknown kind %q", r.id, r.tenant, r.kind)
		}
	}
	return out, nil
}
