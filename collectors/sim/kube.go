package sim

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	podresources "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpumeter/gpumeter/collectors"
)

// A Kubernetes host (Config.KubeHosts) hands its GPUs out the two ways
// clusters share GPUs now, in a fixed layout:
//
//   - GPU 0: a whole GPU, claimed through DRA by one pod (NVIDIA's DRA
//     driver, gpu.nvidia.com, device "gpu-0").
//   - GPU 1: MIG mode with a 3g and a 4g device; a pod's DRA claim holds
//     the 3g device ("gpu-1-mig-<profile>-<start>-<size>"), the 4g one is
//     free.
//   - GPU 2: one ResourceClaim shared by three pods (time-slicing through
//     the claim's sharing config): each pod's containers list the same
//     claim and device.
//   - GPU 3: shared by HAMi between four pods at 25 % cores each (pod
//     annotations as HAMi's scheduler writes them).
//
// Every pod runs one process from the start for the whole run; the other
// GPUs stay idle. The host serves what a node shows the collector: the
// kubelet's PodResources List on a unix socket (ServePodResources), the
// driver's ResourceSlices (ResourceSlices) and the kubelet's pod list with
// HAMi's annotations (PodList).

// KubeDRADriver is the DRA driver the simulated node's claims name.
const KubeDRADriver = "gpu.nvidia.com"

// HAMiCoresPct is the cores share each HAMi pod of the simulated node gets.
const HAMiCoresPct = 25

// KubeNode is the Kubernetes side of a Kubernetes host.
type KubeNode struct {
	host *Host
	pods []*kubePod
}

type kubePod struct {
	pod    Pod
	tenant string
	gpu    int
	// DRA: the claim and its device; HAMi: the GPU's UUID.
	claimNS, claim, device string
	hami                   bool
}

func (p *kubePod) key() string { return p.pod.Namespace + "/" + p.pod.Name }

// Kube is the host's Kubernetes side; nil unless it is a Kubernetes host.
func (h *Host) Kube() *KubeNode { return h.kube }

// KubeletSocket is where the host's PodResources socket goes.
func (h *Host) KubeletSocket() string {
	if h.cfg.Root == "" {
		return ""
	}
	return filepath.Join(h.cfg.Root, "pod-resources", "kubelet.sock")
}

// kubeScheduler lays a Kubernetes host out and runs its pods' processes.
type kubeScheduler struct {
	h    *Host
	seed uint64
	pids map[*kubePod]uint32
}

// kubeRun is when a pod's process runs, in minutes from the host's start.
// Pods outlive their processes, so their claims and grants stay: a DRA
// claim's time without a process goes to its claimants; a HAMi GPU with no
// process is idle when measured, its pods' grants when granted.
var kubeRun = map[string][][2]int{
	"dra-train/trainer-0":   {{0, 45}},
	"dra-infer/infer-mig-0": {{0, 20}, {30, 60}},
	"dra-share/notebook-1":  {{0, 50}},
	"dra-share/notebook-2":  {{0, 50}},
	"dra-share/notebook-3":  {{0, 30}},
	"hami-a/serve-1":        {{0, 55}},
	"hami-a/serve-2":        {{0, 55}},
	"hami-b/serve-3":        {{0, 55}},
	"hami-b/serve-4":        {{0, 40}},
}

func (s *kubeScheduler) layout() error {
	h := s.h
	if len(h.gpus) < 4 {
		return fmt.Errorf("sim host %s: a kubernetes host needs 4 gpus, has %d", h.cfg.Name, len(h.gpus))
	}
	k := &KubeNode{host: h}
	insts, err := h.gpus[1].EnableMIG("3g.40gb", "4g.40gb")
	if err != nil {
		return err
	}
	mig := insts[0]
	add := func(ns, name string, gpu int, claimNS, claim, device string, hami bool) *kubePod {
		p := &kubePod{pod: Pod{Namespace: ns, Name: name, UID: uuidFrom(h.cfg.Name, "pod", ns, name)}, tenant: ns, gpu: gpu,
			claimNS: claimNS, claim: claim, device: device, hami: hami}
		k.pods = append(k.pods, p)
		return p
	}
	add("dra-train", "trainer-0", 0, "dra-train", "trainer-0-gpu-7f2kq", "gpu-0", false)
	mp := add("dra-infer", "infer-mig-0", 1, "dra-infer", "infer-mig-0-mig-x8c4d", migDeviceName(h.gpus[1], mig), false)
	mig.claim = mp
	for i := 1; i <= 3; i++ {
		add("dra-share", fmt.Sprintf("notebook-%d", i), 2, "dra-share", "shared-gpu", "gpu-2", false)
	}
	for i := 1; i <= 4; i++ {
		ns := "hami-a"
		if i > 2 {
			ns = "hami-b"
		}
		add(ns, fmt.Sprintf("serve-%d", i), 3, "", "", "", true)
	}
	h.kube = k
	return nil
}

