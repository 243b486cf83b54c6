package attribution

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	podresources "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpumeter/gpumeter/collectors"
)

const (
	draWholeGPU  = "GPU-4b1e0f4a-5d1c-4c7e-9a53-0c2f1d9e8a01"
	draMIGParent = "GPU-7e2d9c1b-3a4f-4e6d-8b5c-1f0a2e3d4c02"
	draMIG       = "MIG-2c6a1b7e-8e0d-5f3a-a1b2-6d4c3e2f1a09"
	draSharedGPU = "GPU-9a0c3e5f-2b4d-4f6a-8c1e-3d5f7a9b1c03"
)

// fixtureSlices reads testdata/dra/resourceslices.yaml.
func fixtureSlices(t *testing.T) []resourcev1.ResourceSlice {
	t.Helper()
	f, err := os.Open("testdata/dra/resourceslices.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var list resourcev1.ResourceSliceList
	if err := yaml.NewYAMLOrJSONDecoder(f, 4096).Decode(&list); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// fakeAPI is an API server holding the fixture's slices.
func fakeAPI(t *testing.T) *fake.Clientset {
	t.Helper()
	var objs []runtime.Object
	for _, s := range fixtureSlices(t) {
		objs = append(objs, s.DeepCopy())
	}
	return fake.NewClientset(objs...)
}

func newTestSlices(t *testing.T, client *fake.Clientset) *ResourceSlices {
	t.Helper()
	cfg := DefaultResourceSlicesConfig()
	cfg.NodeName = "dgx-kube-01"
	r, err := NewResourceSlices(client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestSliceDeviceUUIDsReadsTheNodesGPUsAndMIGDevices(t *testing.T) {
	got := SliceDeviceUUIDs(fixtureSlices(t), "dgx-kube-01", []string{NVIDIADRADriver})
	want := map[DRADevice]string{
		{NVIDIADRADriver, "dgx-kube-01", "gpu-0"}:           draWholeGPU,
		{NVIDIADRADriver, "dgx-kube-01", "gpu-1-mig-9-4-4"}: draMIG,
		{NVIDIADRADriver, "dgx-kube-01", "gpu-2"}:           draSharedGPU,
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if n := len(SliceDeviceUUIDs(fixtureSlices(t), "dgx-kube-01", []string{"example.com/fpga"})); n != 0 {
		t.Errorf("another driver's devices read: %d", n)
	}
}

// claim is a container's DRA claim with devices of NVIDIA's driver.
func claim(ns, name string, devices ...string) *podresources.DynamicResource {
	dr := &podresources.DynamicResource{ClaimName: name, ClaimNamespace: ns}
	for _, d := range devices {
		dr.ClaimResources = append(dr.ClaimResources, &podresources.ClaimResource{
			DriverName: NVIDIADRADriver, PoolName: "dgx-kube-01", DeviceName: d,
			CdiDevices: []*podresources.CDIDevice{{Name: "k8s.gpu.nvidia.com/device=" + d}},
		})
	}
	return dr
}

func draPod(ns, name string, claims ...*podresources.DynamicResource) *podresources.PodResources {
	return &podresources.PodResources{Namespace: ns, Name: name,
		Containers: []*podresources.ContainerResources{{Name: "main", DynamicResources: claims}}}
}

func draFixture() *podresources.ListPodResourcesResponse {
	shared := claim("sandbox", "shared-gpu", "gpu-2")
	return &podresources.ListPodResourcesResponse{PodResources: []*podresources.PodResources{
		draPod("team-a", "trainer", claim("team-a", "trainer-gpu", "gpu-0")),
		draPod("team-a", "infer", claim("team-a", "infer-mig", "gpu-1-mig-9-4-4")),
		draPod("sandbox", "nb-1", shared),
		draPod("sandbox", "nb-2", shared),
		draPod("sandbox", "nb-3", shared),
		pod("team-a", "legacy", devices("nvidia.com/gpu", "GPU-legacy")),
		// Another driver's claim is not a GPU.
		{Namespace: "team-a", Name: "fpga", Containers: []*podresources.ContainerResources{{Name: "main",
			DynamicResources: []*podresources.DynamicResource{{ClaimName: "f", ClaimNamespace: "team-a",
				ClaimResources: []*podresources.ClaimResource{{DriverName: "example.com/fpga", PoolName: "dgx-kube-01", DeviceName: "gpu-0"}}}}}}},
	}}
}

func draGPUs() []collectors.GPUReading {
	return []collectors.GPUReading{
		{GPU: collectors.GPU{UUID: draWholeGPU}, Processes: []collectors.Process{{PID: 1}}},
		{GPU: collectors.GPU{UUID: draMIGParent}, MIG: true,
			Instances: []collectors.MIGInstance{{UUID: draMIG}, {UUID: "MIG-free"}},
			Processes: []collectors.Process{{PID: 2, MIGUUID: draMIG}}},
		{GPU: collectors.GPU{UUID: draSharedGPU}, Processes: []collectors.Process{{PID: 3}, {PID: 4}}},
		{GPU: collectors.GPU{UUID: "GPU-legacy"}},
	}
}

func TestKubeletAttributesDRAClaims(t *testing.T) {
	socket := serveKubelet(t, &fakeKubelet{resp: draFixture()})
	cfg := DefaultKubeletConfig()
	cfg.Socket, cfg.Timeout = socket, 5*time.Second
	k, err := NewKubelet(cfg, fixtureTenancy, newTestSlices(t, fakeAPI(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	gpus := draGPUs()
	if err := k.Attribute(context.Background(), gpus); err != nil {
		t.Fatal(err)
	}
	trainer := collectors.Owner{Tenant: "alpha", Department: "physics", Workload: "team-a/trainer"}
	if len(gpus[0].Claims) != 1 || gpus[0].Claims[0] != trainer || gpus[0].Processes[0].Owner != trainer {
		t.Errorf("dra whole gpu: claims %+v process %+v", gpus[0].Claims, gpus[0].Processes[0].Owner)
	}
	infer := collectors.Owner{Tenant: "alpha", Department: "physics", Workload: "team-a/infer"}
	mig := gpus[1]
	if len(mig.Claims) != 0 || len(mig.Instances[0].Claims) != 1 || mig.Instances[0].Claims[0] != infer || mig.Processes[0].Owner != infer {
		t.Errorf("dra mig device: gpu claims %+v, instance claims %+v, process %+v", mig.Claims, mig.Instances[0].Claims, mig.Processes[0].Owner)
	}
	if len(mig.Instances[1].Claims) != 0 {
		t.Errorf("unclaimed mig device claimed: %+v", mig.Instances[1].Claims)
	}
	// A claim three pods share: each is a claimant; cgroups tell their
	// processes apart.
	var shared []string
	for _, c := range gpus[2].Claims {
		shared = append(shared, c.Workload)
	}
	if strings.Join(shared, ",") != "sandbox/nb-1,sandbox/nb-2,sandbox/nb-3" || !gpus[2].Processes[0].Owner.IsZero() {
		t.Errorf("shared claim: claimants %v, process %+v", shared, gpus[2].Processes[0].Owner)
	}
	if len(gpus[3].Claims) != 1 || gpus[3].Claims[0].Workload != "team-a/legacy" {
		t.Errorf("device-plugin gpu beside dra: %+v", gpus[3].Claims)
	}
}

func TestKubeletWithAPIServerDownKeepsDevicePluginsAndSaysSo(t *testing.T) {
	socket := serveKubelet(t, &fakeKubelet{resp: draFixture()})
	api := fakeAPI(t)
	api.PrependReactor("list", "resourceslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("apiserver restarting")
	})
	cfg := DefaultKubeletConfig()
	cfg.Socket, cfg.Timeout = socket, 5*time.Second
	k, err := NewKubelet(cfg, fixtureTenancy, newTestSlices(t, api))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	gpus := draGPUs()
	var reported []string
	chain := NewChain(nil, Step{Name: "kubelet", Attributor: k}).Observe(func(source string, err error) {
		reported = append(reported, source+"="+map[bool]string{true: "ok", false: "failed"}[err == nil])
	})
	err = chain.Attribute(context.Background(), gpus)
	var se *SourceError
	if !errors.As(err, &se) || se.Source != SourceResourceSlices || !apierrors.IsServiceUnavailable(se.Err) {
		t.Fatalf("err = %v, want the resource slices' failure", err)
	}
	if strings.Join(reported, ",") != "kubelet=ok,resourceslices=failed" {
		t.Errorf("reported %v", reported)
	}
	if len(gpus[0].Claims) != 0 || len(gpus[2].Claims) != 0 {
		t.Errorf("dra devices claimed without their slices: %+v %+v", gpus[0].Claims, gpus[2].Claims)
	}
	if len(gpus[3].Claims) != 1 {
		t.Errorf("device-plugin gpu lost with the api server: %+v", gpus[3].Claims)
	}
}

func TestResourceSlicesCacheAndRefresh(t *testing.T) {
	api := fakeAPI(t)
	lists := 0
	api.PrependReactor("list", "resourceslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		lists++
		return false, nil, nil
	})
	r := newTestSlices(t, api)
	now := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	r.now = func() time.Time { return now }
	known := []DRADevice{{NVIDIADRADriver, "dgx-kube-01", "gpu-0"}}
	unknown := []DRADevice{{NVIDIADRADriver, "dgx-kube-01", "gpu-7"}}
	ctx := context.Background()
	for _, step := range []struct {
		name    string
		advance time.Duration
		want    []DRADevice
		lists   int
	}{
		{"first call lists", 0, known, 1},
		{"unknown device within a second: cached", 500 * time.Millisecond, unknown, 1},
		{"cached", time.Minute, known, 1},
		{"unknown device later: listed again", 2 * time.Second, unknown, 2},
		{"stale after the refresh", 5 * time.Minute, known, 3},
	} {
		now = now.Add(step.advance)
		m, err := r.DeviceUUIDs(ctx, step.want)
		if err != nil || m[known[0]] != draWholeGPU || lists != step.lists {
			t.Errorf("%s: %d lists (want %d), err %v, gpu-0 %q", step.name, lists, step.lists, err, m[known[0]])
		}
	}
	// A failed list keeps what was known.
	api.PrependReactor("list", "resourceslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	now = now.Add(10 * time.Minute)
	m, err := r.DeviceUUIDs(ctx, known)
	if err == nil || m[known[0]] != draWholeGPU {
		t.Errorf("failed list: err %v, kept %v", err, m)
	}
}

func TestResourceSlicesConfigValidate(t *testing.T) {
	if err := (ResourceSlicesConfig{}).Validate(); err == nil || !strings.Contains(err.Error(), "node name") || !strings.Contains(err.Error(), "drivers") {
		t.Fatalf("empty config: %v", err)
	}
	cfg := DefaultResourceSlicesConfig()
	cfg.NodeName = "n"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
}
