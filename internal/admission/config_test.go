package admission

import (
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// The kubernetes section as docs/quotas.md shows it loads strictly over
// the defaults, and classes a config lists are added to NVIDIA's.
func TestConfigLoadsOverDefaults(t *testing.T) {
	const section = `
namespaces: {team-acme: acme}
default_model: H100-SXM5-80GB
dra:
  device_classes:
    gpu.example.com: {kind: gpu, all_count: 8}
    mig-3g.example.com: {kind: mig, profile: 3g.40gb}
    dra.net: {kind: none}
  unknown_device_classes: whole_gpu
hami:
  memory_resource: ""
`
	cfg := DefaultConfig()
	dec := yaml.NewDecoder(strings.NewReader(section))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	dc := cfg.DRA.DeviceClasses
	if dc[nvidiaGPUClass].Kind != KindGPU || dc[nvidiaMIGClass].Kind != KindMIG || dc["gpu.example.com"].AllCount != 8 ||
		dc["mig-3g.example.com"].Profile != "3g.40gb" || dc["dra.net"].Kind != KindNone || len(dc) != 5 {
		t.Errorf("device classes %+v", dc)
	}
	if cfg.DRA.UnknownDeviceClasses != UnknownWholeGPU || cfg.DRA.LookupTimeout != 3*time.Second || cfg.DefaultDuration != time.Hour {
		t.Errorf("dra %+v, default_duration %s", cfg.DRA, cfg.DefaultDuration)
	}
	if cfg.HAMi.CoresResource != "nvidia.com/gpucores" || cfg.HAMi.MemoryResource != "" {
		t.Errorf("hami %+v", cfg.HAMi)
	}
	strict := yaml.NewDecoder(strings.NewReader("dra: {device_classes: {x: {kind: gpu, size: 8}}}"))
	strict.KnownFields(true)
	if err := strict.Decode(&cfg); err == nil || !strings.Contains(err.Error(), "size") {
		t.Errorf("an unknown key of a class: %v, want it refused", err)
	}
}
