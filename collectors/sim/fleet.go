package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gpumeter/gpumeter/collectors"
)

// Config describes a simulated fleet.
type Config struct {
	Hosts int // DGX hosts (Kubernetes and Slurm nodes)
	// VGPUHosts are NVIDIA vGPU hypervisors (PresetVGPU), after the DGX
	// hosts: A100-SXM4-40GB and H100-SXM5-80GB in turn.
	VGPUHosts int
	// KubeHosts are Kubernetes nodes whose GPUs NVIDIA's DRA driver and
	// HAMi hand out (kube.go), after the vGPU hosts: H100-SXM5-80GB,
	// at least 4 GPUs per host, Root required (they serve a socket).
	KubeHosts   int
	GPUsPerHost int
	Seed        int64
	// Start is the simulated time the fleet starts at; it is rounded down
	// to a whole Step.
	Start time.Time
	// Step is the world's granularity; run the collector at the same
	// interval for the ledger to match exactly.
	Step time.Duration
	// Root, when set, is where each host writes its procfs and pod log
	// directory (Root/<host>/…), for cgroup attribution.
	Root string
	// Plants, when set, plants a hoarding tenant, an oversized MIG tenant
	// and a usage spike on the first DGX host (see Plants). Nil: none.
	Plants *Plants
}

// DefaultConfig is two DGX hosts, 10 s steps.
func DefaultConfig() Config {
	return Config{Hosts: 2, GPUsPerHost: 8, Seed: 1, Step: collectors.DefaultInterval}
}

