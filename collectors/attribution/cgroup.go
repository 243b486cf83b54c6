package attribution

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpumeter/gpumeter/collectors"
)

// CgroupConfig configures PID → workload attribution from procfs.
type CgroupConfig struct {
	// ProcRoot is procfs ("/proc"); tests aim it at testdata.
	ProcRoot string
	// PodLogDir is the kubelet's pod log directory ("/var/log/pods"),
	// whose entries are named <namespace>_<pod>_<uid>: it turns the pod UID
	// found in a cgroup path into namespace and name. Empty: pods are
	// reported by UID only, unattributed.
	PodLogDir string
	// SlurmEnvironment lets a process whose cgroup names no job belong to
	// the Slurm job in its environment (SLURM_JOB_ID): jobs tracked
	// without cgroups (proctrack/linuxproc, pgid) and containers that see
	// only their own cgroup root. The environment is the job's user's to
	// set, so sites with proctrack/cgroup may switch it off.
	SlurmEnvironment bool
}

// DefaultCgroupConfig returns the paths of a standard Linux host.
func DefaultCgroupConfig() CgroupConfig {
	return CgroupConfig{ProcRoot: "/proc", PodLogDir: "/var/log/pods", SlurmEnvironment: true}
}

// Validate reports every problem with the config.
func (c CgroupConfig) Validate() error {
	if c.ProcRoot == "" {
		return errors.New("proc root: missing")
	}
	return nil
}

// Cgroup attributes processes by their cgroup: a Kubernetes pod (cgroupfs
// and systemd cgroup drivers, cgroup v1 and v2) or a Slurm job (v1 and v2
// layouts, or the job's environment where cgroups say nothing; account,
// user and partition come from the job's environment, see ReadSlurmJob).
// What it finds for a PID is cached until the PID leaves the GPUs.
type Cgroup struct {
	cfg     CgroupConfig
	tenancy Tenancy
	logger  *slog.Logger

	cache map[uint32]cachedOwner
	pods  map[string]podRef // by UID
	gen   uint32
}

type cachedOwner struct {
	owner collectors.Owner
	retry bool // a pod not yet in the pod log directory: look again next poll
	gen   uint32
}

type podRef struct{ namespace, name string }

