package billing

import (
	"testing"
	"time"
)

func TestInvoiceNumbers(t *testing.T) {
	issued := time.Date(2027, 1, 1, 0, 30, 0, 0, time.UTC)
	cases := []struct {
		issuer   Issuer
		seq      uint64
		key, num string
	}{
		{Issuer{ID: "gc", NumberPrefix: "GC-"}, 42, "gc", "GC-000042"},
		{Issuer{ID: "gc", NumberPrefix: "GC-", NumberReset: "never"}, 1_234_567, "gc", "GC-1234567"},
		{Issuer{ID: "gc"}, 1, "gc", "000001"},
		{Issuer{ID: "gc", NumberPrefix: "GC-", NumberReset: "yearly"}, 7, "gc/2027", "GC-2027-000007"},
	}
	for _, tc := range cases {
		if got := tc.issuer.SequenceKey(issued); got != tc.key {
			t.Errorf("%+v: key %q, want %q", tc.issuer, got, tc.key)
		}
		if got := tc.issuer.FormatNumber(tc.seq, issued); got != tc.num {
			t.Errorf("%+v: number %q, want %q", tc.issuer, got, tc.num)
		}
	}
	// The year is UTC's, whatever zone the time is given in.
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	yearly := Issuer{ID: "gc", NumberReset: "yearly"}
	if got := yearly.SequenceKey(issued.In(ny)); got != "gc/2027" {
		t.Errorf("key in New York %q, want gc/2027", got)
	}
}

func TestLeaseHolder(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)
	ttl := time.Minute
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	cases := []struct {
		name   string
		claims []Claim
		now    time.Time
		want   string
	}{
		{"none", nil, at(0), ""},
		{"one", []Claim{{Holder: "b", ClaimedAt: at(0), RenewedAt: at(0)}}, at(1), "b"},
		{"earliest wins", []Claim{{Holder: "a", ClaimedAt: at(2), RenewedAt: at(2)}, {Holder: "b", ClaimedAt: at(1), RenewedAt: at(1)}}, at(3), "b"},
		{"tie goes to the smaller id", []Claim{{Holder: "b", ClaimedAt: at(1), RenewedAt: at(1)}, {Holder: "a", ClaimedAt: at(1), RenewedAt: at(1)}}, at(3), "a"},
		{"released is out", []Claim{{Holder: "a", ClaimedAt: at(1), RenewedAt: at(1), Released: true}, {Holder: "b", ClaimedAt: at(2), RenewedAt: at(2)}}, at(3), "b"},
		{"expired is out", []Claim{{Holder: "a", ClaimedAt: at(0), RenewedAt: at(0)}, {Holder: "b", ClaimedAt: at(50), RenewedAt: at(50)}}, at(61), "b"},
		{"renewed is kept", []Claim{{Holder: "a", ClaimedAt: at(0), RenewedAt: at(55)}, {Holder: "b", ClaimedAt: at(50), RenewedAt: at(50)}}, at(61), "a"},
		{"all expired", []Claim{{Holder: "a", ClaimedAt: at(0), RenewedAt: at(0)}}, at(61), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := LeaseHolder(tc.claims, tc.now, ttl)
			if got != tc.want || ok != (tc.want != "") {
				t.Fatalf("holder %q %v, want %q", got, ok, tc.want)
			}
		})
	}
}