// boundary starts and stops the pods' processes by kubeRun (past the
// hour the pattern repeats).
func (s *kubeScheduler) boundary(t time.Time) error {
	h := s.h
	if s.pids == nil {
		s.pids = map[*kubePod]uint32{}
	}
	minute := int(t.Sub(h.cfg.Start)/time.Minute) % 60
	for i, p := range h.kube.pods {
		runs, ok := kubeRun[p.key()]
		if !ok {
			runs = [][2]int{{0, 60}}
		}
		want := false
		for _, r := range runs {
			want = want || (minute >= r[0] && minute < r[1])
		}
		pid, running := s.pids[p]
		switch {
		case want && !running:
			pid, err := h.Start(s.process(i, p))
			if err != nil {
				return err
			}
			s.pids[p] = pid
		case !want && running:
			if err := h.Stop(pid); err != nil {
				return err
			}
			delete(s.pids, p)
		}
	}
	return nil
}

// process is pod i's process.
func (s *kubeScheduler) process(i int, p *kubePod) Process {
	g := s.h.gpus[p.gpu]
	proc := Process{GPU: p.gpu, Workload: Workload{Tenant: p.tenant, Pod: &p.pod}}
	k := inference
	switch {
	case p.gpu == 0:
		k = training
		proc.MemBytes = 60 << 30
	case p.gpu == 1:
		proc.MIG = g.instances[0].uuid
		proc.MemBytes = 12 << 30
	default:
		proc.MemBytes = uint64(4+i) << 30
	}
	proc.Util = utilFunc(k, splitmix(s.seed+uint64(i)))
	return proc
}

// claimants are the pods holding whole GPU g through DRA claims of
// "gpu-<index>" (HAMi's pods hold shares, not the GPU), as the collector
// orders claimants: by tenant, then "namespace/name".
func (k *KubeNode) claimants(g *GPU) []*kubePod {
	var out []*kubePod
	for _, p := range k.pods {
		if p.gpu == g.index && p.device == fmt.Sprintf("gpu-%d", g.index) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b *kubePod) int { return cmp.Or(cmp.Compare(a.tenant, b.tenant), cmp.Compare(a.key(), b.key())) })
	return out
}

func migDeviceName(g *GPU, in *Instance) string {
	return fmt.Sprintf("gpu-%d-mig-%d-%d-%d", g.index, in.profile.NVMLProfile, in.placement.Start, in.placement.Size)
}

// PodResources is the kubelet's PodResources List answer: every pod with
// its container's DRA claim (driver, pool = node, device, CDI device);
// HAMi's pods show no GPU here (their devices are HAMi's own).
func (k *KubeNode) PodResources() *podresources.ListPodResourcesResponse {
	resp := &podresources.ListPodResourcesResponse{}
	for _, p := range k.pods {
		c := &podresources.ContainerResources{Name: "main"}
		if p.claim != "" {
			c.DynamicResources = []*podresources.DynamicResource{{
				ClaimName: p.claim, ClaimNamespace: p.claimNS,
				ClaimResources: []*podresources.ClaimResource{{
					DriverName: KubeDRADriver, PoolName: k.host.cfg.Name, DeviceName: p.device,
					CdiDevices: []*podresources.CDIDevice{{Name: "k8s." + KubeDRADriver + "/claim=" + uuidFrom(p.claimNS, p.claim) + "-" + p.device}},
				}},
			}}
		}
		resp.PodResources = append(resp.PodResources, &podresources.PodResources{Name: p.pod.Name, Namespace: p.pod.Namespace, Containers: []*podresources.ContainerResources{c}})
	}
	return resp
}

type podResourcesServer struct {
	podresources.UnimplementedPodResourcesListerServer
	k *KubeNode
}

func (s podResourcesServer) List(context.Context, *podresources.ListPodResourcesRequest) (*podresources.ListPodResourcesResponse, error) {
	return s.k.PodResources(), nil
}

// ServePodResources serves List on a unix socket at path, as the kubelet
// does, until stop is called.
func (k *KubeNode) ServePodResources(path string) (stop func() error, err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("sim kubelet: %w", err)
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("sim kubelet: %w", err)
	}
	srv := grpc.NewServer()
	podresources.RegisterPodResourcesListerServer(srv, podResourcesServer{k: k})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	return func() error {
		srv.Stop()
		if err := <-done; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			return fmt.Errorf("sim kubelet: %w", err)
		}
		return nil
	}, nil
}

