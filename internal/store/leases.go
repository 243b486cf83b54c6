package store

import (
	"context"
	"fmt"
	"time"

	"github.com/gpumeter/gpumeter/internal/billing"
)

// The statements of this file (internal/chdbcheck runs them on chDB too).
// Claims are stamped with the server's clock (now()); a renewal or release
// writes the claim again at a higher version. Their arguments are the
// lease's name and the holder.
const (
	claimLeaseSQL = "INSERT INTO billing_leases (name, holder, claimed_at, renewed_at, released, version) " +
		"SELECT ?, ?, now(), now(), 0, 1"
	renewLeaseSQL   = rewriteClaimSQL + "now(), 0" + rewriteClaimFrom
	releaseLeaseSQL = rewriteClaimSQL + "renewed_at, 1" + rewriteClaimFrom
	rewriteClaimSQL = "INSERT INTO billing_leases (name, holder, claimed_at, renewed_at, released, version) " +
		"SELECT name, holder, claimed_at, "
	rewriteClaimFrom = ", version + 1 FROM billing_leases FINAL WHERE name = ? AND holder = ?"
	// leaseClaimsSQL's argument is the lease's name.
	leaseClaimsSQL = "SELECT holder, claimed_at, renewed_at, released FROM billing_leases FINAL WHERE name = ?"
)

// ClaimLease appends holder's claim on the lease name, stamped with the
// server's clock so that claims from different hosts order alike.
func (s *Store) ClaimLease(ctx context.Context, name, holder string) error {
	if err := s.conn.Exec(ctx, claimLeaseSQL, name, holder); err != nil {
		return fmt.Errorf("claim lease %s: %w", name, err)
	}
	return nil
}

// RenewLease moves holder's renewal time to the server's now.
func (s *Store) RenewLease(ctx context.Context, name, holder string) error {
	return s.rewriteClaim(ctx, "renew", renewLeaseSQL, name, holder)
}

// ReleaseLease marks holder's claim released.
func (s *Store) ReleaseLease(ctx context.Context, name, holder string) error {
	return s.rewriteClaim(ctx, "release", releaseLeaseSQL, name, holder)
}

// rewriteClaim writes the claim again at a higher version with sql,
// renewLeaseSQL or releaseLeaseSQL.
func (s *Store) rewriteClaim(ctx context.Context, what, sql, name, holder string) error {
	if err := s.conn.Exec(ctx, sql, name, holder); err != nil {
		return fmt.Errorf("%s lease %s: %w", what, name, err)
	}
	return nil
}

// LeaseClaims returns every claim on the lease name and the server's time.
func (s *Store) LeaseClaims(ctx context.Context, name string) ([]billing.Claim, time.Time, error) {
	now, err := s.ServerNow(ctx)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("read lease %s: %w", name, err)
	}
	claims, err := queryAll(ctx, s, "read lease "+name, leaseClaimsSQL, []any{name}, func(scan scanFunc) (billing.Claim, error) {
		var c billing.Claim
		var released uint8
		err := scan(&c.Holder, &c.ClaimedAt, &c.RenewedAt, &released)
		c.Released = released != 0
		return c, err
	})
	return claims, now, err
}
