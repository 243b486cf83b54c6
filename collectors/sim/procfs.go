package sim

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// writeProc writes the files cgroup attribution reads for a new process:
// /proc/<pid>/cgroup in the host's layout, /proc/<pid>/environ for Slurm
// jobs, and the pod's entry in the kubelet pod log directory. A process
// without pod or job gets no files (nothing attributes it).
func (h *Host) writeProc(p *Process) error {
	if h.cfg.Root == "" || (p.Workload.Pod == nil && p.Workload.Slurm == nil) {
		return nil
	}
	dir := filepath.Join(h.procRoot(), strconv.FormatUint(uint64(p.PID), 10))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("sim host %s: procfs: %w", h.cfg.Name, err)
	}
	var cgroup, environ string
	switch {
	case p.Workload.Pod != nil:
		pod := p.Workload.Pod
		cid := containerID(pod.UID, p.PID)
		switch h.cfg.Cgroup {
		case KubernetesCgroupfs:
			path := "/kubepods/burstable/pod" + pod.UID + "/" + cid
			cgroup = cgroupV1(path)
		default:
			uid := strings.ReplaceAll(pod.UID, "-", "_")
			cgroup = "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uid + ".slice/cri-containerd-" + cid + ".scope\n"
		}
		podDir := filepath.Join(h.podLogDir(), pod.Namespace+"_"+pod.Name+"_"+pod.UID)
		if err := os.MkdirAll(podDir, 0o755); err != nil {
			return fmt.Errorf("sim host %s: pod log dir: %w", h.cfg.Name, err)
		}
	case p.Workload.Slurm != nil:
		job := p.Workload.Slurm
		switch h.cfg.Cgroup {
		case SlurmV2:
			cgroup = "0::/system.slice/slurmstepd.scope/job_" + job.ID + "/step_0/user/task_0\n"
		default:
			cgroup = cgroupV1("/slurm/uid_1000/job_" + job.ID + "/step_0/task_0")
		}
		environ = "SLURM_JOB_ID=" + job.ID + "\x00SLURM_JOB_ACCOUNT=" + job.Account + "\x00SLURM_JOB_USER=sim\x00"
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(cgroup), 0o644); err != nil {
		return fmt.Errorf("sim host %s: procfs: %w", h.cfg.Name, err)
	}
	if environ != "" {
		if err := os.WriteFile(filepath.Join(dir, "environ"), []byte(environ), 0o600); err != nil {
			return fmt.Errorf("sim host %s: procfs: %w", h.cfg.Name, err)
		}
	}
	return nil
}

// removeProc removes a stopped process's files (the pod log directory is
// left, as the kubelet leaves it until the pod is deleted).
func (h *Host) removeProc(p *Process) error {
	if h.cfg.Root == "" {
		return nil
	}
	dir := filepath.Join(h.procRoot(), strconv.FormatUint(uint64(p.PID), 10))
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("sim host %s: procfs: %w", h.cfg.Name, err)
	}
	return nil
}

func cgroupV1(path string) string {
	var b strings.Builder
	for i, c := range []string{"memory", "devices", "cpu,cpuacct", "pids"} {
		fmt.Fprintf(&b, "%d:%s:%s\n", 12-i, c, path)
	}
	return b.String()
}

// containerID is a deterministic 64-hex container id.
func containerID(podUID string, pid uint32) string {
	a := splitmix(hashString(podUID) + uint64(pid))
	return fmt.Sprintf("%016x%016x%016x%016x", a, splitmix(a), splitmix(a+1), splitmix(a+2))
}
