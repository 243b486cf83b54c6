package nvml

import (
	"time"

	"github.com/gpumeter/gpumeter/collectors"
)

// counter turns readings of a monotonic device counter (energy, PCIe and
// NVLink bytes) into per-interval deltas.
type counter struct {
	last uint64
	at   time.Time // when last was read
	ok   bool
}

// counterEvent says what advance saw, for logging.
type counterEvent int

const (
	counterNormal      counterEvent = iota
	counterBaseline                 // first reading, or the previous one is not this interval's start
	counterWrapped                  // a counter narrower than 64 bits went round
	counterReset                    // it went backwards: the driver was reloaded
	counterImplausible              // the delta is larger than the device can do
)

func (e counterEvent) String() string {
	switch e {
	case counterBaseline:
		return "baseline"
	case counterWrapped:
		return "wrapped"
	case counterReset:
		return "reset"
	case counterImplausible:
		return "implausible"
	}
	return "normal"
}

// advance records reading v taken at the end of iv and returns the growth
// over iv. width is the counter's size in bits; maxDelta the most the
// device can plausibly add in the interval.
//
// A counter that went backwards was reset (driver reload, GPU reset): the
// new reading counts from the reset, inside this interval, so it is the
// delta if plausible. A counter narrower than 64 bits that went backwards
// first counts as wrapped if that is plausible. Anything above maxDelta is
// dropped (Delta.OK false), never billed as a huge or negative amount.
func (c *counter) advance(v uint64, width uint, iv interval, maxDelta uint64) (collectors.Delta, counterEvent) {
	prev, prevAt, ok := c.last, c.at, c.ok
	c.last, c.at, c.ok = v, iv.end, true
	if !ok || !prevAt.Equal(iv.start) || !iv.end.After(iv.start) {
		return collectors.Delta{}, counterBaseline
	}
	if v >= prev {
		if d := v - prev; d <= maxDelta {
			return collectors.Delta{Value: d, OK: true}, counterNormal
		}
		return collectors.Delta{}, counterImplausible
	}
	if width > 0 && width < 64 && prev < 1<<width {
		if d := (uint64(1)<<width - prev) + v; d <= maxDelta {
			return collectors.Delta{Value: d, OK: true}, counterWrapped
		}
	}
	if v <= maxDelta {
		return collectors.Delta{Value: v, OK: true}, counterReset
	}
	return collectors.Delta{}, counterImplausible
}

// forget drops the baseline.
func (c *counter) forget() { *c = counter{} }

// perInterval scales a per-second bound to the interval.
func perInterval(perSecond uint64, iv interval) uint64 {
	return collectors.MulDiv(perSecond, iv.micros(), 1_000_000)
}
