package billing

import "github.com/gpumeter/gpumeter/pricing"

// KindLabel names a line kind for people: "On demand", "Reservation fee",
// "Credit", …; an unknown kind is its own name.
func KindLabel(k pricing.Kind) string {
	switch k {
	case pricing.KindOnDemand:
		return "On demand"
	case pricing.KindReserved:
		return "Reserved"
	case pricing.KindBurst:
		return "Burst"
	case pricing.KindReservationFee:
		return "Reservation fee"
	case pricing.KindTrueUp:
		return "Commitment true-up"
	case KindAdjustment:
		return "Adjustment"
	case KindCredit:
		return "Credit"
	case KindTax:
		return "Tax"
	case KindIncludedCredit:
		return "Included usage"
	case KindPromotionalCredit:
		return "Promotional credit"
	case KindPrepaidCredit:
		return "Prepaid credit"
	}
	return string(k)
}
