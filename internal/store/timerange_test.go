package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
	"github.com/gpumeter/gpumeter/internal/store"
	"github.com/gpumeter/gpumeter/internal/store/storetest"
	"github.com/gpumeter/gpumeter/internal/usage"
)

// A range the server cannot represent is an error naming the limit; before
// the fix 18.16 read 2106 times back as 0 and the query found nothing.
func TestUsageRefusesTimesTheServerCannotRepresent(t *testing.T) {
	s := storetest.New(t)
	ctx := context.Background()
	limit, err := s.MaxTime(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v, err := s.ServerVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v.Major < 20 && !limit.Equal(time.Date(2105, 12, 31, 23, 59, 59, 0, time.UTC)) {
		t.Fatalf("server %s: limit %s, want 2105-12-31T23:59:59Z", v, limit)
	}
	// Up to the limit works ([from, to) ends one second after it).
	if _, err := s.Usage(ctx, usage.Query{From: limit.Add(-time.Hour), To: limit.Add(time.Second)}); err != nil {
		t.Fatalf("range ending at the limit: %v", err)
	}
	_, err = s.Usage(ctx, usage.Query{From: limit.Add(-time.Hour), To: limit.Add(2 * time.Second)})
	if limit.Before(collectors.MaxTime) && !errors.Is(err, store.ErrTimeOutOfRange) {
		t.Fatalf("range past the limit %s: err = %v, want ErrTimeOutOfRange", limit, err)
	}
}
