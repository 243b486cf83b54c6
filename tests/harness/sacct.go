package harness

import (
	"os"
	"path/filepath"
	"testing"
)

// Sacct fixtures shared by the import and Slurm tests: a SKU map of the
// test cluster's GRES types and a sacctmgr account tree.
const (
	SacctSKUMap = `gres:
  a100: A100-SXM4-80GB
  h100: H100-SXM5-80GB
  a100_3g.40gb: A100-SXM4-80GB/3g.40gb
untyped: A100-SXM4-40GB
`
	SacctAccounts = "account physics uni-physics physics-dept\naccount chemistry uni-chem chemistry-dept\n"
)

// TempFile writes content to name in a fresh temporary directory and
// returns its path.
func TempFile(t testing.TB, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
