package meter

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/shopspring/decimal"
)

// ratio must agree with decimal's DivRound at 18 places on every input:
// it is how stored integers become billed quantities.
func TestRatioMatchesDivRound(t *testing.T) {
	divisors := []uint64{microsecondsPerHour, mibSecondsPerGiBHour, millijoulesPerKWh, bytesPerGiB, 7, 1}
	inputs := []uint64{0, 1, 2, 5, 1_799_999_999, 1_800_000_000, 3_599_999_999, 3_600_000_000, 8_999_999_999_999_999_999 / 1000,
		math.MaxUint64, math.MaxUint64 - 1, 1 << 63, 32_399_999_999, 32_400_000_001}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20_000 {
		inputs = append(inputs, r.Uint64(), r.Uint64N(1<<40), r.Uint64N(100_000_000_000))
	}
	for _, d := range divisors {
		dd := decimal.NewFromUint64(d)
		for _, n := range inputs {
			want := decimal.NewFromUint64(n).DivRound(dd, divisionPrecision)
			if got := ratio(n, d); !got.Equal(want) || got.String() != want.String() {
				t.Fatalf("ratio(%d, %d) = %s, want %s", n, d, got, want)
			}
		}
	}
}
