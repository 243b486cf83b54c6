package partition

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A written plan reads back the same; a misspelt key, an empty file and a
// missing one are errors naming the file.
func TestReadFileWriteFile(t *testing.T) {
	dir := t.TempDir()
	idx := 0
	plan := Plan{GPUs: []GPUPlan{{UUID: "GPU-1", Model: "H100-SXM5-80GB", Index: &idx}}}
	path := filepath.Join(dir, "plan.yaml")
	if err := WriteFile(path, plan); err != nil {
		t.Fatal(err)
	}
	var back Plan
	if err := ReadFile(path, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.GPUs) != 1 || back.GPUs[0].UUID != "GPU-1" || back.GPUs[0].Index == nil || *back.GPUs[0].Index != 0 {
		t.Errorf("read back %+v", back)
	}
	for name, body := range map[string]string{"misspelt.yaml": "gpus:\n  - uuid: g\n    modle: H100-SXM5-80GB\n", "empty.yaml": ""} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		var f Fleet
		if err := ReadFile(p, &f); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := ReadFile(filepath.Join(dir, "none.yaml"), &Fleet{}); err == nil || !strings.Contains(err.Error(), "none.yaml") {
		t.Errorf("a missing file: %v", err)
	}
}
