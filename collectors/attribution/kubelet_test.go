package attribution

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	podresources "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpumeter/gpumeter/collectors"
)

// fakeKubelet serves PodResources List from a fixed response.
type fakeKubelet struct {
	podresources.UnimplementedPodResourcesListerServer
	resp *podresources.ListPodResourcesResponse
	err  error
}

func (k *fakeKubelet) List(context.Context, *podresources.ListPodResourcesRequest) (*podresources.ListPodResourcesResponse, error) {
	return k.resp, k.err
}

// serveKubelet starts a fake kubelet on a unix socket in a temp dir.
func serveKubelet(t *testing.T, k *fakeKubelet) string {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "kubelet.sock")
	lis, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	podresources.RegisterPodResourcesListerServer(srv, k)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-done; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("serve: %v", err)
		}
	})
	return socket
}

func pod(ns, name string, devices ...*podresources.ContainerDevices) *podresources.PodResources {
	return &podresources.PodResources{Namespace: ns, Name: name, Containers: []*podresources.ContainerResources{{Name: "main", Devices: devices}}}
}

func devices(resource string, ids ...string) *podresources.ContainerDevices {
	return &podresources.ContainerDevices{ResourceName: resource, DeviceIds: ids}
}

func newTestKubelet(t *testing.T, socket string) *Kubelet {
	t.Helper()
	cfg := DefaultKubeletConfig()
	cfg.Socket = socket
	cfg.Timeout = 5 * time.Second
	k, err := NewKubelet(cfg, fixtureTenancy, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { k.Close() })
	return k
}

func TestKubeletAttribution(t *testing.T) {
	socket := serveKubelet(t, &fakeKubelet{resp: &podresources.ListPodResourcesResponse{PodResources: []*podresources.PodResources{
		pod("team-a", "trainer", devices("nvidia.com/gpu", "GPU-whole")),
		pod("team-a", "infer", devices("nvidia.com/mig-1g.10gb", "MIG-small")),
		pod("sandbox", "nb-1", devices("nvidia.com/gpu", "GPU-shared::0")),
		pod("sandbox", "nb-2", devices("nvidia.com/gpu", "GPU-shared::3")),
		pod("team-a", "fpga", devices("example.com/fpga", "GPU-idle")),
		pod("team-a", "cpu-only"),
	}}})
	k := newTestKubelet(t, socket)
	gpus := []collectors.GPUReading{
		{GPU: collectors.GPU{UUID: "GPU-whole"}, Processes: []collectors.Process{{PID: 1}}},
		{GPU: collectors.GPU{UUID: "GPU-shared"}, Processes: []collectors.Process{{PID: 2}, {PID: 3}}},
		{GPU: collectors.GPU{UUID: "GPU-mig"}, MIG: true,
			Instances: []collectors.MIGInstance{{UUID: "MIG-small"}, {UUID: "MIG-free"}},
			Processes: []collectors.Process{{PID: 4, MIGUUID: "MIG-small"}, {PID: 5, MIGUUID: "MIG-free"}}},
		{GPU: collectors.GPU{UUID: "GPU-idle"}},
	}
	if err := k.Attribute(context.Background(), gpus); err != nil {
		t.Fatal(err)
	}
	trainer := collectors.Owner{Tenant: "alpha", Department: "physics", Workload: "team-a/trainer"}
	if len(gpus[0].Claims) != 1 || gpus[0].Claims[0] != trainer || gpus[0].Processes[0].Owner != trainer {
		t.Errorf("whole gpu: claims %+v process %+v", gpus[0].Claims, gpus[0].Processes[0].Owner)
	}
	// Time-sliced replicas: both pods claim the GPU; its processes need
	// their cgroups to tell them apart.
	if len(gpus[1].Claims) != 2 || gpus[1].Claims[0].Workload != "sandbox/nb-1" || gpus[1].Claims[1].Tenant != "sandbox" {
		t.Errorf("shared gpu claims %+v", gpus[1].Claims)
	}
	if !gpus[1].Processes[0].Owner.IsZero() {
		t.Errorf("process on a shared gpu attributed by the kubelet: %+v", gpus[1].Processes[0].Owner)
	}
	infer := collectors.Owner{Tenant: "alpha", Department: "physics", Workload: "team-a/infer"}
	mig := gpus[2]
	if len(mig.Instances[0].Claims) != 1 || mig.Instances[0].Claims[0] != infer || mig.Processes[0].Owner != infer {
		t.Errorf("mig device: claims %+v process %+v", mig.Instances[0].Claims, mig.Processes[0].Owner)
	}
	if len(mig.Instances[1].Claims) != 0 || !mig.Processes[1].Owner.IsZero() {
		t.Errorf("unallocated mig device claimed: %+v %+v", mig.Instances[1].Claims, mig.Processes[1].Owner)
	}
	if len(gpus[3].Claims) != 0 {
		t.Errorf("non-gpu resource counted: %+v", gpus[3].Claims)
	}
}

func TestKubeletWithoutSocketHasNoData(t *testing.T) {
	k := newTestKubelet(t, filepath.Join(t.TempDir(), "absent.sock"))
	err := k.Attribute(context.Background(), nil)
	if !errors.Is(err, collectors.ErrNoData) {
		t.Fatalf("err = %v, want ErrNoData", err)
	}
}

func TestKubeletErrorIsReported(t *testing.T) {
	socket := serveKubelet(t, &fakeKubelet{err: status.Error(codes.Unavailable, "kubelet restarting")})
	k := newTestKubelet(t, socket)
	gpus := []collectors.GPUReading{{GPU: collectors.GPU{UUID: "GPU-whole"}}}
	err := k.Attribute(context.Background(), gpus)
	if err == nil || errors.Is(err, collectors.ErrNoData) {
		t.Fatalf("err = %v, want a real error", err)
	}
	if len(gpus[0].Claims) != 0 {
		t.Fatalf("claims made on error: %+v", gpus[0].Claims)
	}
}

func TestKubeletKeepsEarlierClaims(t *testing.T) {
	socket := serveKubelet(t, &fakeKubelet{resp: &podresources.ListPodResourcesResponse{PodResources: []*podresources.PodResources{
		pod("team-a", "trainer", devices("nvidia.com/gpu", "GPU-whole")),
	}}})
	k := newTestKubelet(t, socket)
	earlier := collectors.Owner{Tenant: "earlier"}
	gpus := []collectors.GPUReading{{GPU: collectors.GPU{UUID: "GPU-whole"}, Claims: []collectors.Owner{earlier}}}
	if err := k.Attribute(context.Background(), gpus); err != nil {
		t.Fatal(err)
	}
	if len(gpus[0].Claims) != 1 || gpus[0].Claims[0] != earlier {
		t.Fatalf("claims %+v", gpus[0].Claims)
	}
}

func TestKubeletConfigValidate(t *testing.T) {
	if err := (KubeletConfig{}).Validate(); err == nil {
		t.Fatal("empty config accepted")
	}
	if err := DefaultKubeletConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}
