package collectors

import "math/bits"

// Split divides total into len(weights) integer parts proportional to the
// weights so that the parts add up to total exactly (largest remainder
// method): every part gets the floor of its exact share, and what is left
// (fewer units than there are parts) goes one unit each to the parts with
// the largest remainders; a tie goes to the earlier part. Callers that need
// results independent of input order sort their parts first.
//
// When every weight is zero the total is split equally, so the parts still
// add up. The result is written to dst, which is grown as needed and
// returned. Split allocates only when dst is too small or for more than 64
// parts.
func Split(dst []uint64, total uint64, weights []uint64) []uint64 {
	n := len(weights)
	dst = grow(dst, n)
	if n == 0 {
		return dst
	}
	// Sum the weights; if the sum overflows, halve every weight until it
	// does not. Shares then are exact for the halved weights, which is as
	// close as 64 bits allow.
	shift := uint(0)
	var sum uint64
	for {
		sum = 0
		overflow := false
		for _, w := range weights {
			var c uint64
			sum, c = bits.Add64(sum, w>>shift, 0)
			if c != 0 {
				overflow = true
				break
			}
		}
		if !overflow {
			break
		}
		shift++
	}
	if sum == 0 {
		// Equal split: every weight counts as one.
		return splitEqual(dst, total)
	}

	var stack [64]uint64
	var rem []uint64
	if n <= len(stack) {
		rem = stack[:n]
	} else {
		rem = make([]uint64, n)
	}
	var given uint64
	for i, w := range weights {
		hi, lo := bits.Mul64(total, w>>shift)
		// hi < sum always holds: total·w < 2^64·sum because w ≤ sum.
		q, r := bits.Div64(hi, lo, sum)
		dst[i] = q
		rem[i] = r
		given += q
	}
	// The remainders add up to (total-given)·sum and each is below sum, so
	// at least left+1 of them are non-zero while left > 0: clearing a
	// chosen remainder never makes the scan pick it twice.
	for left := total - given; left > 0; left-- {
		best := -1
		for i, r := range rem {
			if r > 0 && (best < 0 || r > rem[best]) {
				best = i
			}
		}
		if best < 0 {
			// Unreachable by the argument above; keep the sum exact anyway.
			best = 0
		}
		dst[best]++
		rem[best] = 0
	}
	return dst
}

// SplitEqual divides total into n parts that differ by at most one unit,
// the larger parts first.
func SplitEqual(dst []uint64, total uint64, n int) []uint64 {
	return splitEqual(grow(dst, n), total)
}

func splitEqual(dst []uint64, total uint64) []uint64 {
	n := uint64(len(dst))
	if n == 0 {
		return dst
	}
	q, r := total/n, total%n
	for i := range dst {
		dst[i] = q
		if uint64(i) < r {
			dst[i]++
		}
	}
	return dst
}

func grow(dst []uint64, n int) []uint64 {
	if cap(dst) < n {
		return make([]uint64, n)
	}
	dst = dst[:n]
	clear(dst)
	return dst
}

// MulDiv returns a·b/c rounded down, computed in 128 bits so that the
// product cannot overflow. It saturates at the largest uint64 when the
// quotient does not fit, and returns 0 when c is 0.
func MulDiv(a, b, c uint64) uint64 {
	if c == 0 {
		return 0
	}
	hi, lo := bits.Mul64(a, b)
	if hi >= c {
		return ^uint64(0)
	}
	q, _ := bits.Div64(hi, lo, c)
	return q
}