// Validate reports every problem with the config.
func (c Config) Validate() error {
	var errs []error
	if c.Hosts < 0 || c.Hosts > 256 {
		errs = append(errs, fmt.Errorf("hosts: %d is not within 0..256", c.Hosts))
	}
	if c.VGPUHosts < 0 || c.VGPUHosts > 64 {
		errs = append(errs, fmt.Errorf("vgpu hosts: %d is not within 0..64", c.VGPUHosts))
	}
	if c.KubeHosts < 0 || c.KubeHosts > 64 {
		errs = append(errs, fmt.Errorf("kube hosts: %d is not within 0..64", c.KubeHosts))
	}
	if c.KubeHosts > 0 && (c.GPUsPerHost < 4 || c.Root == "") {
		errs = append(errs, fmt.Errorf("kube hosts: need 4 or more gpus per host (not %d) and a root directory", c.GPUsPerHost))
	}
	if c.Hosts+c.VGPUHosts+c.KubeHosts < 1 {
		errs = append(errs, errors.New("hosts: none (DGX, vGPU or Kubernetes)"))
	}
	if c.GPUsPerHost < 1 || c.GPUsPerHost > 16 {
		errs = append(errs, fmt.Errorf("gpus per host: %d is not within 1..16", c.GPUsPerHost))
	}
	if c.Start.IsZero() {
		errs = append(errs, errors.New("start: missing"))
	}
	if c.Step < time.Second || c.Step%time.Second != 0 {
		errs = append(errs, fmt.Errorf("step: %s is not a whole number of seconds", c.Step))
	}
	if err := c.Plants.validate(c); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// tenantSpec is a simulated customer: its Kubernetes namespaces and Slurm
// account.
type tenantSpec struct {
	name, department string
	namespaces       []string
	account          string
}

// The fleet's tenants. "sandbox" (a namespace) and "guest" (an account) are
// in no map: with the default tenancy they are tenants of their own.
var fleetTenants = []tenantSpec{
	{name: "acme", department: "research", namespaces: []string{"acme-train", "acme-serve"}, account: "acme-hpc"},
	{name: "globex", department: "platform", namespaces: []string{"globex-ml"}, account: "globex"},
	{name: "initech", department: "analytics", namespaces: []string{"initech"}, account: "initech-ds"},
	{name: "umbrella", department: "biology", namespaces: []string{"umbrella-bio"}, account: "bio"},
	{name: "sandbox", namespaces: []string{"sandbox"}, account: "guest"},
}

// Fleet is a set of simulated hosts sharing one simulated clock.
type Fleet struct {
	cfg     Config
	hosts   []*Host
	scheds  []*scheduler
	vscheds []*vgpuScheduler

	mu  sync.Mutex
	now time.Time
}

// New builds the fleet and starts its first workloads at Start. Host i has
// GPU model Models()[i%4]; even hosts are Kubernetes nodes (systemd cgroup
// driver, cgroup v2), odd hosts Slurm nodes (cgroup v1). On each host the
// first half of the GPUs are whole (training jobs and notebooks), the next
// quarter are MIG-partitioned with mixed profiles rented to tenants, the
// rest are time-sliced between several tenants' inference and notebooks.
// The vGPU hosts follow (PresetVGPU): VMs of the tenants (and two nothing
// maps) start and stop at random microseconds inside steps, each running
// 2 to 60 minutes.
func New(cfg Config) (*Fleet, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("sim fleet: %w", err)
	}
	start := cfg.Start.UTC().Truncate(cfg.Step)
	f := &Fleet{cfg: cfg, now: start}
	models := Models()
	for i := 0; i < cfg.Hosts; i++ {
		layout := KubernetesSystemd
		if i%2 == 1 {
			layout = SlurmV1
		}
		hc := cfg.hostConfig("sim-", models[i%len(models)], i, cfg.Seed*1_000_003+int64(i), start)
		hc.Cgroup = layout
		h, err := NewHost(hc)
		if err != nil {
			return nil, fmt.Errorf("sim fleet: %w", err)
		}
		s := newScheduler(h, uint64(hc.Seed))
		if i == 0 && cfg.Plants.any() {
			s.plants = cfg.Plants
		}
		if err := startScheduling(h, s, start); err != nil {
			return nil, fmt.Errorf("sim fleet: %w", err)
		}
		f.hosts = append(f.hosts, h)
		f.scheds = append(f.scheds, s)
	}
	vmodels := VGPUModels()
	for i := 0; i < cfg.VGPUHosts; i++ {
		model := vmodels[i%len(vmodels)]
		vc, err := PresetVGPU(model, cfg.GPUsPerHost)
		if err != nil {
			return nil, fmt.Errorf("sim fleet: %w", err)
		}
		hc := cfg.hostConfig("sim-vgpu-", model, i, cfg.Seed*1_000_003+500_000+int64(i), start)
		hc.VGPU = vc
		h, err := NewHost(hc)
		if err != nil {
			return nil, fmt.Errorf("sim fleet: %w", err)
		}
		s := newVGPUScheduler(h, i, uint64(hc.Seed))
		if err := startScheduling(h, s, start); err != nil {
			return nil, fmt.Errorf("sim fleet: %w", err)
		}
		f.hosts = append(f.hosts, h)
		f.vscheds = append(f.vscheds, s)
	}
	for i := 0; i < cfg.KubeHosts; i++ {
		hc := cfg.hostConfig("sim-kube-", "H100-SXM5-80GB", i, cfg.Seed*1_000_003+700_000+int64(i), start)
		hc.Cgroup = KubernetesSystemd
		h, err := NewHost(hc)
		if err != nil {
			return nil, fmt.Errorf("sim fleet: %w", err)
		}
		if err := startScheduling(h, &kubeScheduler{h: h, seed: uint64(hc.Seed)}, start); err != nil {
			return nil, fmt.Errorf("sim fleet: %w", err)
		}
		f.hosts = append(f.hosts, h)
	}
	return f, nil
}

// hostConfig is the config of host i of a kind of the fleet (named for
// prefix and model), under cfg.Root when that is set.
func (c Config) hostConfig(prefix, model string, i int, seed int64, start time.Time) HostConfig {
	hc := HostConfig{
		Name:  fmt.Sprintf("%s%s-%02d", prefix, strings.ToLower(strings.SplitN(model, "-", 2)[0]), i+1),
		Model: model,
		GPUs:  c.GPUsPerHost,
		Seed:  seed,
		Start: start,
		Step:  c.Step,
	}
	if c.Root != "" {
		hc.Root = filepath.Join(c.Root, hc.Name)
	}
	return hc
}

// hostScheduler runs the workloads of one host: it lays out the GPUs, then
// starts and stops work at every step boundary.
type hostScheduler interface {
	layout() error
	boundary(t time.Time) error
}