// NewCgroup returns the cgroup attributor.
func NewCgroup(cfg CgroupConfig, tenancy Tenancy, logger *slog.Logger) (*Cgroup, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("cgroup attribution: %w", err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Cgroup{cfg: cfg, tenancy: tenancy, logger: logger, cache: map[uint32]cachedOwner{}, pods: map[string]podRef{}}, nil
}

// Attribute fills the owners of processes nothing attributed yet.
func (c *Cgroup) Attribute(_ context.Context, gpus []collectors.GPUReading) error {
	c.gen++
	scanned := false
	for gi := range gpus {
		for pi := range gpus[gi].Processes {
			p := &gpus[gi].Processes[pi]
			e, ok := c.cache[p.PID]
			if !ok || e.retry {
				e.owner, e.retry = c.lookup(p.PID, &scanned)
			}
			e.gen = c.gen
			c.cache[p.PID] = e
			if p.Owner.IsZero() && !e.owner.IsZero() {
				p.Owner = e.owner
			}
		}
	}
	for pid, e := range c.cache {
		if e.gen != c.gen {
			delete(c.cache, pid)
		}
	}
	return nil
}

// lookup reads one process's cgroup (and, for Slurm, its job's
// environment). retry is true when the answer may improve later (a pod UID
// whose name is not known yet).
func (c *Cgroup) lookup(pid uint32, scanned *bool) (owner collectors.Owner, retry bool) {
	dir := procDir(c.cfg.ProcRoot, pid)
	content, err := os.ReadFile(filepath.Join(dir, "cgroup"))
	if err != nil {
		// Gone, or in a PID namespace we cannot see: nothing to say.
		c.logger.Debug("process cgroup not readable", "pid", pid, "err", err)
		return collectors.Owner{}, false
	}
	ref := ParseCgroup(string(content))
	if ref.PodUID != "" {
		pod, ok := c.pods[ref.PodUID]
		if !ok && !*scanned {
			*scanned = true
			c.scanPods()
			pod, ok = c.pods[ref.PodUID]
		}
		if !ok {
			return collectors.Owner{Workload: "pod/" + ref.PodUID}, true
		}
		workload := pod.namespace + "/" + pod.name
		if t, ok := c.tenancy.Pod(pod.namespace, pod.name); ok {
			return t.owner(workload), false
		}
		return collectors.Owner{Workload: workload}, false
	}
	job, ok := ReadSlurmJob(c.cfg.ProcRoot, pid, c.cfg.SlurmEnvironment)
	if !ok {
		return collectors.Owner{}, false
	}
	if job.Account == "" {
		c.logger.Debug("slurm job environment not readable; account unknown", "pid", pid, "job", job.ID)
		return collectors.Owner{Workload: job.Workload()}, false
	}
	t, mapped := c.tenancy.Account(job.Account)
	c.logger.Debug("slurm job", "pid", pid, "job", job.ID, "account", job.Account, "user", job.User,
		"partition", job.Partition, "from_cgroup", job.FromCgroup, "tenant", t.Name)
	if mapped {
		return t.owner(job.Workload()), false
	}
	return collectors.Owner{Workload: job.Workload()}, false
}

// scanPods rebuilds the pod UID index from the pod log directory.
func (c *Cgroup) scanPods() {
	if c.cfg.PodLogDir == "" {
		return
	}
	entries, err := os.ReadDir(c.cfg.PodLogDir)
	if err != nil {
		c.logger.Debug("pod log directory not readable", "dir", c.cfg.PodLogDir, "err", err)
		return
	}
	pods := make(map[string]podRef, len(entries))
	for _, e := range entries {
		if ns, name, uid, ok := parsePodLogDir(e.Name()); ok {
			pods[uid] = podRef{namespace: ns, name: name}
		}
	}
	c.pods = pods
}

// parsePodLogDir splits "<namespace>_<pod>_<uid>". Namespaces and pod names
// are DNS labels and subdomains: they hold no '_'.
func parsePodLogDir(s string) (ns, name, uid string, ok bool) {
	ns, rest, ok1 := strings.Cut(s, "_")
	name, uid, ok2 := strings.Cut(rest, "_")
	if !ok1 || !ok2 || ns == "" || name == "" || !isPodUID(uid) {
		return "", "", "", false
	}
	return ns, name, normalizeUID(uid), true
}

// CgroupRef is what a /proc/<pid>/cgroup file says about a process.
type CgroupRef struct {
	PodUID      string // Kubernetes pod UID, dashed, lower case
	ContainerID string // 64 hex digits, when the path names it
	SlurmJob    string // Slurm job id
	SlurmStep   string // "0", "batch", "extern", …
}

// ParseCgroup reads the content of /proc/<pid>/cgroup ("hierarchy:
// controllers:path" per line, cgroup v1 or v2) and finds the pod or Slurm
// job in the first path that names one. It never fails: content it does
// not recognise gives an empty CgroupRef.
func ParseCgroup(content string) CgroupRef {
	for _, line := range strings.Split(content, "\n") {
		_, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		_, path, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		if ref := parseCgroupPath(path); ref != (CgroupRef{}) {
			return ref
		}
	}
	return CgroupRef{}
}

// parseCgroupPath knows these layouts:
//
//	cgroupfs driver:  /kubepods/burstable/pod<uid>/<container>
//	                  /kubepods/pod<uid>/<container>            (guaranteed)
//	systemd driver:   /kubepods.slice/kubepods-burstable.slice/
//	                    kubepods-burstable-pod<uid_with_underscores>.slice/
//	                    cri-containerd-<container>.scope
//	                  …/kubepods-burstable-pod<uid>.slice:cri-containerd:<container> (v1)
//	Slurm, cgroup v1: /slurm/uid_<uid>/job_<job>/step_<step>/task_<n>
//	                  (/slurm_<node>/… with several slurmd per host)
//	Slurm, cgroup v2: /system.slice/slurmstepd.scope/job_<job>/step_<step>/user/task_<n>
//
// Paths may sit under a prefix (nested containers, kind).
func parseCgroupPath(path string) CgroupRef {
	var ref CgroupRef
	comps := strings.Split(path, "/")
	inSlurm := false
	for i, comp := range comps {
		if comp == "" {
			continue
		}
		head, tail, _ := strings.Cut(comp, ":")
		if uid, ok := podUIDFromComponent(head); ok {
			ref.PodUID = uid
			switch {
			case tail != "":
				ref.ContainerID = containerID(tail[strings.LastIndexByte(tail, ':')+1:])
			case i+1 < len(comps):
				ref.ContainerID = containerID(comps[i+1])
			}
			return ref
		}
		if strings.HasPrefix(comp, "slurm") {
			inSlurm = true
			continue
		}
		if inSlurm && ref.SlurmJob == "" {
			if job, ok := strings.CutPrefix(comp, "job_"); ok && isDigits(job) {
				ref.SlurmJob = job
				if i+1 < len(comps) {
					if step, ok := strings.CutPrefix(comps[i+1], "step_"); ok && step != "" {
						ref.SlurmStep = step
					}
				}
				return ref
			}
		}
	}
	return CgroupRef{}
}

// podUIDFromComponent recognises "pod<uid>" (cgroupfs) and
// "kubepods[-qos]-pod<uid_with_underscores>.slice" (systemd; kind nests it
// as "kubelet-kubepods-…").
func podUIDFromComponent(comp string) (string, bool) {
	if uid, ok := strings.CutPrefix(comp, "pod"); ok && isPodUID(uid) {
		return normalizeUID(uid), true
	}
	if body, ok := strings.CutSuffix(comp, ".slice"); ok && strings.Contains(body, "kubepods") {
		if i := strings.LastIndex(body, "-pod"); i >= 0 {
			uid := strings.ReplaceAll(body[i+4:], "_", "-")
			if isPodUID(uid) {
				return normalizeUID(uid), true
			}
		}
	}
	return "", false
}

// isPodUID accepts an RFC 4122 UUID (API pods) or 32 hex digits (static
// pods, whose UID is a hash of their manifest).
func isPodUID(s string) bool {
	switch len(s) {
	case 32:
		return isHex(s)
	case 36:
		for i := 0; i < len(s); i++ {
			c := s[i]
			if i == 8 || i == 13 || i == 18 || i == 23 {
				if c != '-' && c != '_' {
					return false
				}
				continue
			}
			if !isHexByte(c) {
				return false
			}
		}
		return true
	}
	return false
}

func normalizeUID(s string) string {
	return strings.ToLower(strings.ReplaceAll(s, "_", "-"))
}

// containerID strips runtime prefixes and the ".scope" suffix and accepts
// 64 hex digits.
func containerID(s string) string {
	s = strings.TrimSuffix(s, ".scope")
	for _, p := range []string{"cri-containerd-", "docker-", "crio-", "cri-o-", "containerd-"} {
		if rest, ok := strings.CutPrefix(s, p); ok {
			s = rest
			break
		}
	}
	if len(s) == 64 && isHex(s) {
		return strings.ToLower(s)
	}
	return ""
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isHexByte(s[i]) {
			return false
		}
	}
	return s != ""
}

func isHexByte(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// environValue finds KEY=value in a NUL-separated /proc/<pid>/environ.
func environValue(env []byte, key string) string {
	for _, kv := range bytes.Split(env, []byte{0}) {
		if k, v, ok := bytes.Cut(kv, []byte{'='}); ok && string(k) == key {
			return string(v)
		}
	}
	return ""
}
