package meter

import "testing"

func TestUnmeasuredNamesRoundTrip(t *testing.T) {
	for u := Unmeasured(0); u <= UnmeasuredAll; u++ {
		got, err := ParseUnmeasured(u.String())
		if err != nil || got != u {
			t.Errorf("ParseUnmeasured(%q) = %v, %v; want %v", u.String(), got, err, u)
		}
	}
	if got, err := ParseUnmeasured(" energy ; nvlink "); err != nil || got != UnmeasuredEnergy|UnmeasuredNVLink {
		t.Errorf("spaces: %v, %v", got, err)
	}
	if _, err := ParseUnmeasured("energy;temperature"); err == nil {
		t.Error("unknown meter accepted")
	}
}
