package meter

import (
	"encoding/json"
	"testing"
)

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

func TestUnmeasuredTimeJSON(t *testing.T) {
	in := UnmeasuredTime{GroupSMActive: 3, GroupNVLink: 7}
	b, err := json.Marshal(in)
	if err != nil || string(b) != `{"sm_active":3,"energy":0,"pcie":0,"nvlink":7}` {
		t.Fatalf("marshal: %s, %v", b, err)
	}
	var out UnmeasuredTime
	if err := json.Unmarshal([]byte(`{"energy": 5}`), &out); err != nil || out != (UnmeasuredTime{GroupEnergy: 5}) {
		t.Fatalf("unmarshal: %v, %v", out, err)
	}
	if err := json.Unmarshal([]byte(`{"temperature": 5}`), &out); err == nil {
		t.Fatal("an unknown meter was accepted")
	}
}