// ResourceSlices are the slices NVIDIA's DRA driver publishes for the
// node: one pool named after it, its whole GPUs ("gpu-<index>") and MIG
// devices with their uuid attributes; HAMi's GPU is not the driver's.
func (k *KubeNode) ResourceSlices() []resourcev1.ResourceSlice {
	h := k.host
	node := h.cfg.Name
	str := func(s string) resourcev1.DeviceAttribute { return resourcev1.DeviceAttribute{StringValue: &s} }
	ver := func(s string) resourcev1.DeviceAttribute { return resourcev1.DeviceAttribute{VersionValue: &s} }
	common := func(attrs map[resourcev1.QualifiedName]resourcev1.DeviceAttribute) map[resourcev1.QualifiedName]resourcev1.DeviceAttribute {
		attrs["productName"] = str(h.model.nvmlName)
		attrs["brand"] = str("Nvidia")
		attrs["architecture"] = str("Hopper")
		attrs["cudaComputeCapability"] = ver("9.0.0")
		attrs["driverVersion"] = ver("570.133.20")
		attrs["cudaDriverVersion"] = ver("12.8.0")
		attrs["addressingMode"] = str("None")
		return attrs
	}
	var devices []resourcev1.Device
	for _, g := range h.gpus {
		if g.index == 3 {
			continue
		}
		if !g.mig {
			devices = append(devices, resourcev1.Device{
				Name: fmt.Sprintf("gpu-%d", g.index),
				Attributes: common(map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
					"type": str("gpu"), "uuid": str(g.uuid), "pcieBusID": str(g.busID[4:]),
				}),
				Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{"memory": {Value: *resource.NewQuantity(int64(g.memTotal), resource.BinarySI)}},
			})
			continue
		}
		for _, in := range g.instances {
			devices = append(devices, resourcev1.Device{
				Name: migDeviceName(g, in),
				Attributes: common(map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
					"type": str("mig"), "uuid": str(in.uuid), "parentUUID": str(g.uuid), "profile": str(in.profile.Name), "pcieBusID": str(g.busID[4:]),
				}),
				Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{"memory": {Value: *resource.NewQuantity(int64(in.profile.MemoryGB)<<30, resource.BinarySI)}},
			})
		}
	}
	return []resourcev1.ResourceSlice{{
		TypeMeta:   metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceSlice"},
		ObjectMeta: metav1.ObjectMeta{Name: node + "-" + KubeDRADriver + "-sim"},
		Spec: resourcev1.ResourceSliceSpec{
			Driver:   KubeDRADriver,
			NodeName: &node,
			Pool:     resourcev1.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
			Devices:  devices,
		},
	}}
}

// PodList is the kubelet's /pods answer (a v1.PodList in JSON): every pod
// running, HAMi's with the annotations its scheduler and device plugin
// leave on a bound pod.
func (k *KubeNode) PodList() ([]byte, error) {
	h := k.host
	list := corev1.PodList{TypeMeta: metav1.TypeMeta{Kind: "PodList", APIVersion: "v1"}}
	bound := strconv.FormatInt(h.cfg.Start.Unix(), 10)
	for _, p := range k.pods {
		pod := corev1.Pod{
			TypeMeta:   metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
			ObjectMeta: metav1.ObjectMeta{Name: p.pod.Name, Namespace: p.pod.Namespace, UID: types.UID(p.pod.UID)},
			Spec:       corev1.PodSpec{NodeName: h.cfg.Name},
			Status:     corev1.PodStatus{Phase: corev1.PodRunning},
		}
		if p.hami {
			pod.Spec.SchedulerName = "hami-scheduler"
			pod.Annotations = map[string]string{
				"hami.io/bind-phase":               "success",
				"hami.io/bind-time":                bound,
				"hami.io/vgpu-devices-allocated":   fmt.Sprintf("%s,NVIDIA,%d,%d:;", h.gpus[p.gpu].uuid, 20000, HAMiCoresPct),
				"hami.io/vgpu-devices-to-allocate": ";",
				"hami.io/vgpu-node":                h.cfg.Name,
				"hami.io/vgpu-time":                bound,
			}
		}
		list.Items = append(list.Items, pod)
	}
	b, err := json.Marshal(list)
	if err != nil {
		return nil, fmt.Errorf("sim kubelet pod list: %w", err)
	}
	return b, nil
}

// recordGrants books one step of the HAMi GPU by grants: each pod its
// cores share of the step, the rest idle, by largest remainder in pod
// order as the collector splits it.
func (l *Ledger) recordGrants(k *KubeNode, g *GPU, stepUs uint64) {
	var pods []*kubePod
	var weights []uint64
	var sum uint64
	for _, p := range k.pods {
		if p.hami && p.gpu == g.index {
			pods = append(pods, p)
			weights = append(weights, HAMiCoresPct*(collectors.PPMScale/100))
			sum += HAMiCoresPct * (collectors.PPMScale / 100)
		}
	}
	if len(pods) == 0 {
		return
	}
	weights = append(weights, collectors.PPMScale-min(sum, collectors.PPMScale))
	parts := collectors.Split(nil, stepUs, weights)
	for i, p := range pods {
		l.GrantedGPUMicrosecondsByPod[p.key()] += parts[i]
	}
}
