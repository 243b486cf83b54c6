package agent

import (
	"io"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func parseFlags(t *testing.T, args ...string) (Config, error) {
	t.Helper()
	var f Flags
	fs := pflag.NewFlagSet("collect", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.Register(fs, DefaultSettings())
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return f.Config(fs, DefaultSettings(), "clickhouse://127.0.0.1:9000/default")
}

func TestKubernetesSharingFlags(t *testing.T) {
	c, err := parseFlags(t, "--node-name", "dgx-kube-01", "--hami", "--kubelet-pods-url", "https://127.0.0.1:10250/pods", "--hami-billing", "granted")
	if err != nil {
		t.Fatal(err)
	}
	if c.Host.NodeName != "dgx-kube-01" || !c.Host.HAMi || !c.Granted || c.Host.PodLabels == nil {
		t.Errorf("config %+v", c.Host)
	}
	if c, err := parseFlags(t); err != nil || c.Granted || c.Host.HAMi || c.Host.NodeName != "" {
		t.Errorf("defaults: %+v %v", c.Host, err)
	}
	c, err = parseFlags(t, "--simulate", "--kube", "--duration", "1h")
	if err != nil || c.Simulate.KubeHosts != 1 {
		t.Errorf("--simulate --kube: %+v %v", c.Simulate, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--hami"}, "--hami: needs --kubelet-pods-url"},
		{[]string{"--hami-billing", "cores"}, `--hami-billing: "cores"`},
		{[]string{"--kube"}, "--kube: only with --simulate"},
		{[]string{"--simulate", "--duration", "1h", "--node-name", "n"}, "--node-name, --hami"},
	} {
		if _, err := parseFlags(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err %v, want %q", tc.args, err, tc.want)
		}
	}
}
