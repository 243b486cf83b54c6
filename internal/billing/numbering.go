package billing

import (
	"fmt"
	"sort"
	"time"
)

// SequenceKey names the number sequence an invoice issued at issued (UTC)
// draws from: one sequence per issuer, or one per issuer and year when
// number_reset is yearly.
func (is Issuer) SequenceKey(issued time.Time) string {
	if is.NumberReset == "yearly" {
		return fmt.Sprintf("%s/%04d", is.ID, issued.UTC().Year())
	}
	return is.ID
}

// FormatNumber is the printed invoice number of the seq-th invoice of its
// sequence: the prefix, the year when numbers reset yearly, and at least
// six digits (GC-000042, GC-2026-000042).
func (is Issuer) FormatNumber(seq uint64, issued time.Time) string {
	if is.NumberReset == "yearly" {
		return fmt.Sprintf("%s%04d-%06d", is.NumberPrefix, issued.UTC().Year(), seq)
	}
	return fmt.Sprintf("%s%06d", is.NumberPrefix, seq)
}

// Claim is one billing run's claim on an issuer's lease: only the holder
// finalizes invoices and draws numbers. ClickHouse has no compare-and-set,
// so the lease is a table every run appends its claim to and reads back;
// times are the server's, so runs on different hosts agree on the order.
type Claim struct {
	Holder    string    // the run's random id
	ClaimedAt time.Time // server time of the claim
	RenewedAt time.Time // server time of the last renewal (ClaimedAt at first)
	Released  bool
}

// LeaseHolder is who holds the lease at now: of the claims neither
// released nor expired (renewed within ttl), the earliest; equal times go
// to the smaller holder id. Every run that reads the same claims picks the
// same holder. A run takes the lease only when it is the holder after
// waiting out a settle delay longer than any claim's insert takes, so a
// claim older than its own cannot still be in flight when it decides.
func LeaseHolder(claims []Claim, now time.Time, ttl time.Duration) (string, bool) {
	live := make([]Claim, 0, len(claims))
	for _, c := range claims {
		if c.Released || now.Sub(c.RenewedAt) > ttl {
			continue
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return "", false
	}
	sort.Slice(live, func(i, j int) bool {
		if !live[i].ClaimedAt.Equal(live[j].ClaimedAt) {
			return live[i].ClaimedAt.Before(live[j].ClaimedAt)
		}
		return live[i].Holder < live[j].Holder
	})
	return live[0].Holder, true
}
