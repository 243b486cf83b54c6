package store_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/internal/billing"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
)

// Runs racing for one lease on a real ClickHouse: at every moment at most
// one holds it, and each of them gets it in turn once the holder releases.
func TestLeaseIsHeldByOneRunAtATime(t *testing.T) {
	s := storetest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := billing.LeaseConfig{TTL: 30 * time.Second, Settle: 2 * time.Second, Retry: 200 * time.Millisecond}

	const runs = 3
	var inside, maxInside, done atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, runs)
	for range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := billing.Acquire(ctx, s, "issuer-a", cfg)
			if err != nil {
				errs <- err
				return
			}
			n := inside.Add(1)
			for {
				m := maxInside.Load()
				if n <= m || maxInside.CompareAndSwap(m, n) {
					break
				}
			}
			if err := l.Renew(ctx); err != nil {
				errs <- err
			}
			time.Sleep(500 * time.Millisecond)
			inside.Add(-1)
			done.Add(1)
			if err := l.Release(ctx); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if maxInside.Load() != 1 || done.Load() != runs {
		t.Fatalf("at most %d runs held the lease at once (want 1); %d of %d got it", maxInside.Load(), done.Load(), runs)
	}

	// Another lease name is independent; an expired claim does not block.
	l, err := billing.TryAcquire(ctx, s, "issuer-b", cfg)
	if err != nil {
		t.Fatalf("a free lease: %v", err)
	}
	claims, _, err := s.LeaseClaims(ctx, "issuer-b")
	if err != nil || len(claims) != 1 || claims[0].Holder != l.Holder() || claims[0].Released {
		t.Fatalf("claims %+v, %v", claims, err)
	}
	if _, err := billing.TryAcquire(ctx, s, "issuer-b", cfg); !errors.Is(err, billing.ErrLeaseHeld) {
		t.Fatalf("second run while held: %v, want ErrLeaseHeld", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	claims, _, err = s.LeaseClaims(ctx, "issuer-b")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range claims {
		if !c.Released {
			t.Errorf("claim %s still live after release", c.Holder)
		}
	}
}

func TestLeaseConfigValidate(t *testing.T) {
	if err := billing.DefaultLeaseConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	bad := billing.LeaseConfig{TTL: time.Second, Settle: time.Second}
	if err := bad.Validate(); err == nil {
		t.Fatal("accepted a settle delay under 2s, a ttl under 3 settles and no retry")
	}
}
