package meter

import "testing"

func TestMeterTable(t *testing.T) {
	var m Values
	seen := map[*uint64]ID{}
	cols, files := map[string]bool{}, map[string]bool{}
	for i := range Count {
		p := m.Ptr(i)
		if prev, dup := seen[p]; dup {
			t.Errorf("meters %d and %d share a field", prev, i)
		}
		seen[p] = i
		spec := Specs[i]
		if spec.Column == "" || spec.File == "" || cols[spec.Column] || files[spec.File] {
			t.Errorf("meter %d: spec %+v missing or repeated", i, spec)
		}
		cols[spec.Column], files[spec.File] = true, true
		*p = uint64(i) + 1 // every field reachable through Ptr
	}
	if m != (Values{1, 2, 3, 4, 5, 6, 7, 8, 9}) {
		t.Fatalf("Ptr does not reach every field in order: %+v", m)
	}
	if m.Array() != [Count]uint64{1, 2, 3, 4, 5, 6, 7, 8, 9} {
		t.Fatalf("Values is not in Meter order: %v", m.Array())
	}
}

func TestMetersAdd(t *testing.T) {
	a := Values{GPUMicroseconds: 1, MemPeakBytes: 10, NVLinkRxBytes: 3}
	b := Values{GPUMicroseconds: 2, MemPeakBytes: 7, EnergyMillijoules: 5}
	want := Values{GPUMicroseconds: 3, MemPeakBytes: 10, EnergyMillijoules: 5, NVLinkRxBytes: 3}
	if got := a.Add(b); got != want {
		t.Fatalf("Add = %+v, want %+v (peaks by max, the rest summed)", got, want)
	}
	if a.Array()[NVLinkRx] != 3 || a.Get(MemPeak) != 10 {
		t.Fatalf("Values/Get disagree with the fields: %v", a.Array())
	}
}

func TestFromArrayInvertsArray(t *testing.T) {
	v := Values{1, 2, 3, 4, 5, 6, 7, 8, 9}
	if got := FromArray(v.Array()); got != v {
		t.Fatalf("FromArray(Array()) = %+v, want %+v", got, v)
	}
}