// startScheduling lays out h with s, hooks s to h's step boundaries and
// runs the first one, at start.
func startScheduling(h *Host, s hostScheduler, start time.Time) error {
	if err := s.layout(); err != nil {
		return err
	}
	h.onBoundary = s.boundary
	return s.boundary(start)
}

// Hosts returns the hosts.
func (f *Fleet) Hosts() []*Host { return f.hosts }

// Start is the fleet's start time.
func (f *Fleet) Start() time.Time { return f.cfg.Start.UTC().Truncate(f.cfg.Step) }

// Step is the fleet's sampling interval.
func (f *Fleet) Step() time.Duration { return f.cfg.Step }

// Now is the fleet's simulated time.
func (f *Fleet) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// AdvanceTo runs every host until t.
func (f *Fleet) AdvanceTo(t time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, h := range f.hosts {
		if err := h.AdvanceTo(t); err != nil {
			return err
		}
	}
	if t.After(f.now) {
		f.now = t
	}
	return nil
}

// Ledger sums the hosts' ledgers.
func (f *Fleet) Ledger() Ledger {
	l := newLedger()
	for _, h := range f.hosts {
		l.Add(h.Ledger())
	}
	return l
}

// MapFile is the attribution map for the fleet, in the format of
// attribution.ParseMapping: the tenants' namespaces and accounts, the
// rented MIG instances, and the vGPU hosts' VMs mapped by the map file
// rather than by libvirt metadata (`vm <VM id> <tenant> <department>`,
// the id as NVML reports it).
func (f *Fleet) MapFile() string {
	var b strings.Builder
	b.WriteString("# gpumeter attribution map of the simulated fleet\n")
	for _, t := range fleetTenants {
		if t.department == "" {
			continue // unmapped on purpose
		}
		for _, ns := range t.namespaces {
			fmt.Fprintf(&b, "namespace %s %s %s\n", ns, t.name, t.department)
		}
		fmt.Fprintf(&b, "account %s %s %s\n", t.account, t.name, t.department)
	}
	if f.cfg.Plants.any() {
		for _, t := range f.cfg.Plants.tenants() {
			fmt.Fprintf(&b, "namespace %s %s %s # planted\n", t.namespaces[0], t.name, t.department)
			fmt.Fprintf(&b, "account %s %s %s # planted\n", t.account, t.name, t.department)
		}
	}
	for _, h := range f.hosts {
		for _, g := range h.gpus {
			for _, in := range g.instances {
				if tenant, dept := in.Tenant(); tenant != "" {
					fmt.Fprintf(&b, "device %s %s %s # %s gpu %d %s\n", in.uuid, tenant, dept, h.cfg.Name, g.index, in.profile.Name)
				}
			}
		}
		for _, vm := range h.VMs() {
			if vm.Tenant != "" && vm.Mapping == VMByMapFile {
				fmt.Fprintf(&b, "vm %s %s %s # %s %s\n", vm.ID(), vm.Tenant, vm.Department, h.cfg.Name, vm.Name)
			}
		}
	}
	return b.String()
}

// Clock is the fleet's time for the poll loop: waiting advances the world.
// speed is simulated seconds per wall second; 0 runs as fast as possible.
func (f *Fleet) Clock(speed float64) collectors.Clock { return fleetClock{f: f, speed: speed} }

type fleetClock struct {
	f     *Fleet
	speed float64
}

func (c fleetClock) Now() time.Time { return c.f.Now() }

