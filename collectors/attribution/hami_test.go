package attribution

import (
	"context"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
)

func TestParseHAMiDevices(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want [][]HAMiDevice
		err  string
	}{
		{"one container, one GPU (as HAMi's docs show it)", "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448,NVIDIA,3000,0:;",
			[][]HAMiDevice{{{UUID: "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448", Type: "NVIDIA", MemoryMiB: 3000}}}, ""},
		{"containers in order, an empty one kept", "GPU-a,NVIDIA,10000,10:;;GPU-a,NVIDIA,10000,15:GPU-b,NVIDIA,4000,30:;",
			[][]HAMiDevice{{{"GPU-a", "NVIDIA", 10000, 10}}, nil, {{"GPU-a", "NVIDIA", 10000, 15}, {"GPU-b", "NVIDIA", 4000, 30}}}, ""},
		{"after allocation the to-allocate annotation is just ;", ";", [][]HAMiDevice{nil}, ""},
		{"empty", "", nil, ""},
		{"memory not a number", "GPU-a,NVIDIA,lots,25:;", nil, "memory"},
		{"cores above 100", "GPU-a,NVIDIA,1000,101:;", nil, "cores"},
		{"negative cores", "GPU-a,NVIDIA,1000,-5:;", nil, "cores"},
		{"missing field", "GPU-a,NVIDIA,1000:;", nil, "3 fields"},
		{"empty uuid", ",NVIDIA,1000,10:;", nil, "empty uuid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseHAMiDevices(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// FuzzParseHAMiDevices: no panic, and a parsed device is well formed.
func FuzzParseHAMiDevices(f *testing.F) {
	for _, s := range []string{"GPU-a,NVIDIA,3000,0:;", ";", "GPU-a,NVIDIA,1,2:GPU-b,NVIDIA,3,4:;;", ",,,:;", "a,b,c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseHAMiDevices(s)
		if err != nil {
			return
		}
		for _, c := range got {
			for _, d := range c {
				if d.UUID == "" || d.Type == "" || d.CoresPct > 100 {
					t.Fatalf("%q gave %+v", s, d)
				}
			}
		}
	})
}

// podFile lists the pods of a kubelet /pods fixture.
type podFile string

func (p podFile) Pods(context.Context) ([]PodMeta, error) {
	f, err := os.Open(string(p))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return DecodePodList(f)
}

func TestHAMiAttributesSharedGPUs(t *testing.T) {
	h, err := NewHAMi(podFile("testdata/hami/pods.json"), "dgx-kube-01", fixtureTenancy)
	if err != nil {
		t.Fatal(err)
	}
	gpus := []collectors.GPUReading{
		{GPU: collectors.GPU{UUID: "GPU-hami"}, Processes: []collectors.Process{{PID: 1}}},
		{GPU: collectors.GPU{UUID: "GPU-other"}, Processes: []collectors.Process{{PID: 2}}},
		{GPU: collectors.GPU{UUID: "GPU-plain"}},
	}
	err = h.Attribute(context.Background(), gpus)
	// The torn annotation is reported, the other pods still attributed.
	if err == nil || !strings.Contains(err.Error(), "sandbox/torn") {
		t.Fatalf("err = %v, want the torn pod reported", err)
	}
	a := collectors.Owner{Tenant: "alpha", Department: "physics", Workload: "team-a/infer-a"}
	b := collectors.Owner{Tenant: "sandbox", Workload: "sandbox/infer-b"}
	two := collectors.Owner{Tenant: "sandbox", Workload: "sandbox/two-containers"}
	wantGrants := []collectors.Grant{{Owner: a, SharePPM: 250_000}, {Owner: b, SharePPM: 250_000}, {Owner: two, SharePPM: 250_000}}
	if !reflect.DeepEqual(gpus[0].Grants, wantGrants) {
		t.Errorf("grants %+v, want %+v", gpus[0].Grants, wantGrants)
	}
	// Holders of a share, not of the GPU: no claims, unused time is idle.
	if len(gpus[0].Claims) != 0 || !gpus[0].Processes[0].Owner.IsZero() {
		t.Errorf("shared gpu: claims %+v, process %+v", gpus[0].Claims, gpus[0].Processes[0].Owner)
	}
	// 0 % cores is HAMi's "no limit": the whole GPU; one holder gets its
	// processes.
	if !reflect.DeepEqual(gpus[1].Grants, []collectors.Grant{{Owner: two, SharePPM: 1_000_000}}) || gpus[1].Processes[0].Owner != two {
		t.Errorf("single holder: grants %+v, process %+v", gpus[1].Grants, gpus[1].Processes[0].Owner)
	}
	if len(gpus[2].Claims) != 0 || len(gpus[2].Grants) != 0 {
		t.Errorf("gpu without hami claimed: %+v", gpus[2])
	}
}

type failingPods struct{ pods []PodMeta }

func (f failingPods) Pods(context.Context) ([]PodMeta, error) {
	return f.pods, errors.New("kubelet unreachable")
}

func TestHAMiWithoutPodListFails(t *testing.T) {
	h, _ := NewHAMi(failingPods{}, "", fixtureTenancy)
	gpus := []collectors.GPUReading{{GPU: collectors.GPU{UUID: "GPU-hami"}}}
	if err := h.Attribute(context.Background(), gpus); err == nil || len(gpus[0].Claims) != 0 {
		t.Fatalf("err %v, claims %+v", err, gpus[0].Claims)
	}
	if _, err := NewHAMi(nil, "", fixtureTenancy); err == nil {
		t.Fatal("nil pod list accepted")
	}
}

// hamiReading is a GPU four HAMi pods share at 25 % each, their processes
// using it unevenly (10, 20, 30 and 0 % SM), for the interval.
func hamiReading(grants ...uint32) *collectors.GPUReading {
	g := &collectors.GPUReading{GPU: collectors.GPU{UUID: "GPU-hami", Model: "H100-SXM5-80GB"}, ProcessUtilization: true}
	for i, share := range grants {
		o := collectors.Owner{Tenant: "t", Workload: "ns/p" + string(rune('0'+i))}
		g.Grants = append(g.Grants, collectors.Grant{Owner: o, SharePPM: share})
		g.Claims = append(g.Claims, o)
		g.Processes = append(g.Processes, collectors.Process{PID: uint32(100 + i), Owner: o, MemBytes: 1 << 30,
			SMUtil: collectors.Ratio{PPM: uint32(i%4) * 100_000, OK: true}})
	}
	return g
}

func TestApportionGrantedShares(t *testing.T) {
	start := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	end := start.Add(10 * time.Second)
	for _, tc := range []struct {
		name     string
		grants   []uint32
		want     []uint64 // per pod, µs
		wantIdle uint64
	}{
		{"four pods at 25 % take the GPU", []uint32{250_000, 250_000, 250_000, 250_000}, []uint64{2_500_000, 2_500_000, 2_500_000, 2_500_000}, 0},
		{"three pods at 25 %: a quarter idle", []uint32{250_000, 250_000, 250_000}, []uint64{2_500_000, 2_500_000, 2_500_000}, 2_500_000},
		{"over-subscribed grants scale to the GPU", []uint32{1_000_000, 1_000_000, 500_000}, []uint64{4_000_000, 4_000_000, 2_000_000}, 0},
		{"thirds round by largest remainder", []uint32{333_333, 333_333, 333_334}, []uint64{3_333_330, 3_333_330, 3_333_340}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := Options{Granted: true}.Apportion(nil, "h", start, end, hamiReading(tc.grants...))
			got := map[string]uint64{}
			var total uint64
			for _, s := range out {
				got[s.Workload] += s.GPUMicroseconds
				total += s.GPUMicroseconds
				if s.SMActiveMicroseconds > s.GPUMicroseconds {
					t.Errorf("%s: sm active %d above gpu time %d", s.Workload, s.SMActiveMicroseconds, s.GPUMicroseconds)
				}
			}
			if total != 10_000_000 {
				t.Fatalf("rows add up to %d µs, want the interval", total)
			}
			for i, w := range tc.want {
				if k := "ns/p" + string(rune('0'+i)); got[k] != w {
					t.Errorf("%s: %d µs, want %d", k, got[k], w)
				}
			}
			if got[""] != tc.wantIdle {
				t.Errorf("idle %d µs, want %d", got[""], tc.wantIdle)
			}
		})
	}
	// Measured (the default): the same GPU splits by SM use.
	out := Apportion(nil, "h", start, end, hamiReading(250_000, 250_000, 250_000, 250_000))
	got := map[string]uint64{}
	for _, s := range out {
		got[s.Workload] += s.GPUMicroseconds
	}
	if got["ns/p0"] != 0 || got["ns/p3"] != 5_000_000 || got["ns/p1"] != 1_666_667 {
		t.Errorf("measured split %v", got)
	}
}
