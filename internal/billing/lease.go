package billing

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/gpumeter/gpumeter/internal/fault"
)

// LeaseStore is what the lease needs from storage: an append-only table of
// claims stamped by the server's clock (store.Store implements it).
type LeaseStore interface {
	ClaimLease(ctx context.Context, name, holder string) error
	RenewLease(ctx context.Context, name, holder string) error
	ReleaseLease(ctx context.Context, name, holder string) error
	LeaseClaims(ctx context.Context, name string) ([]Claim, time.Time, error)
}

// LeaseConfig times the lease. Settle must exceed the server clock's one
// second resolution plus the longest claim insert: a run claims, waits
// Settle, and only then decides, so every claim stamped no later than its
// own is visible by then. A run whose own claim took longer than half of
// Settle backs off instead of deciding.
type LeaseConfig struct {
	TTL    time.Duration // a claim not renewed for this long has expired (a crashed run)
	Settle time.Duration
	Retry  time.Duration // wait between attempts while another run holds the lease
}

// DefaultLeaseConfig: claims expire after 2 minutes without renewal; runs
// decide 3 seconds after claiming and retry every 2 seconds.
func DefaultLeaseConfig() LeaseConfig {
	return LeaseConfig{TTL: 2 * time.Minute, Settle: 3 * time.Second, Retry: 2 * time.Second}
}

// Validate reports every problem.
func (c LeaseConfig) Validate() error {
	var errs []error
	if c.Settle < 2*time.Second {
		errs = append(errs, fmt.Errorf("lease settle %s: at least 2s (the server clock counts whole seconds)", c.Settle))
	}
	if c.TTL < 3*c.Settle {
		errs = append(errs, fmt.Errorf("lease ttl %s: at least three times the settle delay %s", c.TTL, c.Settle))
	}
	if c.Retry <= 0 {
		errs = append(errs, fmt.Errorf("lease retry %s: must be positive", c.Retry))
	}
	return errors.Join(errs...)
}

// ErrLeaseHeld is Acquire's answer while another run holds the lease.
// It is in the conflict category.
var ErrLeaseHeld = fault.Conflict(errors.New("held by another run"))

// Lease is a held lease; Renew it within TTL while working, Release it at
// the end.
type Lease struct {
	store  LeaseStore
	name   string
	holder string
}

// Holder is the run's id in the claims table.
func (l *Lease) Holder() string { return l.holder }

// Renew keeps the lease from expiring.
func (l *Lease) Renew(ctx context.Context) error { return l.store.RenewLease(ctx, l.name, l.holder) }

// Release lets the next run take the lease.
func (l *Lease) Release(ctx context.Context) error {
	return l.store.ReleaseLease(ctx, l.name, l.holder)
}

// TryAcquire makes one attempt: claim, wait out the settle delay, read
// every claim back, and hold the lease when LeaseHolder picks this run.
// Otherwise the claim is released and the error wraps ErrLeaseHeld.
func TryAcquire(ctx context.Context, st LeaseStore, name string, cfg LeaseConfig) (*Lease, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	holder, err := newHolderID()
	if err != nil {
		return nil, err
	}
	l := &Lease{store: st, name: name, holder: holder}
	began := time.Now()
	if err := st.ClaimLease(ctx, name, holder); err != nil {
		return nil, err
	}
	giveUp := func(cause error) (*Lease, error) {
		if err := l.Release(context.WithoutCancel(ctx)); err != nil {
			return nil, errors.Join(cause, err)
		}
		return nil, cause
	}
	if took := time.Since(began); took > cfg.Settle/2 {
		return giveUp(fmt.Errorf("lease %s: claiming took %s, over half the settle delay %s: %w", name, took.Round(time.Millisecond), cfg.Settle, ErrLeaseHeld))
	}
	if err := sleep(ctx, cfg.Settle); err != nil {
		return giveUp(err)
	}
	claims, now, err := st.LeaseClaims(ctx, name)
	if err != nil {
		return giveUp(err)
	}
	if winner, ok := LeaseHolder(claims, now, cfg.TTL); !ok || winner != holder {
		return giveUp(fmt.Errorf("lease %s: %w (%s)", name, ErrLeaseHeld, winner))
	}
	return l, nil
}

// Acquire retries TryAcquire until this run holds the lease or ctx ends.
func Acquire(ctx context.Context, st LeaseStore, name string, cfg LeaseConfig) (*Lease, error) {
	for {
		l, err := TryAcquire(ctx, st, name, cfg)
		if !errors.Is(err, ErrLeaseHeld) {
			return l, err
		}
		if err := sleep(ctx, cfg.Retry); err != nil {
			return nil, fmt.Errorf("lease %s: waiting for another run: %w", name, err)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func newHolderID() (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("lease holder id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}
