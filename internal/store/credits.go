package store

import (
	"context"
	"fmt"
	"time"

	"github.com/shopspring/decimal"

	"github.com/gpumeter/gpumeter/internal/credits"
	"github.com/gpumeter/gpumeter/internal/fault"
	"github.com/gpumeter/gpumeter/pricing"
)

const grantColumns = "grant_id, tenant, kind, amount, currency, meter, sku_class, priority, effective_at, expires_at, series," +
	" has_rollover, rollover_cap, source, note, created_at, voided_at, void_reason"

// The statements of this file (internal/chdbcheck runs them on chDB too).
const (
	insertGrantSQL = "INSERT INTO credit_grants (" + grantColumns + ", version)"
	grantsSQL      = "SELECT " + grantColumns + " FROM credit_grants FINAL WHERE (? = '' OR tenant = ?) ORDER BY tenant, created_at, grant_id"
	grantSQL       = "SELECT " + grantColumns + " FROM credit_grants FINAL WHERE grant_id = ?"
)

// SaveGrant appends a new grant to the ledger.
func (s *Store) SaveGrant(ctx context.Context, g credits.Grant) error {
	return s.insert(ctx, "save grant "+g.ID, insertGrantSQL, [][]any{grantRow(g, 1)}, nil)
}

// grantRow is g's row of insertGrantSQL at version.
func grantRow(g credits.Grant, version uint64) []any {
	var has uint8
	rollover := decimal.Zero
	if g.RolloverCap != nil {
		has, rollover = 1, *g.RolloverCap
	}
	var voided time.Time
	if g.VoidedAt != nil {
		voided = *g.VoidedAt
	}
	return []any{g.ID, g.Tenant, string(g.Kind), g.Amount, g.Currency, string(g.Meter), g.SKUClass, int32(g.Priority),
		g.EffectiveAt.UTC(), orEpoch(g.ExpiresAt), g.Series, has, rollover, g.Source, g.Note, g.CreatedAt.UTC(),
		orEpoch(voided), g.VoidReason, version}
}

// Grants lists the ledger's grants, of one tenant or (tenant "") all,
// by tenant and age.
func (s *Store) Grants(ctx context.Context, tenant string) ([]credits.Grant, error) {
	return s.queryGrants(ctx, grantsSQL, tenant, tenant)
}

// Grant reads one grant; a fault.NotFound when there is none.
func (s *Store) Grant(ctx context.Context, id string) (credits.Grant, error) {
	gs, err := s.queryGrants(ctx, grantSQL, id)
	if err != nil {
		return credits.Grant{}, err
	}
	if len(gs) == 0 {
		return credits.Grant{}, fault.NotFoundf("grant %q: no such grant", id)
	}
	return gs[0], nil
}

func (s *Store) queryGrants(ctx context.Context, q string, args ...any) ([]credits.Grant, error) {
	return queryAll(ctx, s, "read grants", q, args, func(scan scanFunc) (credits.Grant, error) {
		var (
			g               credits.Grant
			kind, meter     string
			priority        int32
			has             uint8
			rollover        decimal.Decimal
			expires, voided time.Time
		)
		if err := scan(&g.ID, &g.Tenant, &kind, &g.Amount, &g.Currency, &meter, &g.SKUClass, &priority, &g.EffectiveAt, &expires,
			&g.Series, &has, &rollover, &g.Source, &g.Note, &g.CreatedAt, &voided, &g.VoidReason); err != nil {
			return g, err
		}
		g.Kind, g.Meter, g.Priority = credits.Kind(kind), pricing.Meter(meter), int(priority)
		g.EffectiveAt, g.CreatedAt, g.ExpiresAt = g.EffectiveAt.UTC(), g.CreatedAt.UTC(), fromEpoch(expires)
		if has == 1 {
			g.RolloverCap = &rollover
		}
		if v := fromEpoch(voided); !v.IsZero() {
			g.VoidedAt = &v
		}
		return g, nil
	})
}

// VoidGrant voids a grant from at on, with the reason: the record stays,
// and what it covered before stays covered. Voiding twice keeps the first.
func (s *Store) VoidGrant(ctx context.Context, id string, at time.Time, reason string) (credits.Grant, error) {
	g, err := s.Grant(ctx, id)
	if err != nil {
		return credits.Grant{}, err
	}
	if g.VoidedAt != nil {
		return g, nil
	}
	at = at.UTC().Truncate(time.Second)
	g.VoidedAt, g.VoidReason = &at, reason
	if err := s.insert(ctx, "void grant "+id, insertGrantSQL, [][]any{grantRow(g, 2)}, nil); err != nil {
		return credits.Grant{}, fmt.Errorf("void grant %s: %w", id, err)
	}
	return g, nil
}
