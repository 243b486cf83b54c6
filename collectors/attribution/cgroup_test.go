package attribution

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpumeter/gpumeter/collectors"
)

const (
	uid1 = "8a1e6f2e-3c4d-4b5a-9e8f-0123456789ab"
	cid  = "4c5b2f1a9d8e7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b"
)

func TestParseCgroup(t *testing.T) {
	cases := []struct {
		file string
		want CgroupRef
	}{
		{"k8s-cgroupfs-v1.txt", CgroupRef{PodUID: uid1, ContainerID: cid}},
		{"k8s-cgroupfs-v2.txt", CgroupRef{PodUID: uid1, ContainerID: cid}},
		{"k8s-cgroupfs-guaranteed.txt", CgroupRef{PodUID: uid1, ContainerID: cid}},
		{"k8s-systemd-v2.txt", CgroupRef{PodUID: uid1, ContainerID: cid}},
		{"k8s-systemd-v1-docker.txt", CgroupRef{PodUID: uid1, ContainerID: cid}},
		{"k8s-systemd-v2-crio.txt", CgroupRef{PodUID: uid1, ContainerID: cid}},
		{"k8s-static-pod.txt", CgroupRef{PodUID: "6f1e7a1b3c2d4e5f6a7b8c9d0e1f2a3b", ContainerID: cid}},
		{"k8s-kind-nested.txt", CgroupRef{PodUID: uid1, ContainerID: cid}},
		{"slurm-v1.txt", CgroupRef{SlurmJob: "4242", SlurmStep: "0"}},
		{"slurm-v1-multiple-slurmd.txt", CgroupRef{SlurmJob: "77", SlurmStep: "batch"}},
		{"slurm-v2.txt", CgroupRef{SlurmJob: "5150", SlurmStep: "0"}},
		{"slurm-v2-extern.txt", CgroupRef{SlurmJob: "5151", SlurmStep: "extern"}},
		{"docker-container.txt", CgroupRef{}},
		{"user-session.txt", CgroupRef{}},
		{"slurmd-daemon.txt", CgroupRef{}},
		{"empty.txt", CgroupRef{}},
		{"garbage.txt", CgroupRef{}},
	}
	for _, tc := range cases {
		t.Run(strings.TrimSuffix(tc.file, ".txt"), func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", "cgroup", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if got := ParseCgroup(string(b)); got != tc.want {
				t.Fatalf("ParseCgroup = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func FuzzParseCgroup(f *testing.F) {
	entries, err := os.ReadDir(filepath.Join("testdata", "cgroup"))
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("testdata", "cgroup", e.Name()))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	f.Fuzz(func(t *testing.T, content string) {
		ref := ParseCgroup(content)
		if ref.PodUID != "" && (!isPodUID(ref.PodUID) || ref.SlurmJob != "") {
			t.Fatalf("bad pod uid %+v", ref)
		}
		if ref.SlurmJob != "" && !isDigits(ref.SlurmJob) {
			t.Fatalf("bad slurm job %+v", ref)
		}
		if ref.ContainerID != "" && (len(ref.ContainerID) != 64 || !isHex(ref.ContainerID)) {
			t.Fatalf("bad container id %+v", ref)
		}
	})
}

var fixtureTenancy = Tenancy{
	Mapping: Mapping{
		Namespaces: map[string]Tenant{"team-a": {Name: "alpha", Department: "physics"}},
		Accounts:   map[string]Tenant{"physics": {Name: "uni", Department: "physics-dept"}},
	},
	NamespaceIsTenant: true,
	AccountIsTenant:   true,
}

// checkCgroupOwner checks the owner a fresh cgroup attributor with cfg and
// tenancy gives process pid.
func checkCgroupOwner(t *testing.T, cfg CgroupConfig, tenancy Tenancy, pid uint32, want collectors.Owner) {
	t.Helper()
	c, err := NewCgroup(cfg, tenancy, nil)
	if err != nil {
		t.Fatal(err)
	}
	gpus := gpuWith(pid)
	if err := c.Attribute(context.Background(), gpus); err != nil {
		t.Fatal(err)
	}
	if got := gpus[0].Processes[0].Owner; got != want {
		t.Fatalf("owner = %+v, want %+v", got, want)
	}
}

func gpuWith(pids ...uint32) []collectors.GPUReading {
	g := collectors.GPUReading{GPU: collectors.GPU{UUID: "GPU-1"}}
	for _, pid := range pids {
		g.Processes = append(g.Processes, collectors.Process{PID: pid})
	}
	return []collectors.GPUReading{g}
}

func TestCgroupAttribution(t *testing.T) {
	cases := []struct {
		name    string
		pid     uint32
		tenancy Tenancy
		want    collectors.Owner
	}{
		{"pod in a mapped namespace (systemd driver)", 101, fixtureTenancy, collectors.Owner{Tenant: "alpha", Department: "physics", Workload: "team-a/trainer-0"}},
		{"pod in an unmapped namespace is a tenant of its own", 102, fixtureTenancy, collectors.Owner{Tenant: "sandbox", Workload: "sandbox/notebook-x"}},
		{"pod in an unmapped namespace without namespace tenancy is unattributed", 102, Tenancy{}, collectors.Owner{Workload: "sandbox/notebook-x"}},
		{"pod not in the pod log directory keeps its uid", 103, fixtureTenancy, collectors.Owner{Workload: "pod/99999999-aaaa-4bbb-8ccc-dddddddddddd"}},
		{"slurm job (cgroup v2) with a mapped account", 201, fixtureTenancy, collectors.Owner{Tenant: "uni", Department: "physics-dept", Workload: "slurm/5150"}},
		{"slurm job (cgroup v1) with an unmapped account", 202, fixtureTenancy, collectors.Owner{Tenant: "guest", Workload: "slurm/4242"}},
		{"slurm job whose environment is unreadable", 203, fixtureTenancy, collectors.Owner{Workload: "slurm/6000"}},
		{"a login session process is nobody's", 204, fixtureTenancy, collectors.Owner{}},
		{"a process without /proc entry is nobody's", 999, fixtureTenancy, collectors.Owner{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			checkCgroupOwner(t, CgroupConfig{ProcRoot: "testdata/proc", PodLogDir: "testdata/pods"}, tc.tenancy, tc.pid, tc.want)
		})
	}
}

func TestCgroupLeavesEarlierAttributionAlone(t *testing.T) {
	c, err := NewCgroup(CgroupConfig{ProcRoot: "testdata/proc", PodLogDir: "testdata/pods"}, fixtureTenancy, nil)
	if err != nil {
		t.Fatal(err)
	}
	gpus := gpuWith(101)
	kubelet := collectors.Owner{Tenant: "from-kubelet", Workload: "ns/pod"}
	gpus[0].Processes[0].Owner = kubelet
	if err := c.Attribute(context.Background(), gpus); err != nil {
		t.Fatal(err)
	}
	if got := gpus[0].Processes[0].Owner; got != kubelet {
		t.Fatalf("owner overwritten: %+v", got)
	}
}

func TestCgroupCachesWhileThePIDIsOnAGPU(t *testing.T) {
	root := t.TempDir()
	proc, pods := filepath.Join(root, "proc"), filepath.Join(root, "pods")
	copyDir(t, "testdata/proc/201", filepath.Join(proc, "201"))
	copyDir(t, "testdata/proc/103", filepath.Join(proc, "103"))
	if err := os.MkdirAll(pods, 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := NewCgroup(CgroupConfig{ProcRoot: proc, PodLogDir: pods}, fixtureTenancy, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	gpus := gpuWith(201, 103)
	if err := c.Attribute(ctx, gpus); err != nil {
		t.Fatal(err)
	}
	if gpus[0].Processes[0].Owner.Tenant != "uni" || gpus[0].Processes[1].Owner.Workload != "pod/99999999-aaaa-4bbb-8ccc-dddddddddddd" {
		t.Fatalf("first poll: %+v", gpus[0].Processes)
	}
	// The process exits: its /proc entry goes, but its last interval still
	// knows whose it was.
	if err := os.RemoveAll(filepath.Join(proc, "201")); err != nil {
		t.Fatal(err)
	}
	// The pod's log directory appears: the unresolved pod is looked up again.
	if err := os.MkdirAll(filepath.Join(pods, "team-a_late-pod_99999999-aaaa-4bbb-8ccc-dddddddddddd"), 0o755); err != nil {
		t.Fatal(err)
	}
	gpus = gpuWith(201, 103)
	if err := c.Attribute(ctx, gpus); err != nil {
		t.Fatal(err)
	}
	if gpus[0].Processes[0].Owner.Tenant != "uni" {
		t.Fatalf("cached owner lost: %+v", gpus[0].Processes[0].Owner)
	}
	if got := gpus[0].Processes[1].Owner; got.Tenant != "alpha" || got.Workload != "team-a/late-pod" {
		t.Fatalf("late pod not resolved: %+v", got)
	}
	// A poll without the PID forgets it; a new process with the same PID is
	// looked up afresh.
	if err := c.Attribute(ctx, gpuWith(103)); err != nil {
		t.Fatal(err)
	}
	gpus = gpuWith(201)
	if err := c.Attribute(ctx, gpus); err != nil {
		t.Fatal(err)
	}
	if got := gpus[0].Processes[0].Owner; !got.IsZero() {
		t.Fatalf("reused pid got the old owner: %+v", got)
	}
}

func TestParsePodLogDir(t *testing.T) {
	ns, name, uid, ok := parsePodLogDir("kube-system_coredns-5d78c9869d-abcde_" + uid1)
	if !ok || ns != "kube-system" || name != "coredns-5d78c9869d-abcde" || uid != uid1 {
		t.Fatalf("got %q %q %q %v", ns, name, uid, ok)
	}
	for _, bad := range []string{"junk", "a_b_notauid", "_name_" + uid1, "ns__" + uid1} {
		if _, _, _, ok := parsePodLogDir(bad); ok {
			t.Errorf("parsePodLogDir(%q) accepted", bad)
		}
	}
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if err := os.MkdirAll(to, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
