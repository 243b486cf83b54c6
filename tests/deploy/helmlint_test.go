package deploy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"

	"github.com/gpumeter/gpumeter/tests/harness"
)

// helmLint runs `helm lint`'s rules (Chart.yaml, values and their schema,
// templates rendered in lint mode, removed or deprecated Kubernetes APIs)
// on a chart directory and returns what is a warning or worse.
func helmLint(dir string) []string {
	var out []string
	for _, m := range lint.RunAll(dir, nil, helmNamespace).Messages {
		if m.Severity >= support.WarningSev {
			out = append(out, m.Error())
		}
	}
	return out
}

// The chart passes helm lint with no warning (its only message is the
// informational one about an icon), and a template of bad YAML fails it.
func TestHelmLint(t *testing.T) {
	dir := harness.RepoFile(t, "deploy/helm/gpumeter")
	if msgs := helmLint(dir); len(msgs) > 0 {
		t.Errorf("helm lint deploy/helm/gpumeter:\n%s", strings.Join(msgs, "\n"))
	}

	bad := t.TempDir()
	if err := os.CopyFS(bad, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	// A template that renders a document of bad YAML.
	broken := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: broken\ndata:\n  key: [unclosed\n"
	if err := os.WriteFile(filepath.Join(bad, "templates", "broken.yaml"), []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	if msgs := helmLint(bad); len(msgs) == 0 {
		t.Error("helm lint passed a chart with a template of bad YAML")
	}
}