func (c fleetClock) WaitUntil(ctx context.Context, t time.Time) error {
	if c.speed > 0 {
		if d := time.Duration(float64(t.Sub(c.f.Now())) / c.speed); d > 0 {
			timer := time.NewTimer(d)
			select {
			case <-ctx.Done():
				timer.Stop()
				return ctx.Err()
			case <-timer.C:
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return c.f.AdvanceTo(t)
}

// scheduler starts and stops a host's workloads at step boundaries.
type scheduler struct {
	h     *Host
	seed  uint64
	rng   *rand.Rand
	roles []gpuRole
	ends  map[uint32]time.Time // pid → end
	jobs  uint64
	// plants is set on the plant host only.
	plants *Plants
}

type gpuRole int

const (
	roleWhole gpuRole = iota
	roleMIG
	roleShared
)

type kind int

const (
	training kind = iota
	inference
	notebook
	stray // a process nothing attributes
)

func newScheduler(h *Host, seed uint64) *scheduler {
	return &scheduler{h: h, seed: seed, rng: rand.New(rand.NewPCG(seed, 0x5eed)), ends: map[uint32]time.Time{}}
}

// layout assigns GPU roles, partitions the MIG GPUs and rents their
// instances.
func (s *scheduler) layout() error {
	n := len(s.h.gpus)
	whole, mig := n/2, n/4
	if n == 1 {
		whole = 1
	}
	layouts := [][]string{{"3g", "2g", "1g", "1g"}, {"4g", "2g", "1g"}}
	for i, g := range s.h.gpus {
		if s.plants != nil {
			if r, ok := s.plants.plantRole(i, whole); ok {
				s.roles = append(s.roles, r)
				if r == roleOversized {
					insts, err := g.EnableMIG(s.profileName("7g"))
					if err != nil {
						return err
					}
					insts[0].Rent(s.plants.OversizedMIG, PlantDepartment)
				}
				continue
			}
		}
		switch {
		case i < whole:
			s.roles = append(s.roles, roleWhole)
		case i < whole+mig:
			s.roles = append(s.roles, roleMIG)
			var names []string
			for _, prefix := range layouts[(i-whole)%len(layouts)] {
				names = append(names, s.profileName(prefix))
			}
			insts, err := g.EnableMIG(names...)
			if err != nil {
				return err
			}
			for k, in := range insts {
				if k == len(insts)-1 && (i-whole)%2 == 0 {
					continue // one instance stays unrented: idle capacity
				}
				t := fleetTenants[s.rng.IntN(len(fleetTenants)-1)]
				in.Rent(t.name, t.department)
			}
		default:
			s.roles = append(s.roles, roleShared)
		}
	}
	return nil
}

// profileName finds the model's profile of a compute size ("3g" →
// "3g.40gb"): the first one in NVIDIA's table order.
func (s *scheduler) profileName(prefix string) string {
	for _, p := range s.h.model.mig.Profiles {
		if strings.HasPrefix(p.Name, prefix+".") && !strings.Contains(p.Name, "+") {
			return p.Name
		}
	}
	return prefix
}

// boundary stops what ended and starts new work.
func (s *scheduler) boundary(t time.Time) error {
	var ended []uint32
	for pid, end := range s.ends {
		if !end.After(t) {
			ended = append(ended, pid)
		}
	}
	sort.Slice(ended, func(i, j int) bool { return ended[i] < ended[j] })
	for _, pid := range ended {
		delete(s.ends, pid)
		if err := s.h.Stop(pid); err != nil {
			return err
		}
	}
	first := t.Equal(s.h.cfg.Start.UTC())
	busy := map[string]int{} // processes per GPU or MIG device
	for _, p := range s.h.Processes() {
		busy[slotKey(p.GPU, p.MIG)]++
	}
	for i, g := range s.h.gpus {
		switch s.roles[i] {
		case roleHoard, roleSpike, roleOversized:
			n := busy[slotKey(i, "")]
			for _, in := range g.Instances() {
				n += busy[slotKey(i, in.uuid)]
			}
			if err := s.plantBoundary(t, i, n); err != nil {
				return err
			}
		case roleWhole:
			if busy[slotKey(i, "")] == 0 && s.chance(first, 0.7, 0.02) {
				k := training
				if s.rng.IntN(5) == 0 {
					k = notebook
				}
				if err := s.start(t, i, "", k, s.anyTenant()); err != nil {
					return err
				}
			}
		case roleMIG:
			for _, in := range g.Instances() {
				tenant, _ := in.Tenant()
				if tenant == "" || busy[slotKey(i, in.uuid)] > 0 || !s.chance(first, 0.6, 0.03) {
					continue
				}
				k := inference
				if s.rng.IntN(3) == 0 {
					k = notebook
				}
				if err := s.start(t, i, in.uuid, k, s.tenant(tenant)); err != nil {
					return err
				}
			}
		case roleShared:
			if busy[slotKey(i, "")] < 3 && s.chance(first, 0.8, 0.04) {
				k := inference
				if s.rng.IntN(3) == 0 {
					k = notebook
				}
				if err := s.start(t, i, "", k, s.anyTenant()); err != nil {
					return err
				}
			}
			if s.rng.IntN(400) == 0 {
				if err := s.start(t, i, "", stray, tenantSpec{}); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func slotKey(gpu int, mig string) string { return fmt.Sprintf("%d/%s", gpu, mig) }

// chance draws with probability p (pFirst at the fleet's start, so that it
// does not start empty).
func (s *scheduler) chance(first bool, pFirst, p float64) bool {
	if first {
		return s.rng.Float64() < pFirst
	}
	return s.rng.Float64() < p
}

func (s *scheduler) anyTenant() tenantSpec { return fleetTenants[s.rng.IntN(len(fleetTenants))] }

func (s *scheduler) tenant(name string) tenantSpec {
	for _, t := range fleetTenants {
		if t.name == name {
			return t
		}
	}
	return tenantSpec{name: name}
}

// start launches one workload of kind k for tenant t.
func (s *scheduler) start(now time.Time, gpu int, mig string, k kind, t tenantSpec) error {
	h := s.h
	s.jobs++
	var minutes [2]int
	var memFrac [2]float64 // of the slot's memory
	switch k {
	case training:
		minutes, memFrac = [2]int{20, 240}, [2]float64{0.6, 0.9}
	case inference:
		minutes, memFrac = [2]int{5, 90}, [2]float64{0.05, 0.2}
	case notebook:
		minutes, memFrac = [2]int{15, 120}, [2]float64{0.03, 0.1}
	case stray:
		minutes, memFrac = [2]int{1, 10}, [2]float64{0.01, 0.02}
	}
	slotMem := h.gpus[gpu].memTotal
	if mig != "" {
		in := h.gpus[gpu].instance(mig)
		slotMem = uint64(in.profile.MemoryGB) << 30
		memFrac = [2]float64{memFrac[0] * 3, min(memFrac[1]*4, 0.9)}
	}
	dur := time.Duration(minutes[0]+s.rng.IntN(minutes[1]-minutes[0]+1)) * time.Minute
	steps := max(1, int64(dur/h.cfg.Step))
	mem := uint64(float64(slotMem) * (memFrac[0] + s.rng.Float64()*(memFrac[1]-memFrac[0])))
	mem &^= 1<<20 - 1 // whole MiB

	p := Process{GPU: gpu, MIG: mig, MemBytes: mem}
	seed := splitmix(s.seed ^ s.jobs)
	p.Util = utilFunc(k, seed)
	if k != stray {
		p.Workload = Workload{Tenant: t.name, Department: t.department}
		name := fmt.Sprintf("%s-%d", map[kind]string{training: "train", inference: "serve", notebook: "notebook"}[k], s.jobs)
		if h.cfg.Cgroup == KubernetesSystemd || h.cfg.Cgroup == KubernetesCgroupfs {
			ns := t.namespaces[int(seed%uint64(len(t.namespaces)))]
			p.Workload.Pod = &Pod{Namespace: ns, Name: name, UID: uuidFrom(h.cfg.Name, "pod", fmt.Sprint(s.jobs))}
		} else {
			p.Workload.Slurm = &SlurmJob{ID: fmt.Sprint(100000 + s.jobs), Account: t.account}
			if t.department == "" {
				// An unmapped account is a tenant of its own.
				p.Workload.Tenant = t.account
			}
		}
	}
	pid, err := h.Start(p)
	if err != nil {
		return err
	}
	s.ends[pid] = now.Add(time.Duration(steps) * h.cfg.Step)
	return nil
}

// utilFunc is a workload's SM utilization per step, a pure function of the
// step number so that it does not depend on call order.
func utilFunc(k kind, seed uint64) func(step int64) uint32 {
	return func(step int64) uint32 {
		x := splitmix(seed + uint64(step))
		switch k {
		case training:
			return 85 + uint32(x%16)
		case inference:
			if x%10 < 7 {
				return 5 + uint32(x>>8%26)
			}
			return 60 + uint32(x>>8%36)
		case notebook:
			if x%4 != 0 {
				return 0
			}
			return 1 + uint32(x>>8%20)
		}
		return 40 + uint32(x>>8%50)
	}
}
